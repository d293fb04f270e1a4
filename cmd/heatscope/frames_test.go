package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestExportGroupsUnresolvedFrames imports a stripped gzip (40 samples over
// 8 unresolved addresses, 10 in memcpy) and exports it: folded output has
// one "[gzip]" frame by default and the 8 addresses with --addresses;
// pprof keeps the addresses.
func TestExportGroupsUnresolvedFrames(t *testing.T) {
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	data := filepath.Join(dir, "data")
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
	script := filepath.Join(dir, "gzip.perf")
	if err := os.WriteFile(script, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := runHeatscope(bin, "import", "--data", data, script); err != nil {
		t.Fatalf("import: %v\n%s", err, stderr)
	}
	export := func(args ...string) []string {
		t.Helper()
		out := filepath.Join(dir, "out")
		if _, stderr, err := runHeatscope(bin, append([]string{"export", "--data", data, "-o", out}, args...)...); err != nil {
			t.Fatalf("export %v: %v\n%s", args, err, stderr)
		}
		text, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(text)), "\n")
	}
	if got, want := export("--format", "folded"), []string{"gzip;main;[gzip] 40", "gzip;main;memcpy 10"}; !slices.Equal(got, want) {
		t.Errorf("folded: %q, want %q", got, want)
	}
	lines := export("--format", "folded", "--addresses")
	if len(lines) != 9 || lines[0] != "gzip;main;[gzip+0x4000] 5" || lines[7] != "gzip;main;[gzip+0x4700] 5" || lines[8] != "gzip;main;memcpy 10" {
		t.Errorf("folded --addresses: %q", lines)
	}
	out := filepath.Join(dir, "out.pb.gz")
	if _, stderr, err := runHeatscope(bin, "export", "--data", data, "-o", out); err != nil {
		t.Fatalf("export pprof: %v\n%s", err, stderr)
	}
	var names []string
	for _, fn := range readProfile(t, out).Function {
		names = append(names, fn.Name)
	}
	slices.Sort(names)
	if len(names) != 10 || names[0] != "[gzip+0x4000]" || slices.Contains(names, "[gzip]") {
		t.Errorf("pprof functions: %q", names)
	}
}
