package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// TestHeapProfileOnSignal sends this process SIGUSR1 twice and reads back
// the two heap profiles the handler wrote: real pprof files with in-use
// space, distinct names.
func TestHeapProfileOnSignal(t *testing.T) {
	dir := t.TempDir()
	hp, err := startHeapProfiler(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer hp.stop()
	var names []string
	for want := 1; want <= 2; want++ {
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			names, _ = filepath.Glob(filepath.Join(dir, "heap-*.pb.gz"))
			if len(names) >= want || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if len(names) != want {
			t.Fatalf("after %d SIGUSR1: %d heap profiles in %s, want %d", want, len(names), dir, want)
		}
	}
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		found := false
		for _, st := range p.SampleType {
			found = found || st.Type == "inuse_space" && st.Unit == "bytes"
		}
		if !found || len(p.Sample) == 0 {
			t.Fatalf("%s: sample types %v, %d samples: want inuse_space in bytes and samples", name, p.SampleType, len(p.Sample))
		}
	}
}

// TestHeapProfileDirMustExist: a missing or non-directory path is refused
// at start, naming the flag.
func TestHeapProfileDirMustExist(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(t.TempDir(), "missing"), file} {
		if _, err := startHeapProfiler(dir); err == nil || !strings.Contains(err.Error(), "--heap-profile-dir") {
			t.Fatalf("startHeapProfiler(%s) = %v, want an error naming --heap-profile-dir", dir, err)
		}
	}
}

// TestCPUProfileWritten profiles a busy loop and reads the file back with
// pprof's parser: a CPU profile with samples.
func TestCPUProfileWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := startCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		n++
	}
	stop()
	p := readProfile(t, path)
	if len(p.SampleType) < 2 || p.SampleType[1].Type != "cpu" || len(p.Sample) == 0 {
		t.Errorf("not a CPU profile with samples: types %v, %d samples (%d loops)", p.SampleType, len(p.Sample), n)
	}
}
