package pysymbol

import (
	"errors"
	"io/fs"
	"os"
	"testing"
)

// TestStartTime: the start time read with raw system calls is the one
// os.ReadFile's text gives, and a process gone is told by fs.ErrNotExist.
func TestStartTime(t *testing.T) {
	text, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc/self/stat:", err)
	}
	want, err := parseStartTime(text)
	if err != nil {
		t.Fatal(err)
	}
	got, err := StartTime("/proc", uint32(os.Getpid()))
	if err != nil || got != want || got == 0 {
		t.Fatalf("StartTime = %d, %v; want %d", got, err, want)
	}
	if _, err := StartTime("/proc", 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("StartTime of no process: %v, want not exist", err)
	}
}
