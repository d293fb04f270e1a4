package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// layoutRow is a row of README's Layout table: its path.
var layoutRow = regexp.MustCompile("(?m)^\\| `([^`]+)/` \\|")

// TestLayoutListsEveryPackage checks README's Layout table against the
// tree: every directory holding Go code (outside testdata and other
// modules) has a row, and every row names a directory that exists.
func TestLayoutListsEveryPackage(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(readme), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	rows := map[string]bool{}
	for _, m := range layoutRow.FindAllStringSubmatch(layout, -1) {
		rows[m[1]] = true
		if st, err := os.Stat(filepath.Join("..", m[1])); err != nil || !st.IsDir() {
			t.Errorf("README's Layout lists %s/, which is not a directory of the repository", m[1])
		}
	}
	if len(rows) == 0 {
		t.Fatal("README's Layout section has no rows")
	}
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if strings.HasSuffix(d.Name(), ".go") && !strings.HasSuffix(d.Name(), "_test.go") && dir != "." && !rows[dir] {
			rows[dir] = true // named once
			t.Errorf("%s/ holds Go code (%s) but has no row in README's Layout table", dir, d.Name())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
