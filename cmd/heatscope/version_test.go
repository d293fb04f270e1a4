package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersion builds heatscope with `make build` and a build tag, and
// checks that `version` and `--version` both print the version git
// describes, the commit it was built from, the Go release and the tags.
func TestVersion(t *testing.T) {
	describe, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		t.Skipf("no git work tree here (%v): make build has no version to stamp", err)
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("no make: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "heatscope")
	if out, err := exec.Command("make", "-C", "../..", "build", "BIN="+bin, "TAGS=heatscope_version_test").CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	want := []string{"heatscope " + strings.TrimSpace(string(describe)) + "\n", "commit:     " + strings.TrimSpace(string(head)),
		"go:         " + runtime.Version() + "\n", "build tags: heatscope_version_test\n"}
	var printed string
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(bin, arg).CombinedOutput()
		if err != nil {
			t.Fatalf("heatscope %s: %v\n%s", arg, err, out)
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("heatscope %s printed %q, want it to contain %q", arg, out, w)
			}
		}
		if printed != "" && string(out) != printed {
			t.Errorf("version and --version differ: %q and %q", printed, out)
		}
		printed = string(out)
	}
	if code, _, stderr := runIn("version", "extra"); code != 2 || !strings.Contains(stderr, `unexpected argument "extra"`) {
		t.Errorf("version extra: exit %d, %q; want a usage error", code, stderr)
	}
}
