// Package kernels runs heatscope's BPF-facing checks on kernels other than
// the host's: TestKernelMatrix (build tag kernels, `make test-kernels`)
// boots Debian's kernel images in qemu with an initramfs holding a static
// heatscope, the workloads of testdata/fixture.c and testdata/runner.sh, and judges what the
// runner prints with Judge. This file reads a run's console output.
package kernels

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Sections splits a VM's console output into the pieces runner.sh prints
// between "==> NAME" and "<== NAME" lines. Kernel messages interleaved on
// the console (lines starting with "[") are left out. A section opened and
// not closed (the VM died) is an error, as is one closed that was not open.
func Sections(out []byte) (map[string]string, error) {
	sec := map[string]string{}
	var open string
	var body strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		// The console starts with the firmware's escape sequences.
		if i := strings.Index(line, "==> "); i >= 0 && open == "" {
			open = strings.TrimSpace(line[i+4:])
			if open == "" {
				return nil, fmt.Errorf("a section without a name")
			}
			body.Reset()
			continue
		}
		if name, ok := strings.CutPrefix(line, "<== "); ok {
			if open == "" || name != open {
				return nil, fmt.Errorf("section %q closed while %q is open", name, open)
			}
			sec[open] = body.String()
			open = ""
			continue
		}
		if open != "" && !strings.HasPrefix(line, "[") {
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if open != "" {
		return sec, fmt.Errorf("section %q not closed: the VM stopped within it", open)
	}
	return sec, nil
}

// Status is a check's outcome.
type Status string

// Outcomes.
const (
	Pass Status = "pass"
	Fail Status = "FAIL"
	// Unsupported: the kernel lacks what the check needs, and heatscope
	// detected it at start and said so (the figure names what it said).
	Unsupported Status = "not supported"
)

// Result is one check on one kernel.
type Result struct {
	Check  string
	Status Status
	// Figure is what was measured, or why it failed.
	Figure string
}

// The checks, in report order.
const (
	CheckLoad       = "load"
	CheckSampling   = "sampling"
	CheckKernel     = "kernel stacks"
	CheckUser       = "user stacks"
	CheckTableWalk  = "table walk"
	CheckSnapshots  = "exit snapshots"
	CheckKmsg       = "kernel log events"
	CheckSaturation = "saturation events"
	CheckContainer  = "container labels"
)

// MinReachMain is the share of the workload's samples (from 1 s after its
// table is in: a process's first samples are walked with frame pointers)
// whose stacks must reach main for the table walk to pass.
const MinReachMain = 0.95

var (
	recordedRE   = regexp.MustCompile(`recorded [0-9.]+s: (\d+) samples on (\d+) CPUs, (\d+) dropped, (\d+) kernel and (\d+) user stack errors`)
	kmsgRE       = regexp.MustCompile(`kernel log events: (\d+) of (\d+) records kept`)
	saturationRE = regexp.MustCompile(`msg="cpu saturation" text="([^"]*)"`)
	fallbackRE   = regexp.MustCompile(`unwind: the table walk is off, user stacks were walked with frame pointers: check (\S+) failed: (.*)`)
	unwindRE     = regexp.MustCompile(`unwind: (\d+) stacks walked with tables.*user frames found with tables (\d+).*?(\d+) refused by the kernel`)
	exitRunsRE   = regexp.MustCompile(`exit snapshots: (\d+) runs`)
	noSnapRE     = regexp.MustCompile(`the kernel cannot snapshot exiting processes' mappings.*err="([^"]*)"`)
	versionRE    = regexp.MustCompile(`^(\d+)\.(\d+)`)
)

// KernelVersion reads "6.1.0-47-cloud-amd64" as 6, 1.
func KernelVersion(release string) (major, minor int, err error) {
	m := versionRE.FindStringSubmatch(strings.TrimSpace(release))
	if m == nil {
		return 0, 0, fmt.Errorf("kernel release %q: no version", release)
	}
	major, _ = strconv.Atoi(m[1])
	minor, _ = strconv.Atoi(m[2])
	return major, minor, nil
}

// before reports whether kernel major.minor is older than want.
func before(major, minor int, want [2]int) bool {
	return major < want[0] || major == want[0] && minor < want[1]
}

// folded sums a folded-stacks export: the samples, and those of stacks
// holding a frame that match says is wanted.
func folded(text string, match func(frames []string) bool) (total, matched int64) {
	for line := range strings.SplitSeq(text, "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		n, err := strconv.ParseInt(line[i+1:], 10, 64)
		if err != nil || n < 0 {
			continue
		}
		total += n
		if match(strings.Split(line[:i], ";")) {
			matched += n
		}
	}
	return total, matched
}

func share(n, total int64) string {
	if total == 0 {
		return "0 samples"
	}
	return fmt.Sprintf("%d of %d samples (%.0f%%)", n, total, 100*float64(n)/float64(total))
}

// isSyscallEntry reports whether a kernel frame is the system call entry
// of x86-64 or arm64.
func isSyscallEntry(frame string) bool {
	return frame == "do_syscall_64" || frame == "do_el0_svc"
}

// exportOK reports whether an export section ended with exit status 0.
func exportOK(text string) bool {
	return strings.Contains(text, "exit status 0\n")
}

// Judge judges one kernel's run from its sections.
func Judge(sec map[string]string) []Result {
	release := strings.TrimSpace(sec["uname"])
	major, minor, verr := KernelVersion(release)
	rec := sec["record.err"]
	var out []Result
	add := func(check string, st Status, format string, args ...any) {
		out = append(out, Result{Check: check, Status: st, Figure: fmt.Sprintf(format, args...)})
	}

	// load, sampling
	m := recordedRE.FindStringSubmatch(rec)
	if strings.TrimSpace(sec["record.rc"]) != "exit status 0" || m == nil {
		add(CheckLoad, Fail, "record: %s; %s", strings.TrimSpace(sec["record.rc"]), lastLines(rec, 3))
		for _, c := range []string{CheckSampling, CheckKernel, CheckUser, CheckTableWalk, CheckSnapshots, CheckKmsg, CheckSaturation, CheckContainer} {
			add(c, Fail, "the program did not load")
		}
		return out
	}
	add(CheckLoad, Pass, "kernel %s", release)
	samples, _ := strconv.Atoi(m[1])
	if samples > 0 {
		add(CheckSampling, Pass, "%s samples on %s CPUs, %s dropped, %s+%s stack errors", m[1], m[2], m[3], m[4], m[5])
	} else {
		add(CheckSampling, Fail, "no samples")
	}

	// kernel stacks: zzsys's samples in its system call, from the
	// architecture's system call entry (do_syscall_64 on x86-64, do_el0_svc
	// on arm64) up. The getppid handler itself is short: on arm64 under
	// qemu most samples land in the entry and exit around it, so a run of
	// 44 samples had none in it (CI, 2026-11-28) while every one of them
	// had the whole stack from the entry.
	total, inSyscall := folded(sec["kernel.folded"], func(f []string) bool {
		return slices.ContainsFunc(f, isSyscallEntry)
	})
	_, inHandler := folded(sec["kernel.folded"], func(f []string) bool {
		return slices.ContainsFunc(f, func(fr string) bool { return strings.Contains(fr, "sys_getppid") })
	})
	if exportOK(sec["kernel.folded"]) && inSyscall > 0 {
		add(CheckKernel, Pass, "zzsys: %s in a system call's kernel stack, %d in getppid's handler", share(inSyscall, total), inHandler)
	} else {
		add(CheckKernel, Fail, "zzsys: %s in a system call's kernel stack; %s", share(inSyscall, total), lastLines(sec["kernel.folded"], 2))
	}

	// user stacks: zznofp's samples with its leaf
	total, leaf := folded(sec["user.folded"], func(f []string) bool { return f[len(f)-1] == "zz_nofp_leaf" })
	if exportOK(sec["user.folded"]) && leaf > 0 {
		add(CheckUser, Pass, "zznofp: %s with zz_nofp_leaf as the leaf", share(leaf, total))
	} else {
		add(CheckUser, Fail, "zznofp: %s with zz_nofp_leaf as the leaf; %s", share(leaf, total), lastLines(sec["user.folded"], 2))
	}

	// table walk: zznofp's samples reaching main once its table is in
	total, reach := folded(sec["walk.folded"], func(f []string) bool {
		for i := range f[:len(f)-1] {
			if f[i] == "main" && f[i+1] == "zz_nofp_top" {
				return true
			}
		}
		return false
	})
	fb := fallbackRE.FindStringSubmatch(rec)
	u := unwindRE.FindStringSubmatch(rec)
	switch {
	case fb != nil && fb[1] == "helpers" && verr == nil && before(major, minor, [2]int{5, 17}):
		add(CheckTableWalk, Unsupported, "detected at start: %s; frame pointers reach main in %s", fb[2], share(reach, total))
	case fb != nil && fb[1] == "program" && strings.TrimSpace(sec["arch"]) == "aarch64":
		// The walk's program reads x86-64's registers (docs/design.md,
		// "Kernels and architectures").
		add(CheckTableWalk, Unsupported, "the walk is x86-64's; detected at start: %s", fb[2])
	case fb != nil:
		add(CheckTableWalk, Fail, "the walk fell back on a kernel that should run it: check %s: %s", fb[1], fb[2])
	case u == nil:
		add(CheckTableWalk, Fail, "no unwind summary line")
	case u[3] != "0":
		add(CheckTableWalk, Fail, "%s tables refused by the kernel", u[3])
	case total > 0 && float64(reach) >= MinReachMain*float64(total):
		add(CheckTableWalk, Pass, "zznofp from 1 s after its table was in: %s reach main", share(reach, total))
	default:
		add(CheckTableWalk, Fail, "zznofp from 1 s after its table was in: %s reach main, want %.0f%%; %s", share(reach, total), 100*MinReachMain, lastLines(sec["walk.folded"], 2))
	}

	// exit snapshots
	runs := exitRunsRE.FindStringSubmatch(rec)
	no := noSnapRE.FindStringSubmatch(rec)
	switch {
	case strings.Contains(rec, "new processes are now symbolized from the mappings snapshotted") && runs != nil:
		add(CheckSnapshots, Pass, "%s exit program runs", runs[1])
	case no != nil && verr == nil && before(major, minor, [2]int{6, 16}):
		add(CheckSnapshots, Unsupported, "detected when churn called for them: %s", no[1])
	case no != nil:
		add(CheckSnapshots, Fail, "refused on a kernel that should run them: %s", no[1])
	default:
		add(CheckSnapshots, Fail, "churn did not switch to exit snapshots")
	}

	// kernel log events
	if k := kmsgRE.FindStringSubmatch(rec); k != nil && k[1] != "0" && strings.Contains(rec, "pattern=netdev-watchdog") {
		add(CheckKmsg, Pass, "%s of %s records kept (the NETDEV WATCHDOG line)", k[1], k[2])
	} else {
		add(CheckKmsg, Fail, "the NETDEV WATCHDOG line written to /dev/kmsg was not kept")
	}

	// saturation events
	sat := ""
	for _, s := range saturationRE.FindAllStringSubmatch(rec, -1) {
		if strings.HasPrefix(s[1], "zznofp ") {
			sat = s[1]
			break
		}
	}
	if sat != "" {
		add(CheckSaturation, Pass, "%s", sat)
	} else {
		add(CheckSaturation, Fail, "no cpu-saturation event for zznofp")
	}

	// container labels: the container's samples are zznofp's
	total, mine := folded(sec["container.folded"], func(f []string) bool { return f[0] == "zznofp" })
	if exportOK(sec["container.folded"]) && total > 0 && mine == total {
		add(CheckContainer, Pass, "docker-%.12s.scope: %s, all zznofp's", strings.TrimSpace(sec["container.id"]), share(mine, total))
	} else {
		add(CheckContainer, Fail, "--container %.12s: %s of zznofp; %s", strings.TrimSpace(sec["container.id"]), share(mine, total), lastLines(sec["container.folded"], 2))
	}
	return out
}

// lastLines returns the last n non-empty lines of text, joined by " | ".
func lastLines(text string, n int) string {
	var lines []string
	for l := range strings.SplitSeq(text, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Report writes one table per kernel, in markdown.
func Report(kernel string, results []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### %s\n\n| check | result | figure |\n|---|---|---|\n", kernel)
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.Check, r.Status, strings.ReplaceAll(r.Figure, "|", "/"))
	}
	return b.String()
}
