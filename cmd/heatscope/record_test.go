package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/internal/bpftest"
)

// buildHeatscope builds this command into dir and returns its path.
func buildHeatscope(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "heatscope")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build heatscope: %v\n%s", err, out)
	}
	return bin
}

// buildFixtures compiles the C and Go fixture workloads into dir.
func buildFixtures(t *testing.T, dir string) (hotc, hotgo string) {
	t.Helper()
	hotc = filepath.Join(dir, "hotc")
	if out, err := exec.Command("gcc", "-O0", "-g", "-fno-omit-frame-pointer", "-o", hotc, "testdata/hotc.c").CombinedOutput(); err != nil {
		t.Fatalf("build C fixture: %v\n%s", err, out)
	}
	hotgo = filepath.Join(dir, "hotgo")
	if out, err := exec.Command("go", "build", "-o", hotgo, "./testdata/hotgo").CombinedOutput(); err != nil {
		t.Fatalf("build Go fixture: %v\n%s", err, out)
	}
	return hotc, hotgo
}

func start(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// runHeatscope runs the binary and returns its stdout, stderr and error.
func runHeatscope(bin string, args ...string) (string, string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// readProfile parses the pprof file at path.
func readProfile(t *testing.T, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return p
}

// stackNames returns a sample's function names, leaf first.
func stackNames(s *profile.Sample) []string {
	var names []string
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			names = append(names, line.Function.Name)
		}
	}
	return names
}

// userLeafNamed reports whether the leaf user frame of s, the function the
// process ran, was symbolized; a sample with kernel frames only (exec,
// exit) has nothing left to symbolize. The frames under the leaf are not
// asked for: ld.so and libc start-up code have no frame pointers, so the
// walk beyond them can end in garbage.
func userLeafNamed(s *profile.Sample) bool {
	for _, loc := range s.Location {
		if loc.Mapping != nil && loc.Mapping.File == "[kernel.kallsyms]" {
			continue
		}
		return len(loc.Line) > 0 && !strings.HasPrefix(loc.Line[0].Function.Name, "[")
	}
	return true
}

func samplesOf(p *profile.Profile, pid int) []*profile.Sample {
	var out []*profile.Sample
	for _, s := range p.Sample {
		if len(s.Label["pid"]) == 1 && s.Label["pid"][0] == fmt.Sprint(pid) {
			out = append(out, s)
		}
	}
	return out
}

func count(samples []*profile.Sample, keep func(*profile.Sample) bool) (n, total int64) {
	for _, s := range samples {
		total += s.Value[0]
		if keep(s) {
			n += s.Value[0]
		}
	}
	return n, total
}

// TestRecordFixtures records a C program, a Go program and a kernel-heavy dd
// at once, and checks their stacks, labels and the written pprof file.
func TestRecordFixtures(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	hotc, hotgo := buildFixtures(t, dir)
	c := start(t, hotc)
	g := start(t, hotgo)
	// dd reads /dev/zero a megabyte at a time: its time is in the kernel,
	// clearing the buffer under read_iter_zero. (With bs=1 the time is
	// spent entering and leaving syscalls, and on a paravirtualized guest
	// such as this machine's the timer interrupt lands where interrupts
	// are re-enabled, in do_syscall_64 itself: perf record shows 0-6% of
	// its samples in the read path there, so the share said more about
	// the hypervisor than about the sampler.)
	dd := start(t, "dd", "if=/dev/zero", "of=/dev/null", "bs=1M")
	time.Sleep(200 * time.Millisecond) // let them exec and warm up

	out := filepath.Join(dir, "profile.pb.gz")
	data := filepath.Join(dir, "data")
	cpuBefore := map[int]time.Duration{}
	for _, cmd := range []*exec.Cmd{c, g, dd} {
		cpuBefore[cmd.Process.Pid] = bpftest.ProcessCPU(t, cmd.Process.Pid)
	}
	stdout, stderr, err := runHeatscope(bin, "record", "--duration", "5s", "--data", data, "--output", out, "--top", "5")
	if err != nil {
		t.Fatalf("heatscope record: %v\n%s", err, stderr)
	}
	// The samples a workload should have: its CPU time during the run (a
	// little more than the sampling window, as the agent starts) at 99 Hz,
	// so a loaded machine that starves the workloads is not taken for
	// lost samples. minSamples is half of that (the agent's start-up
	// takes a share of the 5 s on a loaded machine).
	minSamples := func(cmd *exec.Cmd) int64 {
		want := bpftest.ExpectedSamples(bpftest.ProcessCPU(t, cmd.Process.Pid)-cpuBefore[cmd.Process.Pid], 99)
		if want < 30 {
			t.Fatalf("%s got only %d samples' worth of CPU in 5 s: the machine is too loaded to check it", cmd.Path, want)
		}
		return want / 2
	}
	if !strings.Contains(stderr, "samples") || !strings.Contains(stderr, "dropped") {
		t.Errorf("no progress or summary on stderr:\n%s", stderr)
	}
	if !strings.Contains(stdout, "function") {
		t.Errorf("no top-functions table on stdout:\n%s", stdout)
	}

	p := readProfile(t, out)
	if err := p.CheckValid(); err != nil {
		t.Fatalf("CheckValid: %v", err)
	}
	if p.Period != int64(time.Second/99) || len(p.SampleType) != 2 || p.SampleType[0].Type != "samples" || p.SampleType[1].Type != "cpu" {
		t.Errorf("period %d, sample types %v", p.Period, p.SampleType)
	}

	t.Run("C call chain", func(t *testing.T) {
		samples := samplesOf(p, c.Process.Pid)
		hot, total := count(samples, func(s *profile.Sample) bool { return stackNames(s)[0] == "hot_c_function" })
		if low := minSamples(c); total < low || hot*100 < total*80 {
			t.Fatalf("hot_c_function is the leaf of %d of %d samples, want >= 80%% of at least %d", hot, total, low)
		}
		chain, _ := count(samples, func(s *profile.Sample) bool {
			names := stackNames(s)
			return len(names) >= 4 && slices.Equal(names[:4], []string{"hot_c_function", "inner", "outer", "main"})
		})
		if chain*100 < hot*95 {
			t.Errorf("only %d of %d hot samples have the chain main -> outer -> inner -> hot_c_function", chain, hot)
		}
		for _, s := range samples {
			if s.Label["comm"][0] != "hotc" || s.Label["tid"][0] != fmt.Sprint(c.Process.Pid) || len(s.NumLabel["cpu"]) != 1 {
				t.Fatalf("labels %v %v, want comm hotc tid %d and a cpu", s.Label, s.NumLabel, c.Process.Pid)
			}
			if m := s.Location[0].Mapping; stackNames(s)[0] == "hot_c_function" && (m.File != hotc || m.BuildID == "") {
				t.Fatalf("hot_c_function's mapping is %q build id %q, want %s with a build id", m.File, m.BuildID, hotc)
			}
		}
	})

	t.Run("Go hot function", func(t *testing.T) {
		samples := samplesOf(p, g.Process.Pid)
		hot, total := count(samples, func(s *profile.Sample) bool { return stackNames(s)[0] == "main.hotGoFunction" })
		if low := minSamples(g); total < low || hot*100 < total*80 {
			t.Fatalf("main.hotGoFunction is the leaf of %d of %d samples, want >= 80%% of at least %d", hot, total, low)
		}
		chain, _ := count(samples, func(s *profile.Sample) bool {
			names := stackNames(s)
			return len(names) >= 2 && names[0] == "main.hotGoFunction" && names[1] == "main.main"
		})
		if chain*100 < hot*95 {
			t.Errorf("only %d of %d hot samples have main.main -> main.hotGoFunction", chain, hot)
		}
		for _, s := range samples {
			if s.Label["comm"][0] != "hotgo" {
				t.Fatalf("comm %q, want hotgo", s.Label["comm"][0])
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%s", g.Process.Pid, s.Label["tid"][0])); err != nil {
				t.Fatalf("tid %s is not a thread of pid %d", s.Label["tid"][0], g.Process.Pid)
			}
		}
	})

	t.Run("kernel syscall path", func(t *testing.T) {
		samples := samplesOf(p, dd.Process.Pid)
		under, total := count(samples, func(s *profile.Sample) bool {
			names := stackNames(s)
			sys := slices.Index(names, "do_syscall_64")
			read := slices.IndexFunc(names, func(n string) bool {
				return n == "vfs_read" || n == "read_zero" || n == "read_iter_zero"
			})
			return read >= 0 && sys > read && s.Location[read].Mapping.File == "[kernel.kallsyms]"
		})
		// perf record -g finds 85% of dd's samples there on this
		// machine, the rest at syscall entry and exit and in user space.
		if low := minSamples(dd); total < low || under*100 < total*50 {
			t.Fatalf("%d of %d dd samples (want at least %d samples, half of them) have vfs_read/read_zero under do_syscall_64", under, total, low)
		}
	})

	t.Run("the data directory holds the same samples", func(t *testing.T) {
		exported := filepath.Join(dir, "exported.pb.gz")
		if _, stderr, err := runHeatscope(bin, "export", "--data", data, "--idle", "include", "-o", exported); err != nil {
			t.Fatalf("export: %v\n%s", err, stderr)
		}
		ep := readProfile(t, exported)
		total := func(p *profile.Profile, pid int) (n int64) {
			for _, s := range p.Sample {
				if pid == 0 || s.Label["pid"][0] == fmt.Sprint(pid) {
					n += s.Value[0]
				}
			}
			return n
		}
		if got, want := total(ep, 0), total(p, 0); got != want || want == 0 {
			t.Fatalf("exported %d samples, the run recorded %d", got, want)
		}
		if got, want := total(ep, c.Process.Pid), total(p, c.Process.Pid); got != want {
			t.Fatalf("exported %d samples of hotc, the run recorded %d", got, want)
		}
	})

	t.Run("go tool pprof reads it", func(t *testing.T) {
		out, err := exec.Command("go", "tool", "pprof", "-top", out).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -top: %v\n%s", err, out)
		}
		for _, want := range []string{"hot_c_function", "main.hotGoFunction"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("pprof -top does not list %s:\n%s", want, out)
			}
		}
	})
}

// TestRecordFolded writes collapsed stacks for one process.
func TestRecordFolded(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	hotc, _ := buildFixtures(t, dir)
	c := start(t, hotc)
	out := filepath.Join(dir, "stacks.folded")
	cpuBefore := bpftest.ProcessCPU(t, c.Process.Pid)
	if _, stderr, err := runHeatscope(bin, "record", "--duration", "2s", "--data", "", "--pid", fmt.Sprint(c.Process.Pid),
		"--format", "folded", "--output", out, "--top", "0"); err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	want := int(bpftest.ExpectedSamples(bpftest.ProcessCPU(t, c.Process.Pid)-cpuBefore, 99))
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var hot, total int
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		stack, n, ok := strings.Cut(line, " ")
		var v int
		if _, err := fmt.Sscan(n, &v); !ok || err != nil || v <= 0 {
			t.Fatalf("bad folded line %q", line)
		}
		if !strings.HasPrefix(stack, "hotc;") {
			t.Fatalf("line %q does not start with the comm", line)
		}
		total += v
		if strings.HasSuffix(stack, ";main;outer;inner;hot_c_function") {
			hot += v
		}
	}
	// want counts the agent's start-up too: 60% of it, and at least 20
	if total < max(20, want*6/10) || hot*100 < total*80 {
		t.Fatalf("%d of %d folded samples (want about %d) end in main;outer;inner;hot_c_function", hot, total, want)
	}
}

// TestShortLivedProcesses checks that processes that exit right after they
// were sampled are still symbolized: 150 ms ones, mostly alive at the poll
// after their first sample, and 20 ms ones, mostly gone by then, which are
// symbolized from the mappings the sampler snapshotted as they exited.
func TestShortLivedProcesses(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	hotc, _ := buildFixtures(t, dir)
	out := filepath.Join(dir, "profile.pb.gz")
	rec := exec.Command(bin, "record", "--duration", "5s", "--data", "", "--output", out, "--top", "0", "--progress", "0")
	var stderr bytes.Buffer
	rec.Stderr = &stderr
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the recorder is sampling
	pids := map[string]bool{}
	var cpu time.Duration // what the short-lived processes used
	for range 10 {
		c := exec.Command(hotc, "0.15") // burns 150 ms, then exits
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		pids[fmt.Sprint(c.Process.Pid)] = true
		cpu += c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	}
	brief := map[string]bool{}
	for range 50 {
		c := exec.Command(hotc, "0.02")
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		pids[fmt.Sprint(c.Process.Pid)] = true
		brief[fmt.Sprint(c.Process.Pid)] = true
		cpu += c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	}
	if err := rec.Wait(); err != nil {
		t.Fatalf("record: %v\n%s", err, stderr.String())
	}
	p := readProfile(t, out)
	var resolved, total, briefResolved, briefTotal int64
	for _, s := range p.Sample {
		pid := s.Label["pid"][0]
		if !pids[pid] {
			continue
		}
		ok := userLeafNamed(s)
		if !ok {
			t.Logf("pid %s: unsymbolized: %v", pid, stackNames(s))
		}
		total += s.Value[0]
		if ok {
			resolved += s.Value[0]
		}
		if brief[pid] {
			briefTotal += s.Value[0]
			if ok {
				briefResolved += s.Value[0]
			}
		}
	}
	if briefTotal < 20 || briefResolved*100 < briefTotal*90 {
		t.Errorf("%d of %d samples of 20 ms processes were symbolized", briefResolved, briefTotal)
	}
	want := bpftest.ExpectedSamples(cpu, 99)
	if want < 20 || total < want*7/10 || resolved*100 < total*90 {
		t.Fatalf("%d of %d samples of short-lived processes (%v of CPU: about %d samples) were symbolized", resolved, total, cpu, want)
	}
}

func TestRecordBadFlags(t *testing.T) {
	bin := buildHeatscope(t, t.TempDir())
	for _, tc := range []struct{ args, want string }{
		{"--frequency 0", "--frequency"},
		{"--frequency 20000", "--frequency"},
		{"--format xml", "--format"},
		{"--stacks both", "--stacks"},
		{"--unwind lbr", "--unwind"},
		{"--unwind-tables none", "--unwind-tables"},
		{"--unwind-tables 0", "--unwind-tables"},
		{"--pid abc", "--pid"},
		{"--duration -1s", "--duration"},
		{"--cgroup /no/such/cgroup", "--cgroup"},
		{"--no-such-flag", "no-such-flag"},
		{"--memory-limit lots", "--memory-limit"},
		{"--symbol-cache 0", "--symbol-cache"},
		{"--cache-size 0", "--cache-size"},
		{"--cache-size big", "--cache-size"},
		{"--event-pattern reset=(unclosed", "reset=(unclosed"},
		{"--event-pattern-file /no/such/patterns", "/no/such/patterns"},
		{"--cpu-profile /no/such/dir/cpu.pprof", "--cpu-profile"},
	} {
		_, stderr, err := runHeatscope(bin, append([]string{"record"}, strings.Fields(tc.args)...)...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("record %s: %v, stderr %q; want exit status 2 naming %s", tc.args, err, stderr, tc.want)
		}
		if strings.Contains(stderr, "panic") {
			t.Errorf("record %s panicked:\n%s", tc.args, stderr)
		}
	}
}

// TestRecordWithoutPrivileges runs the recorder as nobody with no
// capabilities: it must fail with an error naming what is missing.
func TestRecordWithoutPrivileges(t *testing.T) {
	bpftest.Require(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is needed to drop privileges: %v", err)
	}
	dir := t.TempDir()
	// nobody must reach the binary and write the output.
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o777)
	bin := buildHeatscope(t, dir)
	_, stderr, err := runHeatscope(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", bin, "record", "--duration", "1s",
		"--data", filepath.Join(dir, "data"), "--output", filepath.Join(dir, "p.pb.gz"))
	if err == nil {
		t.Fatal("record without privileges succeeded")
	}
	for _, want := range []string{"CAP_BPF", "CAP_PERFMON", "CAP_SYS_ADMIN", "lacks"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("error does not name %s:\n%s", want, stderr)
		}
	}
}

// TestRecordWithoutBTF points the recorder at a BTF file that is not BTF,
// as on a kernel without BTF given a bad --btf.
func TestRecordWithoutBTF(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	bad := filepath.Join(dir, "vmlinux.btf")
	os.WriteFile(bad, []byte("garbage"), 0o644)
	_, stderr, err := runHeatscope(bin, "record", "--duration", "1s", "--btf", bad, "--data", "", "--output", filepath.Join(dir, "p.pb.gz"))
	if err == nil || !strings.Contains(stderr, "BTF") || !strings.Contains(stderr, bad) {
		t.Fatalf("record with bad BTF: %v\n%s", err, stderr)
	}
}

// TestRecordMemoryDefaults checks that the agent's default soft memory
// limit covers its default symbol cache plus the rest of its live heap as
// measured in the soak (docs/benchmarks.md, issue 14: 22 MB besides the
// symbol tables) with at least a fifth to spare: below that the collector
// would run nearly without pause. It fails if --symbol-cache's default is
// raised without --memory-limit's.
func TestRecordMemoryDefaults(t *testing.T) {
	const restOfHeap = 22 << 20
	symCache, err := parseSize(defaultSymbolCache)
	if err != nil {
		t.Fatalf("defaultSymbolCache %q: %v", defaultSymbolCache, err)
	}
	limit, err := parseSize(defaultRecordMemoryLimit)
	if err != nil {
		t.Fatalf("defaultRecordMemoryLimit %q: %v", defaultRecordMemoryLimit, err)
	}
	live := symCache + restOfHeap
	if limit < live+live/5 {
		t.Errorf("--memory-limit %s (%d bytes) leaves less than a fifth over the live heap: --symbol-cache %s + %d MiB = %d bytes",
			defaultRecordMemoryLimit, limit, defaultSymbolCache, restOfHeap>>20, live)
	}
}
