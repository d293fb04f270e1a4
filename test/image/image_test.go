// Package image tests the container image `make image` builds
// (Containerfile): it builds the image with buildah, mounts its root file
// system and runs heatscope from it, as a container runtime would, so the
// image is known to run, not only to build.
package image

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// repoRoot is the repository's top directory, from this package's.
const repoRoot = "../.."

// requireTools skips the test with the reason when it cannot run here, or
// fails it where HEATSCOPE_REQUIRE_IMAGE=1 (CI), where a skip would hide a
// broken image.
func requireTools(t *testing.T) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (buildah mount and chroot)")
	}
	for _, tool := range []string{"buildah", "make", "git", "gcc", "unshare", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := "the image test needs " + strings.Join(missing, ", ") + " (apt-get install buildah gcc util-linux coreutils)"
	if os.Getenv("HEATSCOPE_REQUIRE_IMAGE") == "1" {
		t.Fatal(msg + ", and HEATSCOPE_REQUIRE_IMAGE=1 requires it")
	}
	t.Skip(msg)
}

// run runs a command and returns its standard output, failing the test
// with its standard error when it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestImage builds the image, checks its labels and that its binary is
// static, and runs `heatscope --version` and a short `heatscope record`
// of a fixture from the image's own root file system (/proc, /sys and
// /dev bind-mounted from the host, as the DaemonSet gives them), comparing
// what it finds with the same recording by the host's binary.
func TestImage(t *testing.T) {
	requireTools(t)
	name := fmt.Sprintf("localhost/heatscope-imagetest-%d", os.Getpid())
	tag := "test"
	image := name + ":" + tag
	run(t, "make", "-C", repoRoot, "--no-print-directory", "image", "IMAGE="+name, "IMAGE_TAG="+tag)
	t.Cleanup(func() { _ = exec.Command("buildah", "rmi", "--force", image, name+":latest").Run() })

	version := strings.TrimSpace(run(t, "git", "-C", repoRoot, "describe", "--tags", "--always", "--dirty"))
	commit := strings.TrimSpace(run(t, "git", "-C", repoRoot, "rev-parse", "HEAD"))
	checkLabels(t, image, version, commit)

	ctr := fmt.Sprintf("heatscope-imagetest-%d", os.Getpid())
	run(t, "buildah", "from", "--quiet", "--pull-never", "--name", ctr, image)
	t.Cleanup(func() { _ = exec.Command("buildah", "rm", ctr).Run() })
	root := strings.TrimSpace(run(t, "buildah", "mount", ctr))
	t.Cleanup(func() { _ = exec.Command("buildah", "umount", ctr).Run() })

	binary := filepath.Join(root, "usr", "bin", "heatscope")
	checkStatic(t, binary)
	if _, err := os.Stat(filepath.Join(root, "etc", "ssl", "certs", "ca-certificates.crt")); err != nil {
		t.Errorf("the image has no CA bundle for a bucket over TLS: %v", err)
	}

	printed := run(t, "chroot", root, "/usr/bin/heatscope", "--version")
	if !strings.Contains(printed, version) || !strings.Contains(printed, commit) {
		t.Errorf("heatscope --version in the image printed %q, want version %s and commit %s", printed, version, commit)
	}

	fixture := buildFixture(t)
	inImage := recordTop(t, fixture, func(data string, args []string) *exec.Cmd {
		// A private mount namespace: the bind mounts go with it.
		script := `set -e; R=$1; D=$2; shift 2
mount --rbind /proc "$R/proc"; mount --rbind /sys "$R/sys"; mount --rbind /dev "$R/dev"
mount --bind "$D" "$R/var/lib/heatscope"
exec chroot "$R" /usr/bin/heatscope "$@"`
		cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", root, data}, args...)...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"} // a bare environment, as in a container
		return cmd
	})
	onHost := recordTop(t, fixture, func(data string, args []string) *exec.Cmd {
		for i, a := range args { // the same paths, on the host
			args[i] = strings.ReplaceAll(a, "/var/lib/heatscope", data)
		}
		return exec.Command(binary, args...)
	})
	for _, top := range []struct {
		where string
		funcs []string
	}{{"in the image", inImage}, {"on the host", onHost}} {
		t.Logf("record %s: top functions %q", top.where, top.funcs)
		if len(top.funcs) == 0 || top.funcs[0] != "hot_c_function" {
			t.Errorf("record %s: top functions %q, want hot_c_function first", top.where, top.funcs)
		}
	}
}

// checkLabels checks the image's OCI labels name its version and commit.
func checkLabels(t *testing.T, image, version, commit string) {
	t.Helper()
	var inspect struct {
		OCIv1 struct {
			Config struct {
				Labels     map[string]string `json:"Labels"`
				Entrypoint []string          `json:"Entrypoint"`
			} `json:"config"`
		} `json:"OCIv1"`
	}
	if err := json.Unmarshal([]byte(run(t, "buildah", "inspect", "--type", "image", image)), &inspect); err != nil {
		t.Fatalf("buildah inspect %s: %v", image, err)
	}
	labels := inspect.OCIv1.Config.Labels
	for key, want := range map[string]string{
		"org.opencontainers.image.title":    "heatscope",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": commit,
	} {
		if labels[key] != want {
			t.Errorf("label %s is %q, want %q", key, labels[key], want)
		}
	}
	if created := labels["org.opencontainers.image.created"]; !strings.HasSuffix(created, "Z") {
		t.Errorf("label org.opencontainers.image.created is %q, want an RFC 3339 UTC time", created)
	} else if c, err := time.Parse(time.RFC3339, created); err != nil || time.Since(c) > time.Hour {
		t.Errorf("label org.opencontainers.image.created is %q, want the build's time", created)
	}
	if got := strings.Join(inspect.OCIv1.Config.Entrypoint, " "); got != "/usr/bin/heatscope" {
		t.Errorf("the image's entrypoint is %q, want /usr/bin/heatscope (the manifests give only args)", got)
	}
}

// checkStatic checks binary needs no dynamic loader or shared library: the
// image has none.
func checkStatic(t *testing.T, binary string) {
	t.Helper()
	f, err := elf.Open(binary)
	if err != nil {
		t.Fatalf("the image's heatscope: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the image's heatscope asks for a dynamic loader (PT_INTERP): build it with CGO_ENABLED=0")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the image's heatscope needs shared libraries %q", libs)
	}
}

// buildFixture compiles the C fixture with a known hot function.
func buildFixture(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hotc")
	run(t, "gcc", "-O2", "-o", bin, filepath.Join(repoRoot, "cmd", "heatscope", "testdata", "hotc.c"))
	return bin
}

// recordTop records the fixture for a few seconds with the command
// command builds (given a data directory and record's arguments, which
// name it /var/lib/heatscope), and returns the top functions by self time
// that record printed.
func recordTop(t *testing.T, fixture string, command func(data string, args []string) *exec.Cmd) []string {
	t.Helper()
	work := exec.Command(fixture, "20")
	if err := work.Start(); err != nil {
		t.Fatalf("start fixture: %v", err)
	}
	defer func() { _ = work.Process.Kill(); _ = work.Wait() }()
	data := t.TempDir()
	cmd := command(data, []string{"record", "--duration", "3s", "--pid", fmt.Sprint(work.Process.Pid),
		"--data", "", "--listen", "", "--progress", "0", "--cache-dir", "/var/lib/heatscope/cache",
		"--output", "/var/lib/heatscope/profile.pb.gz", "--top", "5"})
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, stdout.String(), stderr.String())
	}
	if fi, err := os.Stat(filepath.Join(data, "profile.pb.gz")); err != nil || fi.Size() == 0 {
		t.Errorf("record wrote no profile into the data directory: %v\n%s", err, stderr.String())
	}
	return topFunctions(stdout.String())
}

// topFunctions returns the function column of record's --top table, in
// its order.
func topFunctions(out string) []string {
	var funcs []string
	in := false
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 5 && fields[0] == "self" && fields[len(fields)-1] == "function":
			in = true
		case in && len(fields) >= 5:
			funcs = append(funcs, strings.Join(fields[4:], " "))
		}
	}
	return funcs
}
