package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/store"
)

// recorderCapabilities is the set the recorder runs with, as README.md
// documents it and deploy/ grants it (TestDeployCapabilities checks those).
var recorderCapabilities = []string{"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_SYSLOG"}

// nobodyUID is the uid setpriv --reuid=nobody gives on Debian.
const nobodyUID = 65534

// asNobody returns a command that runs bin as nobody:nogroup with exactly
// caps (names like "CAP_BPF") as its effective, permitted, inheritable,
// ambient and bounding sets.
func asNobody(t *testing.T, caps []string, bin string, args ...string) *exec.Cmd {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is needed to drop privileges: %v", err)
	}
	set := "-all"
	for _, c := range caps {
		set += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
	}
	argv := []string{"--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=" + set, "--bounding-set=" + set}
	if len(caps) > 0 {
		argv = append(argv, "--ambient-caps="+set)
	}
	return exec.Command(setpriv, append(append(argv, bin), args...)...)
}

// nobodyDir makes dir and its parents up to the test's temporary root
// reachable by nobody, and returns a directory inside it that nobody owns.
func nobodyDir(t *testing.T, dir, name string) string {
	t.Helper()
	for d := dir; d != filepath.Dir(os.TempDir()) && d != "/"; d = filepath.Dir(d) {
		if strings.HasPrefix(d, os.TempDir()+"/") {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	out := filepath.Join(dir, name)
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(out, nobodyUID, nobodyUID); err != nil {
		t.Fatal(err)
	}
	return out
}

// kernelFrames counts a profile's kernel frames and those left as
// addresses.
func kernelFrames(p *profile.Profile) (all, unknown int64) {
	for _, s := range p.Sample {
		for _, loc := range s.Location {
			if loc.Mapping == nil || loc.Mapping.File != "[kernel.kallsyms]" {
				continue
			}
			all += s.Value[0]
			if strings.HasPrefix(loc.Line[0].Function.Name, "[kernel.kallsyms+0x") {
				unknown += s.Value[0]
			}
		}
	}
	return all, unknown
}

// TestLeastPrivilege runs the recorder as nobody with exactly the
// documented capabilities, recording a C fixture that root runs, and
// checks its user and kernel frames are symbolized; then checks what
// goes wrong, and what the messages say, with one capability less; and
// that serve needs none.
func TestLeastPrivilege(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := buildHeatscope(t, dir)
	hotc, _ := buildFixtures(t, dir)
	work := nobodyDir(t, dir, "work")
	fixture := start(t, hotc) // root's process: nobody may not read its maps without the capabilities
	// A kernel-heavy process: on a quiet machine the fixture alone, all
	// user time, may give no kernel frame to check.
	start(t, "dd", "if=/dev/zero", "of=/dev/null", "bs=1")

	record := func(caps []string, name string) (string, *profile.Profile, error) {
		t.Helper()
		out := filepath.Join(work, name+".pb.gz")
		cmd := asNobody(t, caps, bin, "record", "--duration", "4s", "--data", filepath.Join(work, name),
			"--listen", "", "--output", out, "--progress", "0")
		b, err := cmd.CombinedOutput()
		if err != nil {
			return string(b), nil, err
		}
		return string(b), readProfile(t, out), nil
	}

	stderr, p, err := record(recorderCapabilities, "full")
	if err != nil {
		t.Fatalf("record as nobody with %v: %v\n%s", recorderCapabilities, err, stderr)
	}
	// It ran as nobody: the data directory's blocks are nobody's.
	blocks, err := store.LocalBlocks(filepath.Join(work, "full"))
	if err != nil || len(blocks) == 0 {
		t.Fatalf("no block written: %v\n%s", err, stderr)
	}
	fi, err := os.Stat(blocks[0].MetaPath())
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != nobodyUID {
		t.Errorf("%s belongs to uid %d, want nobody (%d)", blocks[0].MetaPath(), uid, nobodyUID)
	}
	hot, total := count(samplesOf(p, fixture.Process.Pid), func(s *profile.Sample) bool {
		names := stackNames(s)
		return len(names) > 0 && names[0] == "hot_c_function"
	})
	if total < 50 || hot*2 < total {
		t.Errorf("fixture: %d of %d samples in hot_c_function, want most of at least 50\n%s", hot, total, stderr)
	}
	all, unknown := kernelFrames(p)
	if all == 0 || unknown*100 > all {
		t.Errorf("%d kernel frames, %d of them unsymbolized: want some, under 1%% unknown", all, unknown)
	}
	// Without CAP_SYS_ADMIN the overhead guard cannot turn BPF statistics
	// on: it says so and records anyway.
	if !strings.Contains(stderr, "needs CAP_SYS_ADMIN") {
		t.Errorf("no warning that the guard counts no BPF time:\n%s", stderr)
	}

	// Without CAP_SYSLOG, kernel frames stay addresses (kallsyms shows
	// zeros; kernel.perf_event_paranoid > 1 here) and the warning names it.
	paranoid, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	restrict, _ := os.ReadFile("/proc/sys/kernel/kptr_restrict")
	if strings.TrimSpace(string(paranoid)) >= "2" || strings.TrimSpace(string(restrict)) != "0" {
		stderr, p, err = record(without(recorderCapabilities, "CAP_SYSLOG"), "nosyslog")
		if err != nil {
			t.Fatalf("record without CAP_SYSLOG: %v\n%s", err, stderr)
		}
		if !strings.Contains(stderr, "needs CAP_SYSLOG") {
			t.Errorf("no warning naming CAP_SYSLOG:\n%s", stderr)
		}
		if all, unknown := kernelFrames(p); all == 0 || unknown != all {
			t.Errorf("without CAP_SYSLOG: %d kernel frames, %d unsymbolized; want all unsymbolized", all, unknown)
		}
	}

	// Without CAP_PERFMON or CAP_BPF, record fails and names exactly what
	// is missing.
	for _, c := range []struct {
		caps  []string
		lacks string
	}{
		{without(recorderCapabilities, "CAP_PERFMON"), "this process lacks CAP_PERFMON ("},
		{without(recorderCapabilities, "CAP_BPF"), "this process lacks CAP_BPF ("},
		{nil, "this process lacks CAP_BPF and CAP_PERFMON ("},
	} {
		stderr, _, err := record(c.caps, "fail")
		if err == nil {
			t.Errorf("record with %v succeeded", c.caps)
			continue
		}
		if !strings.Contains(stderr, c.lacks) {
			t.Errorf("record with %v: the error should say %q:\n%s", c.caps, c.lacks, stderr)
		}
		os.RemoveAll(filepath.Join(work, "fail"))
	}

	// serve needs no capability at all.
	addr := "127.0.0.1:" + freePort(t)
	cmd := asNobody(t, nil, bin, "serve", "--data", filepath.Join(work, "full"), "--listen", addr)
	d := &daemon{cmd: cmd, stderr: filepath.Join(t.TempDir(), "stderr"), done: make(chan error, 1)}
	f, err := os.Create(d.stderr)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-d.done })
	waitServing(t, d, "http://"+addr+"/healthz")
	var sources []sourceInfo
	getJSON(t, "http://"+addr+"/api/sources", &sources)
	if len(sources) != 1 || sources[0].Samples == 0 {
		t.Errorf("serve as nobody without capabilities: sources %+v", sources)
	}
	d.stop(t)
}

// without returns caps less one.
func without(caps []string, drop string) []string {
	var out []string
	for _, c := range caps {
		if c != drop {
			out = append(out, c)
		}
	}
	return out
}
