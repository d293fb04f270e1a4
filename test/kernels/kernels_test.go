//go:build kernels

package kernels

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A kernel image the matrix boots: the newest of a Debian suite's flavour
// (the meta-package's dependency), from Debian's archive.
type kernelSource struct {
	suite string // sources.list lines under suiteSources
	meta  string // e.g. linux-image-cloud-amd64
	// required kernels fail the run when they cannot be had (the
	// others, a bonus, are skipped with the reason).
	required bool
}

var suiteSources = map[string]string{
	"bookworm": "deb http://deb.debian.org/debian bookworm main\n" +
		"deb http://deb.debian.org/debian bookworm-updates main\n" +
		"deb http://deb.debian.org/debian-security bookworm-security main\n",
	"bullseye": "deb http://deb.debian.org/debian bullseye main\n" +
		"deb http://deb.debian.org/debian-security bullseye-security main\n",
}

// The kernels of the matrix: Debian 12's own (6.1, cloud and generic
// flavours), the 6.12 Debian 12 also serves, and Debian 11's 5.10, older
// than the table walk (bpf_loop: 5.17), to show what runs without it.
var kernelSources = []kernelSource{
	{suite: "bullseye", meta: "linux-image-cloud-amd64"},
	{suite: "bookworm", meta: "linux-image-cloud-amd64", required: true},
	{suite: "bookworm", meta: "linux-image-amd64", required: true},
	{suite: "bookworm", meta: "linux-image-6.12-cloud-amd64"},
}

// bootTimeout bounds one kernel's run (about 30 s under TCG on the 2-CPU
// test machine).
const bootTimeout = 5 * time.Minute

// unavailable skips t with the reason, or fails it under
// HEATSCOPE_REQUIRE_BPF=1 (CI), where the matrix must run.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("HEATSCOPE_REQUIRE_BPF") == "1" {
		t.Fatalf("HEATSCOPE_REQUIRE_BPF=1 but the kernel matrix cannot run: %s", msg)
	}
	t.Skipf("the kernel matrix cannot run: %s (apt-get install qemu-system-x86 busybox-static gcc)", msg)
}

func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		unavailable(t, "%s: %v", name, err)
	}
	return path
}

// TestKernelMatrix boots each kernel of kernelSources in qemu (TCG: KVM
// fails inside the test VMs) with an initramfs holding a static heatscope,
// the workloads and runner.sh, and judges every check (Judge). It prints
// a table per kernel, and writes them to $HEATSCOPE_KERNEL_REPORT if set.
func TestKernelMatrix(t *testing.T) {
	qemu := tool(t, "qemu-system-x86_64")
	gcc := tool(t, "gcc")
	tool(t, "apt-get")
	tool(t, "dpkg-deb")
	busybox := staticBusybox(t)
	cache := os.Getenv("HEATSCOPE_KERNEL_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(home, ".cache", "heatscope-kernels")
	}
	if err := os.MkdirAll(filepath.Join(cache, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}

	work := t.TempDir()
	heatscope := filepath.Join(work, "heatscope")
	build := exec.Command(goTool(), "build", "-o", heatscope, "../../cmd/heatscope")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	fixture := filepath.Join(work, "fixture")
	if out, err := exec.Command(gcc, "-static", "-O2", "-fomit-frame-pointer", "-o", fixture, "testdata/fixture.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc -static testdata/fixture.c: %v\n%s", err, out)
	}
	runner, err := os.ReadFile("testdata/runner.sh")
	if err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(work, "initrd.cpio")
	err = writeInitramfs(initrd, []initramfsFile{
		{name: "bin/busybox", from: busybox, mode: 0o755},
		{name: "bin/sh", link: "busybox"},
		{name: "bin/heatscope", from: heatscope, mode: 0o755},
		{name: "bin/zznofp", from: fixture, mode: 0o755},
		{name: "bin/zzsys", from: fixture, mode: 0o755},
		{name: "init", data: runner, mode: 0o755},
	}, []string{"bin", "dev", "proc", "sys", "tmp"})
	if err != nil {
		t.Fatal(err)
	}

	var report strings.Builder
	booted := 0
	for _, src := range kernelSources {
		vmlinuz, release, err := fetchKernel(cache, src)
		if err != nil {
			if src.required {
				unavailable(t, "%s from %s: %v", src.meta, src.suite, err)
			}
			t.Logf("skipped %s from %s (a bonus kernel): %v", src.meta, src.suite, err)
			continue
		}
		booted++
		t.Run(release, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
			defer cancel()
			start := time.Now()
			cmd := exec.CommandContext(ctx, qemu, "-m", "1024", "-smp", "2", "-nographic", "-no-reboot",
				"-kernel", vmlinuz, "-initrd", initrd, "-append", "console=ttyS0 panic=-1 quiet",
				"-accel", "tcg,thread=multi", "-cpu", "max")
			out, err := cmd.CombinedOutput()
			logPath := filepath.Join(cache, "logs", release+".log")
			_ = os.WriteFile(logPath, out, 0o644)
			if err != nil {
				t.Errorf("qemu: %v after %v (console in %s)", err, time.Since(start).Round(time.Second), logPath)
			}
			sec, err := Sections(out)
			if err != nil {
				t.Errorf("console output: %v (in %s)", err, logPath)
			}
			if _, ok := sec["done"]; !ok {
				t.Errorf("the runner did not finish (console in %s)", logPath)
			}
			results := Judge(sec)
			report.WriteString(Report(fmt.Sprintf("%s (%s, %s; %.0f s)", release, src.suite, src.meta, time.Since(start).Seconds()), results))
			for _, r := range results {
				if r.Status == Fail {
					t.Errorf("%s: %s (console in %s)", r.Check, r.Figure, logPath)
				}
			}
		})
	}
	t.Logf("kernel matrix, %d kernels:\n%s", booted, report.String())
	if path := os.Getenv("HEATSCOPE_KERNEL_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// goTool is the go command that runs this test.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// staticBusybox finds a statically linked busybox (busybox-static).
func staticBusybox(t *testing.T) string {
	path := tool(t, "busybox")
	f, err := elf.Open(path)
	if err != nil {
		unavailable(t, "busybox at %s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			unavailable(t, "busybox at %s is dynamically linked: the initramfs needs busybox-static", path)
		}
	}
	return path
}

// fetchKernel downloads (once; kept in cache) the newest image of src's
// flavour from Debian's archive and returns its vmlinuz and release. The
// suite's package lists are kept in cache too, refreshed daily, apart
// from the machine's own apt configuration.
func fetchKernel(cache string, src kernelSource) (vmlinuz, release string, err error) {
	dir := filepath.Join(cache, "apt-"+src.suite)
	if err := os.MkdirAll(filepath.Join(dir, "lists", "partial"), 0o755); err != nil {
		return "", "", err
	}
	sources := filepath.Join(dir, "sources.list")
	if err := os.WriteFile(sources, []byte(suiteSources[src.suite]), 0o644); err != nil {
		return "", "", err
	}
	opts := []string{"-q", "-o", "Dir::Etc::SourceList=" + sources, "-o", "Dir::Etc::SourceParts=/dev/null",
		"-o", "Dir::State::Lists=" + filepath.Join(dir, "lists"), "-o", "Dir::Cache=" + filepath.Join(dir, "cache"),
		"-o", "Dir::State::status=/dev/null", "-o", "APT::Sandbox::User=root"}
	stamp := filepath.Join(dir, "updated")
	if st, err := os.Stat(stamp); err != nil || time.Since(st.ModTime()) > 24*time.Hour {
		if out, err := exec.Command("apt-get", append(opts, "update")...).CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("apt-get update of %s: %v: %s", src.suite, err, lastLines(string(out), 3))
		}
		_ = os.WriteFile(stamp, nil, 0o644)
	}
	out, err := exec.Command("apt-cache", append(opts, "depends", src.meta)...).CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("apt-cache depends %s: %v: %s", src.meta, err, lastLines(string(out), 2))
	}
	var pkg string
	for line := range strings.SplitSeq(string(out), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "Depends: "); ok && strings.HasPrefix(p, "linux-image-") {
			pkg = p
			break
		}
	}
	if pkg == "" {
		return "", "", fmt.Errorf("%s depends on no linux-image package", src.meta)
	}
	release = strings.TrimPrefix(pkg, "linux-image-")
	vmlinuz = filepath.Join(cache, "vmlinuz-"+release)
	if _, err := os.Stat(vmlinuz); err == nil {
		return vmlinuz, release, nil
	}
	debs := filepath.Join(cache, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return "", "", err
	}
	get := exec.Command("apt-get", append(opts, "download", pkg)...)
	get.Dir = debs
	if out, err := get.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("apt-get download %s: %v: %s", pkg, err, lastLines(string(out), 3))
	}
	matches, _ := filepath.Glob(filepath.Join(debs, pkg+"_*.deb"))
	if len(matches) == 0 {
		return "", "", fmt.Errorf("apt-get download %s left no .deb", pkg)
	}
	x, err := os.MkdirTemp(cache, "x-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(x)
	if out, err := exec.Command("dpkg-deb", "-x", matches[len(matches)-1], x).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("dpkg-deb -x %s: %v: %s", matches[len(matches)-1], err, out)
	}
	if err := os.Rename(filepath.Join(x, "boot", "vmlinuz-"+release), vmlinuz); err != nil {
		return "", "", fmt.Errorf("%s holds no boot/vmlinuz-%s: %w", pkg, release, err)
	}
	_ = os.Remove(matches[len(matches)-1]) // the image is all the matrix needs
	return vmlinuz, release, nil
}

// An initramfsFile is a file of the initramfs: a copy of from, data, or a
// symbolic link to link.
type initramfsFile struct {
	name, from, link string
	data             []byte
	mode             os.FileMode
}

// writeInitramfs writes a cpio archive (newc) of dirs and
// files to path.
func writeInitramfs(path string, files []initramfsFile, dirs []string) error {
	var a cpioWriter
	for _, d := range dirs {
		a.add(d, 0o040755, nil)
	}
	for _, f := range files {
		switch {
		case f.link != "":
			a.add(f.name, 0o120777, []byte(f.link))
		case f.from != "":
			data, err := os.ReadFile(f.from)
			if err != nil {
				return err
			}
			a.add(f.name, 0o100000|uint32(f.mode), data)
		default:
			a.add(f.name, 0o100000|uint32(f.mode), f.data)
		}
	}
	return os.WriteFile(path, a.finish(), 0o644)
}

// cpioWriter builds a newc cpio archive (uncompressed: the kernel reads
// it as it is).
type cpioWriter struct {
	buf bytes.Buffer
	ino uint32
}

func (w *cpioWriter) add(name string, mode uint32, data []byte) {
	w.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	fmt.Fprintf(&w.buf, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		w.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	w.buf.WriteString(name)
	w.buf.WriteByte(0)
	w.pad()
	w.buf.Write(data)
	w.pad()
}

func (w *cpioWriter) pad() {
	for w.buf.Len()%4 != 0 {
		w.buf.WriteByte(0)
	}
}

func (w *cpioWriter) finish() []byte {
	w.add("TRAILER!!!", 0, nil)
	return w.buf.Bytes()
}
