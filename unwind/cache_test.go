package unwind

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

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
