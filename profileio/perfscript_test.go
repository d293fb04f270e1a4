package profileio

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/internal/needs"
	"github.com/heatscope/heatscope/sample"
)

// collect reads all samples of a reader into a slice.
func collect(t *testing.T, read func(fn func(*sample.Sample) error) error) []sample.Sample {
	t.Helper()
	var out []sample.Sample
	if err := read(func(s *sample.Sample) error {
		out = append(out, *s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func readPerfString(t *testing.T, text string) []sample.Sample {
	t.Helper()
	return collect(t, func(fn func(*sample.Sample) error) error {
		return ReadPerfScript(strings.NewReader(text), fn)
	})
}

func TestReadPerfScriptEventLines(t *testing.T) {
	tests := []struct {
		name, line string
		want       sample.Sample
	}{
		{"cpu and tid", "swapper     0 [021] 28648.467059: cpu-clock:",
			sample.Sample{Time: 28648_467059000, CPU: 21, Comm: "swapper"}},
		{"no cpu", "bash 25370 6036.991603: cpu-clock:",
			sample.Sample{Time: 6036_991603000, PID: 25370, TID: 25370, Comm: "bash"}},
		{"pid/tid and cpu", "java 24636/25607 [000] 4794564.109216: cycles:",
			sample.Sample{Time: 4794564_109216000, PID: 24636, TID: 25607, Comm: "java"}},
		{"pid/tid no cpu", "bash 25370/25371 6035935.188539: cpu-clock:",
			sample.Sample{Time: 6035935_188539000, PID: 25370, TID: 25371, Comm: "bash"}},
		{"period", "busy 23090   935.351682:    1001001 cpu-clock:ppp: ",
			sample.Sample{Time: 935_351682000, PID: 23090, TID: 23090, Comm: "busy"}},
		{"period and cpu", "swapper     0 [002] 6034779.719110:   10101010 cpu-clock:",
			sample.Sample{Time: 6034779_719110000, CPU: 2, Comm: "swapper"}},
		{"modifier H", "perf 7 [001] 1.000001: cpu-clock:pppH:",
			sample.Sample{Time: 1_000001000, CPU: 1, PID: 7, TID: 7, Comm: "perf"}},
		{"comm with spaces", "Web Content 1234/1240 [003] 12345.678901: cpu-clock:",
			sample.Sample{Time: 12345_678901000, CPU: 3, PID: 1234, TID: 1240, Comm: "Web Content"}},
		{"comm with digits", "kworker/0:1-eve 15 [000] 12.5: cpu-clock:",
			sample.Sample{Time: 12_500000000, PID: 15, TID: 15, Comm: "kworker/0:1-eve"}},
		{"comm ending in a number", "V8 WorkerThread 2 25607 4794564.109216: cycles:",
			sample.Sample{Time: 4794564_109216000, PID: 25607, TID: 25607, Comm: "V8 WorkerThread 2"}},
		{"right-aligned comm", "     swapper     0 [002] 6035557.056977:   10101010 cpu-clock:",
			sample.Sample{Time: 6035557_056977000, CPU: 2, Comm: "swapper"}},
		{"nanoseconds", "sleep 23118   939.060093381:    1001001 cpu-clock:ppp: ",
			sample.Sample{Time: 939_060093381, PID: 23118, TID: 23118, Comm: "sleep"}},
		{"more than nine digits", "a 1 2.1234567899: cpu-clock:",
			sample.Sample{Time: 2_123456789, PID: 1, TID: 1, Comm: "a"}},
		{"comm with colon", "memfd:sealed-91 20904 [000]   939.228255: cpu-clock:",
			sample.Sample{Time: 939_228255000, PID: 20904, TID: 20904, Comm: "memfd:sealed-91"}},
		{"tracepoint", "bash 9 [001] 5.000000: sched:sched_switch: prev_comm=bash prev_pid=9",
			sample.Sample{Time: 5e9, CPU: 1, PID: 9, TID: 9, Comm: "bash"}},
		{"no task fields", " 3.25: cpu-clock:", sample.Sample{Time: 3_250000000}},
		{"integer seconds", "x 1 [000] 7: cpu-clock:", sample.Sample{Time: 7e9, PID: 1, TID: 1, Comm: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readPerfString(t, tt.line+"\n")
			if len(got) != 1 {
				t.Fatalf("%d samples, want 1", len(got))
			}
			if diff := diffSample(tt.want, got[0]); diff != "" {
				t.Errorf("%q: %s", tt.line, diff)
			}
		})
	}
}

func TestReadPerfScriptFrames(t *testing.T) {
	kernel := sample.KernelModule
	tests := []struct {
		name, line string
		want       sample.Frame
	}{
		{"kernel", "\tffffffff81234567 do_syscall_64+0x5c ([kernel.kallsyms])",
			sample.Frame{Function: "do_syscall_64", Module: kernel, Address: 0xffffffff81234567, Kind: sample.KindKernel}},
		{"kernel module", "\tffffffffc0a1b2c3 nf_hook_slow ([nf_tables])",
			sample.Frame{Function: "nf_hook_slow", Module: "[nf_tables]", Address: 0xffffffffc0a1b2c3, Kind: sample.KindKernel}},
		{"vmlinux", "      2013aa xen_hypercall_sched_op+0xfe20000a (/lib/modules/4.9-virtual/build/vmlinux)",
			sample.Frame{Function: "xen_hypercall_sched_op", Module: "/lib/modules/4.9-virtual/build/vmlinux", Address: 0x2013aa, Kind: sample.KindKernel}},
		{"user", "\t            11d4 hot+0x44 (/tmp/pt/busy)",
			sample.Frame{Function: "hot", Module: "/tmp/pt/busy", Address: 0x11d4, Kind: sample.KindUser}},
		{"unknown symbol", "\t    7f12aabbccdd [unknown] (/usr/lib/libc.so.6)",
			sample.Frame{Function: "[libc.so.6+0x7f12aabbccdd]", Module: "/usr/lib/libc.so.6", Address: 0x7f12aabbccdd, Kind: sample.KindUnknown}},
		{"unknown symbol with dsoff", "\t    7f12aabbccdd [unknown] (/usr/lib/libc.so.6+0x2ccdd)",
			sample.Frame{Function: "[libc.so.6+0x2ccdd]", Module: "/usr/lib/libc.so.6", Address: 0x7f12aabbccdd, Kind: sample.KindUnknown}},
		{"unknown module", "\t    7f8808cae7a8 [unknown] ([unknown])",
			sample.Frame{Function: "[unknown]", Module: "[unknown]", Address: 0x7f8808cae7a8, Kind: sample.KindUnknown}},
		{"unknown kernel symbol", "\tffffffff81000010 [unknown] ([kernel.kallsyms])",
			sample.Frame{Function: "[kernel.kallsyms+0xffffffff81000010]", Module: kernel, Address: 0xffffffff81000010, Kind: sample.KindKernel}},
		{"heatscope unknown name", "\t    1234 [libx.so+0x1234] (/lib/libx.so)",
			sample.Frame{Function: "[libx.so+0x1234]", Module: "/lib/libx.so", Address: 0x1234, Kind: sample.KindUnknown}},
		{"jit", "\t    7f92bdd98965 Ljava/io/OutputStream;::write (/tmp/perf-11936.map)",
			sample.Frame{Function: "Ljava/io/OutputStream;::write", Module: "/tmp/perf-11936.map", Address: 0x7f92bdd98965, Kind: sample.KindJIT}},
		{"heatscope jit", "\t    7f92bdd98965 Interpreter ([jit])",
			sample.Frame{Function: "Interpreter", Module: "[jit]", Address: 0x7f92bdd98965, Kind: sample.KindJIT}},
		{"not a perf map", "\t    7f92bdd98965 f (/tmp/perf-x.map)",
			sample.Frame{Function: "f", Module: "/tmp/perf-x.map", Address: 0x7f92bdd98965, Kind: sample.KindUser}},
		{"arguments", "\t7fa4c651fb95 CardTableModRefBS::process_stride(Space*, MemRegion, int) (/usr/lib/jvm/libjvm.so)",
			sample.Frame{Function: "CardTableModRefBS::process_stride(Space*, MemRegion, int)", Module: "/usr/lib/jvm/libjvm.so", Address: 0x7fa4c651fb95, Kind: sample.KindUser}},
		{"deleted module", "\t           cc266 f (/memfd:sealed-9 (deleted))",
			sample.Frame{Function: "f", Module: "/memfd:sealed-9 (deleted)", Address: 0xcc266, Kind: sample.KindUser}},
		{"operator+", "\t11d4 operator+(int)+0x44 (/a.out)",
			sample.Frame{Function: "operator+(int)", Module: "/a.out", Address: 0x11d4, Kind: sample.KindUser}},
		{"no module", "\t11d4 main",
			sample.Frame{Function: "main", Address: 0x11d4, Kind: sample.KindUser}},
		{"vdso", "\t7ffd1234 __vdso_clock_gettime+0x3 ([vdso])",
			sample.Frame{Function: "__vdso_clock_gettime", Module: "[vdso]", Address: 0x7ffd1234, Kind: sample.KindUser}},
		{"upper-case hex", "\tFFFFFFFF81234567 f ([kernel.kallsyms])",
			sample.Frame{Function: "f", Module: kernel, Address: 0xffffffff81234567, Kind: sample.KindKernel}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readPerfString(t, "x 1 [000] 1.0: cpu-clock:\n"+tt.line+"\r\n")
			if len(got) != 1 || len(got[0].Stack) != 1 {
				t.Fatalf("got %+v, want one sample of one frame", got)
			}
			if got[0].Stack[0] != tt.want {
				t.Errorf("%q: got %+v, want %+v", tt.line, got[0].Stack[0], tt.want)
			}
		})
	}
}

// wantPerfScriptFile are the samples of testdata/perfscript.txt.
var wantPerfScriptFile = []sample.Sample{
	{Time: 939_061108000, Comm: "swapper", Stack: []sample.Frame{
		{Function: "pv_native_safe_halt", Module: sample.KernelModule, Address: 0xffffffff821f4dab, Kind: sample.KindKernel},
		{Function: "default_idle", Module: sample.KernelModule, Address: 0xffffffff821f68b5, Kind: sample.KindKernel},
		{Function: "do_idle", Module: sample.KernelModule, Address: 0xffffffff813c59a6, Kind: sample.KindKernel},
	}},
	{Time: 939_062000000, CPU: 3, PID: 1234, TID: 1240, Comm: "Web Content", Stack: []sample.Frame{
		{Function: "nf_hook_slow", Module: "[nf_tables]", Address: 0xffffffffc0a1b2c3, Kind: sample.KindKernel},
		{Function: "entry_SYSCALL_64_after_hwframe", Module: sample.KernelModule, Address: 0xffffffff81000130, Kind: sample.KindKernel},
		{Function: "[libc.so.6+0x7f12aabbccdd]", Module: "/usr/lib/x86_64-linux-gnu/libc.so.6", Address: 0x7f12aabbccdd, Kind: sample.KindUnknown},
		{Function: "[unknown]", Module: "[unknown]", Address: 0x7f8808cae7a8, Kind: sample.KindUnknown},
	}},
	{Time: 939_063000123, CPU: 1, PID: 15, TID: 15, Comm: "kworker/0:1-eve", Stack: []sample.Frame{
		{Function: "worker_thread", Module: sample.KernelModule, Address: 0xffffffff815f5e66, Kind: sample.KindKernel},
	}},
	{Time: 939_500000000, PID: 4242, TID: 4242, Comm: "java", Stack: []sample.Frame{
		{Function: "Ljava/io/Foo;::bar", Module: "/tmp/perf-4242.map", Address: 0x7f92bdd98965, Kind: sample.KindJIT},
		{Function: "Ljava/io/OutputStream;::write", Module: "/tmp/perf-4242.map", Address: 0x7f92bdd98965, Kind: sample.KindJIT},
		{Function: "[memfd:sealed-91173221a7ea (deleted)+0xcc266]", Module: "/memfd:sealed-91173221a7ea (deleted)", Address: 0xcc266, Kind: sample.KindUnknown},
		{Function: "operator+(int)", Module: "/tmp/pt/busy", Address: 0x11d4, Kind: sample.KindUser},
	}},
	{Time: 940_000001000, PID: 20904, TID: 20904, Comm: "memfd:sealed-91", Stack: []sample.Frame{
		{Function: "inl", Module: "/tmp/pt/busy", Address: 0x11d4, Kind: sample.KindUser},
		{Function: "hot", Module: "/tmp/pt/busy", Address: 0x11d4, Kind: sample.KindUser},
		{Function: "__libc_start_call_main", Module: "/usr/lib/x86_64-linux-gnu/libc.so.6", Address: 0x2724a, Kind: sample.KindUser},
		{Function: "main", Module: "/tmp/pt/busy", Address: 0x1234, Kind: sample.KindUser},
	}},
	{Time: 941_474759000, CPU: 16, PID: 14341, TID: 14341, Comm: "java", Stack: []sample.Frame{
		{Function: "nmethod::is_nmethod() const", Module: "/usr/lib/jvm/libjvm.so", Address: 0x7f36571947c0, Kind: sample.KindUser},
	}},
	{Time: 942_056977000, CPU: 2, Comm: "swapper", Stack: []sample.Frame{
		{Function: "xen_hypercall_sched_op", Module: "/lib/modules/4.9-virtual/build/vmlinux", Address: 0xffffffff810013aa, Kind: sample.KindKernel},
	}},
	{Time: 943_188539000, PID: 25370, TID: 25370, Comm: "bash", Stack: []sample.Frame{
		{Function: "[bash+0xb9218]", Module: "/bin/bash", Address: 0xb9218, Kind: sample.KindUnknown},
		{Function: "[unknown]", Module: "[unknown]", Address: 0x2037fe8, Kind: sample.KindUnknown},
	}},
}

func readPerfFile(t *testing.T, data []byte) []sample.Sample {
	t.Helper()
	return collect(t, func(fn func(*sample.Sample) error) error {
		return ReadPerfScript(bytes.NewReader(data), fn)
	})
}

func TestReadPerfScriptFile(t *testing.T) {
	data, err := os.ReadFile("testdata/perfscript.txt")
	if err != nil {
		t.Fatal(err)
	}
	crlf := bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n"))
	for name, input := range map[string][]byte{
		"plain":     data,
		"crlf":      crlf,
		"gzip":      gzipBytes(t, data),
		"gzip crlf": gzipBytes(t, crlf),
	} {
		t.Run(name, func(t *testing.T) {
			got := readPerfFile(t, input)
			if diff := diffSamples(wantPerfScriptFile, got); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// TestReadPerfScriptStacksAreOwned checks that a callback may keep samples:
// later samples must not overwrite earlier stacks.
func TestReadPerfScriptStacksAreOwned(t *testing.T) {
	data, err := os.ReadFile("testdata/perfscript.txt")
	if err != nil {
		t.Fatal(err)
	}
	var kept []*sample.Sample
	if err := ReadPerfScript(bytes.NewReader(data), func(s *sample.Sample) error {
		kept = append(kept, s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := make([]sample.Sample, len(kept))
	for i, s := range kept {
		got[i] = *s
	}
	if diff := diffSamples(wantPerfScriptFile, got); diff != "" {
		t.Errorf("kept samples changed: %s", diff)
	}
}

func TestReadPerfScriptCallbackError(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	err := ReadPerfScript(strings.NewReader("a 1 1.0: c:\nb 2 2.0: c:\nc 3 3.0: c:\n"), func(*sample.Sample) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Fatalf("err %v after %d samples, want stop after 2", err, n)
	}
}

// TestReadPerfScriptSkipsIndentedLines checks that indented lines of a
// sample that are not frames are skipped, as FlameScope skips them.
func TestReadPerfScriptSkipsIndentedLines(t *testing.T) {
	got := readPerfString(t, "a 1 [000] 1.0: c:\n\tzz f (m)\n  file.c:12\n\t\n\t10 f (/m)\n")
	want := []sample.Sample{{Time: 1e9, PID: 1, TID: 1, Comm: "a", Stack: []sample.Frame{
		{Function: "f", Module: "/m", Address: 0x10, Kind: sample.KindUser},
	}}}
	if diff := diffSamples(want, got); diff != "" {
		t.Error(diff)
	}
}

func TestReadPerfScriptEmpty(t *testing.T) {
	for _, in := range []string{"", "\n\n", "# only a header\n#\n"} {
		if got := readPerfString(t, in); len(got) != 0 {
			t.Errorf("%q gave %d samples", in, len(got))
		}
	}
}

func TestReadPerfScriptGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	data, err := os.ReadFile("testdata/perfscript.txt")
	if err != nil {
		t.Fatal(err)
	}
	gz := gzipBytes(t, data)
	tests := []struct {
		name  string
		input []byte
		want  string // in the error
	}{
		{"random bytes", random, "line 1:"},
		{"truncated gzip", gz[:len(gz)/2], "unexpected EOF"},
		{"frame before header", []byte("# header\n\tffffffff81234567 f ([kernel.kallsyms])\n"), "line 2: stack frame before any sample's event line"},
		{"indented frame before header", []byte("\n     2013aa f (/x)\n"), "line 2: stack frame before"},
		{"bad timestamp", []byte("a 1 [000] 1.0: c:\nb 1 [000] 1.2.3: cpu-clock:\n"), "line 2: bad timestamp"},
		{"huge timestamp", []byte("b 1 [000] 99999999999999999999.0: cpu-clock:\n"), "line 1: bad timestamp"},
		{"not an event line", []byte("a 1 [000] 1.0: c:\n\tff f (m)\nhello world\n"), "line 3: not a perf script event line"},
		{"indented garbage first", []byte("\tzz f (m)\n"), "line 1: not a perf script event line"},
		{"folded stacks", []byte("main;f 3\n"), "line 1: not a perf script event line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ReadPerfScript(bytes.NewReader(tt.input), func(*sample.Sample) error { return nil })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// flameScopeEvent and flameScopeFrame are FlameScope's patterns
// (app/perf/regexp.py), which Go's regexp package runs with the same
// leftmost-first semantics as Python's re.
var (
	flameScopeEvent = regexp.MustCompile(` +([0-9.]+): .+?:`)
	flameScopeFrame = regexp.MustCompile(`^[\t ]*[0-9a-fA-F]+ (.+) \((.*?)\)$`)
)

// TestFindEventTimeMatchesFlameScope checks the byte-level event matcher
// against FlameScope's regexp on tricky lines.
func TestFindEventTimeMatchesFlameScope(t *testing.T) {
	lines := []string{
		"swapper     0 [021] 28648.467059: cpu-clock:",
		"a 1.5:b 2.5: c:",
		"a x1.5: 2.5: c:",
		"a 1.5: c",
		"a 1.5: :",
		"a 1.5: c: 2.5: d:",
		" 1: x:",
		"1.0: x:",
		"a .: x:",
		"a  12: : x:",
		"no event here",
		": : : :",
		"a 1.5:  :",
	}
	for _, line := range lines {
		checkFindEventTime(t, line)
	}
}

func checkFindEventTime(t *testing.T, line string) {
	t.Helper()
	_, s, c, ok := findEventTime([]byte(line))
	m := flameScopeEvent.FindStringSubmatchIndex(line)
	if ok != (m != nil) {
		t.Fatalf("%q: event line %v, FlameScope says %v", line, ok, m != nil)
	}
	if ok && (s != m[2] || c != m[3]) {
		t.Fatalf("%q: time at [%d:%d], FlameScope's at [%d:%d]", line, s, c, m[2], m[3])
	}
}

func samplesForWriting() []sample.Sample {
	return []sample.Sample{
		{Time: 1_700_000_000_123456000, CPU: 3, PID: 1234, TID: 1240, Comm: "Web Content", Stack: []sample.Frame{
			{Function: "vfs_read", Module: sample.KernelModule, Address: 0xffffffff81234567, Kind: sample.KindKernel},
			{Function: "nf_hook_slow", Module: "[nf_tables]", Address: 0xffffffffc0a1b2c3, Kind: sample.KindKernel},
			{Function: "[kernel.kallsyms+0xffffffff81000010]", Module: sample.KernelModule, Address: 0xffffffff81000010, Kind: sample.KindKernel},
			{Function: "read", Module: "/usr/lib/x86_64-linux-gnu/libc.so.6", Address: 0x11d4a0, Kind: sample.KindUser},
			{Function: "[libxul.so+0x1f00]", Module: "/usr/lib/firefox/libxul.so", Address: 0x1f00, Kind: sample.KindUnknown},
			{Function: "[anon+0x7f0000001000]", Module: "[anon]", Address: 0x7f0000001000, Kind: sample.KindUnknown},
			{Function: "Interpreter", Module: "[jit]", Address: 0x7f92bdd98965, Kind: sample.KindJIT},
			{Function: "LFoo;::bar", Module: "/tmp/perf-1234.map", Address: 0x7f92bdd98000, Kind: sample.KindJIT},
			{Function: "std::vector<int>::operator[](unsigned long) const", Module: "/opt/app (deleted)", Address: 0x4010, Kind: sample.KindUser},
			{Function: "main", Module: "/opt/app (deleted)", Address: 0x4000, Kind: sample.KindUser},
		}},
		{Time: 5_000_000, CPU: 0, PID: 0, TID: 0, Comm: "swapper", Stack: []sample.Frame{
			{Function: "default_idle", Module: sample.KernelModule, Address: 0xffffffff821f68b5, Kind: sample.KindKernel},
		}},
		{Time: 7_000_001_000, CPU: 127, PID: 42, TID: 42, Comm: "java 4242", Stack: nil},
		{Time: 8_000_000_000, CPU: 1, PID: 7, TID: 8, Comm: "#hash", Stack: []sample.Frame{
			{Function: "f", Module: "/bin/x", Address: 1, Kind: sample.KindUser},
		}},
		{Time: 9_000_000_000, CPU: 1, PID: 9, TID: 9, Comm: "kworker/0:1-eve", Stack: []sample.Frame{
			{Function: "worker_thread", Module: sample.KernelModule, Address: 0xffffffff815f5e66, Kind: sample.KindKernel},
		}},
	}
}

func writePerfScript(t *testing.T, samples []sample.Sample) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewPerfScriptWriter(&buf)
	for i := range samples {
		if err := w.Add(&samples[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestPerfScriptRoundTrip(t *testing.T) {
	in := samplesForWriting()
	text := writePerfScript(t, in)
	got := readPerfFile(t, text)
	if diff := diffSamples(in, got); diff != "" {
		t.Errorf("round trip: %s\n%s", diff, text)
	}
}

func TestPerfScriptWriterFormat(t *testing.T) {
	var buf bytes.Buffer
	w := NewPerfScriptWriter(&buf)
	w.SetPeriod(1001001)
	s := sample.Sample{Time: 935_351682999, CPU: 2, PID: 10, TID: 11, Comm: "busy\nx", Stack: []sample.Frame{
		{Function: "hot", Module: "/tmp/busy", Address: 0x11d4},
		{Function: "", Module: "", Address: 0x2724a},
	}}
	if err := w.Add(&s); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "busy x 10/11 [002] 935.351682: 1001001 cpu-clock:\n" +
		"\t            11d4 hot (/tmp/busy)\n" +
		"\t           2724a [unknown] ([unknown])\n" +
		"\n"
	if buf.String() != want {
		t.Errorf("wrote\n%q\nwant\n%q", buf.String(), want)
	}
	if err := w.Add(&sample.Sample{Time: -1}); err == nil {
		t.Error("a negative time was written")
	}
}

// TestPerfScriptWriterFlameScope checks that FlameScope's parser would see
// every sample and frame the writer writes.
func TestPerfScriptWriterFlameScope(t *testing.T) {
	in := samplesForWriting()
	events, frames := 0, 0
	for _, line := range strings.Split(string(writePerfScript(t, in)), "\n") {
		switch {
		case line == "":
		case line[0] == '#':
			t.Errorf("FlameScope skips %q as a comment", line)
		case line[0] != '\t' && flameScopeEvent.MatchString(line):
			events++
		case flameScopeFrame.MatchString(line):
			frames++
		default:
			t.Errorf("FlameScope does not recognise %q", line)
		}
	}
	wantFrames := 0
	for _, s := range in {
		wantFrames += len(s.Stack)
	}
	if events != len(in) || frames != wantFrames {
		t.Errorf("FlameScope sees %d events and %d frames, want %d and %d", events, frames, len(in), wantFrames)
	}
}

// TestReadPerfScriptRealPerf records this machine with perf and parses what
// perf script prints.
func TestReadPerfScriptRealPerf(t *testing.T) {
	bpftest.Require(t)
	perf, err := exec.LookPath("perf")
	if err != nil {
		needs.Missing(t, "HEATSCOPE_REQUIRE_BPF", fmt.Sprintf("perf is not installed (apt-get install linux-perf): %v", err))
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "perf.data")
	busy := "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"
	rec := exec.Command(perf, "record", "-e", "cpu-clock", "-F", "999", "-g", "-o", data, "--", "sh", "-c", busy)
	if out, err := rec.CombinedOutput(); err != nil {
		t.Fatalf("perf record: %v\n%s", err, out)
	}
	var text, stderr bytes.Buffer
	script := exec.Command(perf, "script", "-i", data)
	script.Stdout, script.Stderr = &text, &stderr
	if err := script.Run(); err != nil {
		t.Fatalf("perf script: %v\n%s", err, stderr.String())
	}
	wantSamples := 0
	for _, line := range strings.Split(text.String(), "\n") {
		if !strings.HasPrefix(line, "\t") && strings.Contains(line, " cpu-clock") {
			wantSamples++
		}
	}
	if wantSamples < 10 {
		t.Fatalf("perf recorded only %d samples:\n%s", wantSamples, text.String())
	}
	got := readPerfFile(t, text.Bytes())
	if len(got) != wantSamples {
		t.Fatalf("read %d samples, perf script printed %d", len(got), wantSamples)
	}
	shSamples := 0
	for i, s := range got {
		if s.Time <= 0 || s.Comm == "" || s.PID == 0 || s.TID == 0 || len(s.Stack) == 0 {
			t.Fatalf("sample %d incomplete: %+v", i, s)
		}
		if s.Comm != "sh" {
			continue
		}
		shSamples++
		for _, f := range s.Stack {
			if f.Function == "" || (f.Kind == sample.KindUser && f.Module == "") {
				t.Fatalf("sample %d has a bad frame %+v", i, f)
			}
		}
	}
	if shSamples < wantSamples/2 {
		t.Errorf("only %d of %d samples are of the busy shell", shSamples, wantSamples)
	}
	gz := gzipBytes(t, text.Bytes())
	if again := readPerfFile(t, gz); diffSamples(got, again) != "" {
		t.Error("the gzipped perf script reads differently")
	}
}

func gzipBytes(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
