package kernels

import (
	"maps"
	"os"
	"strings"
	"testing"
)

func readConsole(t *testing.T, name string) map[string]string {
	t.Helper()
	out, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := Sections(out)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// wantPass fails t for each of checks that did not pass.
func wantPass(t *testing.T, got map[string]Result, checks ...string) {
	t.Helper()
	for _, c := range checks {
		if got[c].Status != Pass {
			t.Errorf("%s: %s %s, want pass", c, got[c].Status, got[c].Figure)
		}
	}
}

func statuses(results []Result) map[string]Result {
	m := map[string]Result{}
	for _, r := range results {
		m[r.Check] = r
	}
	return m
}

// TestJudgeDebian12 judges a real run on Debian 12's cloud kernel (6.1,
// qemu, the runner of this directory): every check passes but exit
// snapshots, which 6.1 cannot take (detected, not assumed). The same run
// with the table walk's result before issue 21's fix (no frame reached
// main), or with a fallback a 6.1 kernel should not need, fails.
func TestJudgeDebian12(t *testing.T) {
	sec := readConsole(t, "console-6.1.0-47-cloud-amd64.log")
	got := statuses(Judge(sec))
	wantPass(t, got, CheckLoad, CheckSampling, CheckKernel, CheckUser, CheckTableWalk, CheckKmsg, CheckSaturation, CheckContainer)
	if r := got[CheckSnapshots]; r.Status != Unsupported || !strings.Contains(r.Figure, "sched_process_exit") {
		t.Errorf("exit snapshots on 6.1: %s %q, want not supported with the reason", r.Status, r.Figure)
	}
	if r := got[CheckTableWalk]; !strings.Contains(r.Figure, "425 of 425 samples (100%) reach main") {
		t.Errorf("table walk figure %q", r.Figure)
	}

	broken := maps.Clone(sec)
	broken["walk.folded"] = "zznofp;zz_nofp_leaf 468\nzznofp;[unknown];register_tm_clones;zz_nofp_leaf 27\nexit status 0\n"
	if r := statuses(Judge(broken))[CheckTableWalk]; r.Status != Fail {
		t.Errorf("no sample reaching main: table walk %s %q, want a failure", r.Status, r.Figure)
	}
	broken["record.err"] = sec["record.err"] + "unwind: the table walk is off, user stacks were walked with frame pointers: check table-maps failed: update: invalid argument\n"
	if r := statuses(Judge(broken))[CheckTableWalk]; r.Status != Fail || !strings.Contains(r.Figure, "table-maps") {
		t.Errorf("a table-maps fallback on 6.1: table walk %s %q, want a failure naming it", r.Status, r.Figure)
	}
	delete(broken, "record.rc")
	for _, r := range Judge(broken) {
		if r.Status != Fail {
			t.Errorf("record did not finish: %s is %s", r.Check, r.Status)
		}
	}
}

// TestJudgeDebian11 judges a real run on Debian 11's cloud kernel (5.10):
// it loads and samples, and the table walk and exit snapshots are not
// supported, each as heatscope detected and said (bpf_loop; the exit
// tracepoint). The same fallback on a kernel of 5.17 or later fails.
func TestJudgeDebian11(t *testing.T) {
	sec := readConsole(t, "console-5.10.0-46-cloud-amd64.log")
	got := statuses(Judge(sec))
	wantPass(t, got, CheckLoad, CheckSampling, CheckKernel, CheckUser, CheckKmsg, CheckSaturation, CheckContainer)
	if r := got[CheckTableWalk]; r.Status != Unsupported || !strings.Contains(r.Figure, "FnLoop") {
		t.Errorf("table walk on 5.10: %s %q, want not supported, naming bpf_loop", r.Status, r.Figure)
	}
	if r := got[CheckSnapshots]; r.Status != Unsupported {
		t.Errorf("exit snapshots on 5.10: %s %q, want not supported", r.Status, r.Figure)
	}
	newer := maps.Clone(sec)
	newer["uname"] = "5.17.0-1-amd64\n"
	if r := statuses(Judge(newer))[CheckTableWalk]; r.Status != Fail {
		t.Errorf("the helpers fallback on 5.17: %s %q, want a failure", r.Status, r.Figure)
	}
}

// TestJudgeArm64 judges a real run on Debian 12's arm64 cloud kernel: it
// loads and samples by frame pointers; the table walk's program (x86-64's
// registers) is refused at load, which heatscope says, so the walk is not
// supported there; the same fallback on x86-64 fails.
func TestJudgeArm64(t *testing.T) {
	sec := readConsole(t, "console-6.1.0-56-cloud-arm64.log")
	got := statuses(Judge(sec))
	wantPass(t, got, CheckLoad, CheckSampling, CheckKernel, CheckUser, CheckKmsg, CheckSaturation, CheckContainer)
	if r := got[CheckTableWalk]; r.Status != Unsupported || !strings.Contains(r.Figure, "table-walking program") {
		t.Errorf("table walk on arm64: %s %q, want not supported, naming the refused program", r.Status, r.Figure)
	}
	// CI's run of 2026-11-28: 44 samples, none in getppid's short handler,
	// every one of them from the system call entry up.
	var noHandler strings.Builder
	for line := range strings.SplitSeq(sec["kernel.folded"], "\n") {
		if line == "" || strings.Contains(line, "sys_getppid") {
			continue
		}
		noHandler.WriteString(line + "\n")
	}
	cut := maps.Clone(sec)
	cut["kernel.folded"] = noHandler.String()
	if r := statuses(Judge(cut))[CheckKernel]; r.Status != Pass || !strings.Contains(r.Figure, "0 in getppid's handler") {
		t.Errorf("no sample in the handler, all from the entry: kernel stacks %s %q, want a pass saying so", r.Status, r.Figure)
	}
	cut["kernel.folded"] = "zzsys 44\nexit status 0\n"
	if r := statuses(Judge(cut))[CheckKernel]; r.Status != Fail {
		t.Errorf("no kernel stack at all: kernel stacks %s %q, want a failure", r.Status, r.Figure)
	}
	x86 := maps.Clone(sec)
	x86["arch"] = "x86_64\n"
	if r := statuses(Judge(x86))[CheckTableWalk]; r.Status != Fail {
		t.Errorf("the program's fallback on x86-64: %s %q, want a failure", r.Status, r.Figure)
	}
}

func TestSectionsErrors(t *testing.T) {
	for _, in := range []string{"==> a\nx\n", "<== a\n", "==> a\n<== b\n"} {
		if _, err := Sections([]byte(in)); err == nil {
			t.Errorf("Sections(%q): no error", in)
		}
	}
}

func FuzzSections(f *testing.F) {
	f.Add([]byte("==> uname\n6.1.0\n<== uname\n"))
	f.Add([]byte("\x1b[2J==> a\n[ 1.0] kmsg\nline\r\n<== a\n==> b\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		sec, err := Sections(out)
		if err != nil {
			return
		}
		Judge(sec) // never panics on what a VM may print
		for name, body := range sec {
			if name == "" || strings.Contains(body, "<== "+name+"\n") {
				t.Fatalf("section %q holds its own end: %q", name, body)
			}
		}
	})
}
