//go:build kernels

package kernels

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/needs"
)

// A kernel image the matrix boots: the newest of a Debian suite's flavour
// (the meta-package's dependency), from Debian's archive.
type kernelSource struct {
	suite string // sources.list lines under suiteSources
	arch  string // Debian's: amd64 or arm64 (archs)
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
// flavours), the 6.12 Debian 12 also serves, Debian 11's 5.10, older
// than the table walk (bpf_loop: 5.17), to show what runs without it,
// and Debian 12's arm64 cloud kernel.
var kernelSources = []kernelSource{
	{suite: "bullseye", arch: "amd64", meta: "linux-image-cloud-amd64"},
	{suite: "bookworm", arch: "amd64", meta: "linux-image-cloud-amd64", required: true},
	{suite: "bookworm", arch: "amd64", meta: "linux-image-amd64", required: true},
	{suite: "bookworm", arch: "amd64", meta: "linux-image-6.12-cloud-amd64"},
	{suite: "bookworm", arch: "arm64", meta: "linux-image-cloud-arm64", required: true},
}

// An architecture the matrix boots, under qemu's TCG (KVM fails inside
// the test VMs, and cannot run another architecture).
type arch struct {
	goarch, qemu, gcc, console string
	machine                    []string
}

var archs = map[string]arch{
	"amd64": {goarch: "amd64", qemu: "qemu-system-x86_64", gcc: "gcc", console: "ttyS0",
		machine: []string{"-accel", "tcg,thread=multi", "-cpu", "max"}},
	"arm64": {goarch: "arm64", qemu: "qemu-system-aarch64", gcc: "aarch64-linux-gnu-gcc", console: "ttyAMA0",
		machine: []string{"-M", "virt", "-accel", "tcg,thread=multi", "-cpu", "max"}},
}

// bootTimeout bounds one kernel's run (about 40 s under TCG on the 2-CPU
// test machine, 4 minutes for arm64).
const bootTimeout = 10 * time.Minute

// unavailable skips t with the reason, or fails it under
// HEATSCOPE_REQUIRE_BPF=1 (CI), where the matrix must run.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	needs.Missing(t, "HEATSCOPE_REQUIRE_BPF", "the kernel matrix cannot run: "+fmt.Sprintf(format, args...)+
		" (apt-get install qemu-system-x86 qemu-system-arm gcc gcc-aarch64-linux-gnu libc6-dev-arm64-cross)")
}

func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		unavailable(t, "%s: %v", name, err)
	}
	return path
}

// TestKernelMatrix boots each kernel of kernelSources in qemu with an
// initramfs holding a static heatscope, the workloads and runner.sh built
// for its architecture, and judges every check (Judge). It prints a table
// per kernel, and writes them to $HEATSCOPE_KERNEL_REPORT if set.
func TestKernelMatrix(t *testing.T) {
	tool(t, "apt-get")
	tool(t, "apt-cache")
	tool(t, "dpkg-deb")
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
	runner, err := os.ReadFile("testdata/runner.sh")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	initrds := map[string]string{} // by arch, built at its first kernel

	var report strings.Builder
	booted := 0
	for _, src := range kernelSources {
		a := archs[src.arch]
		var vmlinuz, release, busybox string
		qemu, err := exec.LookPath(a.qemu)
		gcc, gerr := exec.LookPath(a.gcc)
		err = errors.Join(err, gerr)
		var repo *aptRepo
		if err == nil {
			repo, err = newAptRepo(cache, src.suite, src.arch)
		}
		if err == nil {
			vmlinuz, release, err = repo.kernel(src.meta)
		}
		if err == nil && initrds[src.arch] == "" {
			// Debian 12's busybox for every kernel (1.35: taskset -c).
			var bookworm *aptRepo
			if bookworm, err = newAptRepo(cache, "bookworm", src.arch); err == nil {
				busybox, err = bookworm.busybox()
			}
		}
		if err != nil {
			if src.required && needs.Required("HEATSCOPE_REQUIRE_BPF") {
				t.Fatalf("HEATSCOPE_REQUIRE_BPF=1 but %s (%s, %s) cannot run: %v", src.meta, src.suite, src.arch, err)
			}
			t.Logf("skipped %s from %s (%s): %v", src.meta, src.suite, src.arch, err)
			continue
		}
		if initrds[src.arch] == "" {
			initrds[src.arch] = buildInitramfs(t, filepath.Join(work, src.arch), a, gcc, busybox, runner)
		}
		booted++
		t.Run(release, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
			defer cancel()
			start := time.Now()
			args := append([]string{"-m", "1024", "-smp", "2", "-nographic", "-no-reboot",
				"-kernel", vmlinuz, "-initrd", initrds[src.arch], "-append", "console=" + a.console + " panic=-1 quiet"}, a.machine...)
			out, err := exec.CommandContext(ctx, qemu, args...).CombinedOutput()
			logPath := filepath.Join(cache, "logs", release+".log")
			_ = os.WriteFile(logPath, out, 0o644)
			if err != nil {
				t.Errorf("%s: %v after %v (console in %s)", a.qemu, err, time.Since(start).Round(time.Second), logPath)
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
	if booted == 0 {
		unavailable(t, "no kernel could be booted (see the log lines above)")
	}
	t.Logf("kernel matrix, %d kernels:\n%s", booted, report.String())
	if path := os.Getenv("HEATSCOPE_KERNEL_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// buildInitramfs builds a static heatscope and the workloads for a, and
// writes them, busybox and the runner (as /init) into dir/initrd.cpio.
func buildInitramfs(t *testing.T, dir string, a arch, gcc, busybox string, runner []byte) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	heatscope := filepath.Join(dir, "heatscope")
	build := exec.Command(goTool(), "build", "-o", heatscope, "../../cmd/heatscope")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH="+a.goarch)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 GOARCH=%s go build: %v\n%s", a.goarch, err, out)
	}
	fixture := filepath.Join(dir, "fixture")
	if out, err := exec.Command(gcc, "-static", "-O2", "-fomit-frame-pointer", "-o", fixture, "testdata/fixture.c").CombinedOutput(); err != nil {
		t.Fatalf("%s -static testdata/fixture.c: %v\n%s", gcc, err, out)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	err := writeInitramfs(initrd, []initramfsFile{
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
	return initrd
}

// goTool is the go command that runs this test.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// aptRepo is one suite and architecture of Debian's archive, read with
// package lists of its own (in the cache, refreshed daily), apart from
// the machine's apt configuration: packages are downloaded, never
// installed.
type aptRepo struct {
	cache, arch string
	opts        []string
}

func newAptRepo(cache, suite, arch string) (*aptRepo, error) {
	dir := filepath.Join(cache, "apt-"+suite+"-"+arch)
	if err := os.MkdirAll(filepath.Join(dir, "lists", "partial"), 0o755); err != nil {
		return nil, err
	}
	sources := filepath.Join(dir, "sources.list")
	if err := os.WriteFile(sources, []byte(suiteSources[suite]), 0o644); err != nil {
		return nil, err
	}
	r := &aptRepo{cache: cache, arch: arch, opts: []string{"-q",
		"-o", "APT::Architecture=" + arch, "-o", "APT::Architectures=" + arch,
		"-o", "Dir::Etc::SourceList=" + sources, "-o", "Dir::Etc::SourceParts=/dev/null",
		"-o", "Dir::State::Lists=" + filepath.Join(dir, "lists"), "-o", "Dir::Cache=" + filepath.Join(dir, "cache"),
		"-o", "Dir::State::status=/dev/null", "-o", "APT::Sandbox::User=root"}}
	stamp := filepath.Join(dir, "updated")
	if st, err := os.Stat(stamp); err != nil || time.Since(st.ModTime()) > 24*time.Hour {
		if out, err := exec.Command("apt-get", append(r.opts, "update")...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("apt-get update of %s (%s): %v: %s", suite, arch, err, lastLines(string(out), 3))
		}
		_ = os.WriteFile(stamp, nil, 0o644)
	}
	return r, nil
}

// kernel returns the vmlinuz and release of the image meta depends on,
// downloaded once and kept in the cache.
func (r *aptRepo) kernel(meta string) (vmlinuz, release string, err error) {
	out, err := exec.Command("apt-cache", append(r.opts, "depends", meta)...).CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("apt-cache depends %s: %v: %s", meta, err, lastLines(string(out), 2))
	}
	var pkg string
	for line := range strings.SplitSeq(string(out), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "Depends: "); ok && strings.HasPrefix(p, "linux-image-") {
			pkg = p
			break
		}
	}
	if pkg == "" {
		return "", "", fmt.Errorf("%s depends on no linux-image package", meta)
	}
	release = strings.TrimPrefix(pkg, "linux-image-")
	vmlinuz = filepath.Join(r.cache, "vmlinuz-"+release)
	if _, err := os.Stat(vmlinuz); err == nil {
		return vmlinuz, release, nil
	}
	return vmlinuz, release, r.extract(pkg, "boot/vmlinuz-"+release, vmlinuz)
}

// busybox returns busybox-static's binary for the architecture.
func (r *aptRepo) busybox() (string, error) {
	path := filepath.Join(r.cache, "busybox-"+r.arch)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	return path, r.extract("busybox-static", "bin/busybox", path)
}

// extract downloads pkg and moves its file member to dest.
func (r *aptRepo) extract(pkg, member, dest string) error {
	x, err := os.MkdirTemp(r.cache, "x-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(x)
	get := exec.Command("apt-get", append(r.opts, "download", pkg)...)
	get.Dir = x
	if out, err := get.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download %s: %v: %s", pkg, err, lastLines(string(out), 3))
	}
	debs, _ := filepath.Glob(filepath.Join(x, "*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download %s left %d .deb files", pkg, len(debs))
	}
	root := filepath.Join(x, "root")
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], root).CombinedOutput(); err != nil {
		return fmt.Errorf("dpkg-deb -x %s: %v: %s", debs[0], err, out)
	}
	if err := os.Rename(filepath.Join(root, member), dest); err != nil {
		return fmt.Errorf("%s holds no %s: %w", pkg, member, err)
	}
	return nil
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
