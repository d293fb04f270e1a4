package unwind

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/fixture"
)

func TestCacheRoundTrip(t *testing.T) {
	bin := fixture.BuildC(t, "", "gcc", "chain", chainSource, "-O2", "-fomit-frame-pointer")
	c := Cache{Dir: t.TempDir()}
	first, hit, err := c.Load(bin)
	if err != nil {
		t.Fatal(err)
	}
	if hit {
		t.Fatal("the first load hit an empty cache")
	}
	if !c.Has(first.BuildID) || c.Has("00000000deadbeef") || (Cache{}).Has(first.BuildID) {
		t.Fatalf("Has: %v for the table saved, %v for another build id, %v without a directory; want true, false, false",
			c.Has(first.BuildID), c.Has("00000000deadbeef"), (Cache{}).Has(first.BuildID))
	}
	files, _ := filepath.Glob(filepath.Join(c.Dir, "unwind", "*.table"))
	if len(files) != 1 || filepath.Base(files[0]) != first.BuildID+".table" {
		t.Fatalf("cache files %v, want one named after build id %s", files, first.BuildID)
	}
	second, hit, err := c.Load(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !hit {
		t.Fatal("the second load did not use the cache")
	}
	if !slices.Equal(first.Rows, second.Rows) || first.Stats != second.Stats || first.BuildID != second.BuildID {
		t.Fatalf("cached table differs: %d rows %+v, want %d rows %+v", len(second.Rows), second.Stats, len(first.Rows), first.Stats)
	}

	// A corrupt file is compiled again and rewritten, not trusted.
	b, _ := os.ReadFile(files[0])
	b[len(b)-3] ^= 0xff
	if err := os.WriteFile(files[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	third, hit, err := c.Load(bin)
	if err != nil || hit {
		t.Fatalf("load with a corrupt cache file: hit %v, err %v; want a compile", hit, err)
	}
	if !slices.Equal(first.Rows, third.Rows) {
		t.Fatal("the table compiled after a corrupt cache differs")
	}
	if _, err := DecodeTable(b); err == nil {
		t.Fatal("DecodeTable accepted a corrupt file")
	}
}

func TestCacheWithoutDir(t *testing.T) {
	bin := fixture.BuildC(t, "", "gcc", "chain", chainSource, "-O2")
	tab, hit, err := Cache{}.Load(bin)
	if err != nil || hit || len(tab.Rows) == 0 {
		t.Fatalf("Load without a cache dir: %d rows, hit %v, err %v", len(tab.Rows), hit, err)
	}
	if _, _, err := (Cache{}).Load(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("Load of a missing file: no error")
	}
}

// TestCacheBound fills the cache past its bound with real table files: the
// least recently used are removed, by modification time, a table read from
// the cache counts as used, and the kernel symbols in the same directory
// are left alone.
func TestCacheBound(t *testing.T) {
	bin := fixture.BuildC(t, "", "gcc", "chain", chainSource, "-O2")
	other := fixture.BuildC(t, "", "gcc", "chain0", chainSource, "-O0")
	tab, _, err := Cache{}.Load(bin)
	if err != nil {
		t.Fatal(err)
	}
	enc := tab.Encode()
	size := int64(len(enc))
	pruned := &PruneStats{}
	c := Cache{Dir: t.TempDir(), MaxBytes: 4*size + size/2, Pruned: pruned}
	dir := filepath.Join(c.Dir, "unwind")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	put := func(name string, data []byte, mtime time.Time) {
		t.Helper()
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(file, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Now().Add(-24 * time.Hour)
	var ids []string
	for i := range 6 { // ids[0] the least recently used
		ids = append(ids, fmt.Sprintf("%016x", i+1))
		put(ids[i]+".table", enc, base.Add(time.Duration(i)*time.Hour))
	}
	put(tab.BuildID+".table", enc, base.Add(-time.Hour)) // the oldest of all, until read
	put(".table-stale", enc, base)                       // left by an agent that died writing
	put(".table-fresh", enc, time.Now())                 // being written by another agent
	kallsyms := filepath.Join(c.Dir, "kallsyms.cache")
	if err := os.WriteFile(kallsyms, make([]byte, 10*size), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, hit, err := c.Load(bin); err != nil || !hit {
		t.Fatalf("load of a cached table: hit %v, err %v", hit, err)
	}
	check := func(when string, want ...string) {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		var total int64
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, e.Name())
			if strings.HasSuffix(e.Name(), ".table") {
				total += info.Size()
			}
		}
		if total > c.MaxBytes {
			t.Errorf("%s: %d bytes of tables, more than the %d-byte bound", when, total, c.MaxBytes)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: files %v, want %v", when, got, want)
		}
		if _, err := os.Stat(kallsyms); err != nil {
			t.Errorf("%s: the kernel symbol cache is gone: %v", when, err)
		}
	}

	// At start: 7 tables of which 4 fit; the one just read is kept.
	files, bytes := c.Prune()
	if files != 3 || bytes != 3*size {
		t.Errorf("Prune removed %d files of %d bytes, want 3 of %d", files, bytes, 3*size)
	}
	check("after Prune", ids[3]+".table", ids[4]+".table", ids[5]+".table", tab.BuildID+".table", ".table-fresh")

	// A write that takes the cache over its bound removes the least
	// recently used again.
	second, hit, err := c.Load(other)
	if err != nil || hit {
		t.Fatalf("load of an uncached binary: hit %v, err %v", hit, err)
	}
	if second.BuildID == tab.BuildID {
		t.Fatalf("the second binary's build id %s is the first's", second.BuildID)
	}
	if s := int64(len(second.Encode())); s <= size/2 || s > size+size/2 {
		t.Fatalf("the second table's file has %d bytes, the first's %d: the test wants one more over the bound, one fewer within it", s, size)
	}
	check("after a write", ids[4]+".table", ids[5]+".table", tab.BuildID+".table", second.BuildID+".table", ".table-fresh")
	if pruned.Files.Load() != 4 || pruned.Bytes.Load() != uint64(4*size) {
		t.Errorf("PruneStats: %d files, %d bytes; want 4 files, %d bytes", pruned.Files.Load(), pruned.Bytes.Load(), 4*size)
	}
	if files, _ := c.Prune(); files != 0 {
		t.Errorf("Prune within the bound removed %d files", files)
	}
}
