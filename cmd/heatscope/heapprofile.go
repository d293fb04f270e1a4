package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"
)

// heapProfiler writes the agent's own heap profile into a directory each
// time the process receives SIGUSR1: what an operator (or bench/soak) takes
// at two moments of a long run and compares with `go tool pprof
// -diff_base`. It opens no port: a signal needs no listener and no token.
type heapProfiler struct {
	dir  string
	sig  chan os.Signal
	done chan struct{}
	wg   sync.WaitGroup
	seq  int
}

// startHeapProfiler checks that dir is a writable directory and starts
// writing a heap profile into it on every SIGUSR1.
func startHeapProfiler(dir string) (*heapProfiler, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("--heap-profile-dir: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("--heap-profile-dir %s: not a directory", dir)
	}
	h := &heapProfiler{dir: dir, sig: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(h.sig, syscall.SIGUSR1)
	h.wg.Add(1)
	go h.loop()
	return h, nil
}

func (h *heapProfiler) loop() {
	defer h.wg.Done()
	for {
		select {
		case <-h.done:
			return
		case <-h.sig:
			path, err := h.write(time.Now())
			if err != nil {
				slog.Warn("heap profile not written", "err", err)
				continue
			}
			slog.Info("heap profile written", "path", path)
		}
	}
}

// write takes one heap profile, after a garbage collection so that its
// in-use figures are those of the moment, not of the last cycle. The file
// appears complete (written under a temporary name, then renamed).
func (h *heapProfiler) write(now time.Time) (string, error) {
	h.seq++
	path := filepath.Join(h.dir, fmt.Sprintf("heap-%s-%d.pb.gz", now.UTC().Format("20060102T150405Z"), h.seq))
	f, err := os.CreateTemp(h.dir, ".heap-*.tmp")
	if err != nil {
		return "", fmt.Errorf("create heap profile: %w", err)
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return "", fmt.Errorf("write heap profile %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write heap profile %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return "", fmt.Errorf("write heap profile: %w", err)
	}
	return path, nil
}

// stop stops listening for SIGUSR1.
func (h *heapProfiler) stop() {
	signal.Stop(h.sig)
	close(h.done)
	h.wg.Wait()
}

// startCPUProfile writes the agent's own CPU profile into path until the
// returned function is called: where the agent's CPU goes (symbolizing,
// building unwind tables, the store), beside the BPF program's run time
// that --bpf-stats reports.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			slog.Warn("CPU profile not written", "path", path, "err", err)
		}
	}, nil
}
