// Package tmpfstest gives tests a small disk of their own to fill: a tmpfs
// mounted in a test's temporary directory (root only), and a file that
// takes all the room left on it.
package tmpfstest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size (as mount takes it: "1m") on a new
// directory of t's and returns the directory; it is unmounted when t ends.
// Without root, or where tmpfs cannot be mounted, t is skipped, saying why.
func Mount(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	// Lazily: a store the test left open must not keep it mounted.
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// Fill writes the file at path until its file system has no room left,
// and returns a function that removes it, giving the room back.
func Fill(t testing.TB, path string) (free func()) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("fill the disk: %v", err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the disk: %v", err)
			}
			break
		}
	}
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatalf("give the disk's room back: %v", err)
		}
	}
}
