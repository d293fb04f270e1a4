package query

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

func TestUnresolvedModule(t *testing.T) {
	for _, c := range []struct {
		name, module string
		ok           bool
	}{
		{"[gzip+0x4ce8]", "gzip", true},
		{"[libc.so.6+0x10A0f]", "libc.so.6", true},
		{"[kernel.kallsyms+0xffffffff81000000]", "kernel.kallsyms", true},
		{"[a+b+0x1]", "a+b", true},
		{"[x+0x]", "", false},
		{"[+0x1]", "", false},
		{"[gzip]", "", false},
		{"[unknown]", "", false},
		{"[gzip+0x4ce8g]", "", false},
		{"gzip+0x4ce8", "", false},
		{"[gzip+0x4ce8] ", "", false},
		{"main", "", false},
		{"", "", false},
	} {
		module, ok := UnresolvedModule(c.name)
		if module != c.module || ok != c.ok {
			t.Errorf("UnresolvedModule(%q) = %q, %v; want %q, %v", c.name, module, ok, c.module, c.ok)
		}
		want := c.name
		if c.ok {
			want = "[" + c.module + "]"
		}
		if got := GroupAddresses.Name(c.name); got != want {
			t.Errorf("GroupAddresses.Name(%q) = %q, want %q", c.name, got, want)
		}
		if got := KeepAddresses.Name(c.name); got != c.name {
			t.Errorf("KeepAddresses.Name(%q) = %q", c.name, got)
		}
	}
	for v, want := range map[string]Frames{"": GroupAddresses, "group": GroupAddresses, "show": KeepAddresses} {
		if fr, err := ParseFrames(v); err != nil || fr != want {
			t.Errorf("ParseFrames(%q) = %v, %v", v, fr, err)
		}
	}
	if _, err := ParseFrames("keep"); err == nil || !strings.Contains(err.Error(), "addresses") {
		t.Errorf("ParseFrames(keep): %v", err)
	}
}

// FuzzUnresolvedModule checks that a name UnresolvedModule takes apart is
// exactly "[module+0xHEX]", grouped as "[module]", and that any other name
// is left as it is.
func FuzzUnresolvedModule(f *testing.F) {
	for _, s := range []string{"[gzip+0x4ce8]", "[a+0x1+0x2]", "[+0x1]", "[x+0x]", "main", "[unknown]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		module, ok := UnresolvedModule(name)
		grouped := GroupAddresses.Name(name)
		if !ok {
			if module != "" || grouped != name {
				t.Fatalf("%q: module %q, grouped %q", name, module, grouped)
			}
			return
		}
		hex, found := strings.CutPrefix(name, "["+module+"+0x")
		hex, closed := strings.CutSuffix(hex, "]")
		if module == "" || !found || !closed || hex == "" || strings.Trim(hex, "0123456789abcdefABCDEF") != "" || grouped != "["+module+"]" {
			t.Fatalf("%q: module %q, grouped %q", name, module, grouped)
		}
	})
}

func TestFramesSampleCopies(t *testing.T) {
	s := &sample.Sample{Comm: "gzip", Stack: []sample.Frame{{Function: "[gzip+0x10]"}, {Function: "main"}}}
	got := GroupAddresses.Sample(s)
	if got == s || got.Stack[0].Function != "[gzip]" || got.Stack[1].Function != "main" || s.Stack[0].Function != "[gzip+0x10]" {
		t.Errorf("grouped %+v, original %+v", got, s)
	}
	if KeepAddresses.Sample(s) != s {
		t.Error("KeepAddresses copied the sample")
	}
	plain := &sample.Sample{Stack: []sample.Frame{{Function: "main"}}}
	if GroupAddresses.Sample(plain) != plain {
		t.Error("a sample without unresolved frames was copied")
	}
}

// strippedScript is a perf script of a stripped gzip: 40 samples spread
// over 8 addresses of its text, all called from main, plus 10 samples in
// a resolved function.
func strippedScript() string {
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, "gzip 77/77 [000] %d.%06d: 10101010 cpu-clock:\n", 1000+i/10, (i%10)*100000)
		if i < 40 {
			fmt.Fprintf(&b, "\t    %x [unknown] (/usr/bin/gzip)\n", 0x4000+0x100*(i%8))
		} else {
			b.WriteString("\t    7f0000001000 memcpy (/usr/lib/libc.so.6)\n")
		}
		b.WriteString("\t    401000 main (/usr/bin/gzip)\n\n")
	}
	return b.String()
}

// TestUnresolvedFramesGrouped checks flame graphs, differentials, top
// tables and growth with unresolved frames grouped per module (one
// "[gzip]" of all 40 samples) and with their addresses (8 frames of 5).
func TestUnresolvedFramesGrouped(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Import("gzip", 0, func(fn func(*sample.Sample) error) error {
		return profileio.ReadPerfScript(strings.NewReader(strippedScript()), fn)
	}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := store.Range{From: 1000e9, To: 1005e9}
	f := &store.Filter{}
	under := func(root *Node) map[string]int64 {
		out := map[string]int64{}
		for _, n := range root.Children[0].Children[0].Children { // root, gzip, main
			out[n.Name] = n.Value
		}
		return out
	}
	root, _, err := GroupedFlameGraphOf(ctx, db, r, f, GroupNone, GroupAddresses)
	if err != nil {
		t.Fatal(err)
	}
	if got := under(root); len(got) != 2 || got["[gzip]"] != 40 || got["memcpy"] != 10 {
		t.Errorf("grouped flame graph under main: %v", got)
	}
	root, _, _ = GroupedFlameGraphOf(ctx, db, r, f, GroupNone, KeepAddresses)
	got := under(root)
	if len(got) != 9 || got["memcpy"] != 10 {
		t.Errorf("flame graph with addresses under main: %v", got)
	}
	for name, n := range got {
		if name != "memcpy" && (n != 5 || !strings.HasPrefix(name, "[gzip+0x")) {
			t.Errorf("flame graph with addresses: %s %d", name, n)
		}
	}

	top, _, err := TopOf(ctx, db, r, f, GroupNone, GroupAddresses)
	if err != nil {
		t.Fatal(err)
	}
	if fn := top.Functions[0]; len(top.Functions) != 3 || fn.Name != "[gzip]" || fn.Kind != "unknown" || fn.Self != 40 || fn.Total != 40 ||
		fn.SelfCPU != fn.TotalCPU || math.Abs(fn.SelfCPU-40*float64(store.DefaultPeriodNs)/1e9) > 1e-9 {
		t.Errorf("grouped top: %+v", top.Functions)
	}
	top, _, _ = TopOf(ctx, db, r, f, GroupNone, KeepAddresses)
	if len(top.Functions) != 10 || top.Functions[0].Name != "memcpy" || top.Functions[1].Self != 5 {
		t.Errorf("top with addresses: %+v", top.Functions)
	}

	// A (the last 2 s: 10 gzip samples and 10 memcpy) against B (the 2 s
	// before: 20 gzip).
	a, b := store.Range{From: 1003e9, To: 1005e9}, store.Range{From: 1001e9, To: 1003e9}
	d, _, err := DiffOf(ctx, db, a, b, f, ByLength, GroupAddresses)
	if err != nil {
		t.Fatal(err)
	}
	main := d.Root.Children[0].Children[0]
	i := slices.IndexFunc(main.Children, func(n *DiffNode) bool { return n.Name == "[gzip]" })
	// CPU time: one period throughout.
	period := store.DefaultPeriodNs
	if i < 0 || main.Children[i].A != 10*period || main.Children[i].B != 20*period || main.Children[i].Delta != -10*period {
		t.Errorf("grouped diff under main: [gzip] at %d of %d children, want A 10, B 20 and delta -10 periods", i, len(main.Children))
		for _, c := range main.Children {
			t.Logf("%+v", *c)
		}
	}
	g, _, err := GrowthOf(ctx, db, a, b, f, ByTotal, GroupAddresses)
	if err != nil {
		t.Fatal(err)
	}
	i = slices.IndexFunc(g.Functions, func(fn Growth) bool { return fn.Name == "[gzip]" })
	if i < 0 || g.Functions[i].Total != 10 || g.Functions[i].Total2 != 20 || len(g.Functions) != 3 {
		t.Errorf("grouped growth: %+v", g.Functions)
	}

	// pprof keeps every address.
	p, _, err := PprofOf(ctx, db, r, f)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, fn := range p.Function {
		names[fn.Name] = true
	}
	if names["[gzip]"] || len(names) != 10 {
		t.Errorf("pprof functions: %v", names)
	}
}

// BenchmarkFlameGraphAddresses builds the flame graph of 10 s of a 4-CPU
// recording with unresolved frames grouped (the default) and kept: the
// grouping renames each distinct frame once per chunk, so the two should
// cost the same (compare the medians of -count=5). synth's frames are all
// resolved: this measures the check every distinct frame name goes through.
func BenchmarkFlameGraphAddresses(b *testing.B) {
	start := int64(1795237380e9)
	db, _ := testStore(b, synth.Config{CPUs: 4, Hz: 99, Start: start, Seconds: 10, Stacks: 2000})
	r := store.Range{From: start, To: start + 11e9}
	for _, c := range []struct {
		name string
		fr   Frames
	}{{"group", GroupAddresses}, {"show", KeepAddresses}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, _, err := GroupedFlameGraphOf(context.Background(), db, r, &store.Filter{}, GroupNone, c.fr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
