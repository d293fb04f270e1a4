package symbolize

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSeparateDebugFile strips a binary's symbol table into a separate
// debug file, as distributions ship them, and checks that the symbols are
// found through the build id (and are not without the debug file).
func TestSeparateDebugFile(t *testing.T) {
	for _, tool := range []string{"gcc", "objcopy", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to build the fixture (binutils, gcc): %v", tool, err)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "f.c")
	os.WriteFile(src, []byte(`static int __attribute__((noinline)) private_helper(int x) { return x * 3; }
int main(int argc, char **argv) { return private_helper(argc); }
`), 0o644)
	bin := filepath.Join(dir, "f")
	run := func(name string, args ...string) {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("gcc", "-O1", "-Wl,--build-id", "-o", bin, src)
	debug := filepath.Join(dir, "f.debug")
	run("objcopy", "--only-keep-debug", bin, debug)
	run("strip", "--strip-all", bin)

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	id := readBuildID(f)
	if len(id) < 8 {
		t.Fatalf("fixture has no GNU build id (%q)", id)
	}
	debugDir := filepath.Join(dir, "debug")
	os.MkdirAll(filepath.Join(debugDir, ".build-id", id[:2]), 0o755)
	if err := os.Rename(debug, filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")); err != nil {
		t.Fatal(err)
	}
	// The static function's address, from the debug file itself.
	df, _ := elf.Open(filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug"))
	syms, _ := df.Symbols()
	df.Close()
	var addr uint64
	for _, s := range syms {
		if s.Name == "private_helper" {
			addr = s.Value
		}
	}
	if addr == 0 {
		t.Fatal("private_helper not in the debug file")
	}

	with, err := loadBinary(f, id, debugDir)
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := with.lookup(addr); !ok || name != "private_helper" {
		t.Errorf("with the debug file: %q, %v; want private_helper", name, ok)
	}
	without, err := loadBinary(f, id, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := without.lookup(addr); ok && name == "private_helper" {
		t.Errorf("a stripped binary resolved its static function without a debug file")
	}
}
