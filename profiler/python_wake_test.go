package profiler

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/internal/bpftest"
)

// pyExecScript prints its pid, waits for a line, spins in Python, and at a
// second line execs argv[1] (the same interpreter under another name)
// running a Python loop: a Python process's new image, under one pid.
const pyExecScript = `import os, sys, threading
print(os.getpid(), flush=True)
go = threading.Event()
def wait():
    sys.stdin.readline()
    go.set()
threading.Thread(target=wait, daemon=True).start()
def spin():
    x = 0
    for i in range(10000):
        x += i
while not go.is_set():
    spin()
prog = "def hot():\n    x = 0\n    for i in range(10000):\n        x += i\nwhile True:\n    hot()\n"
os.execv(sys.argv[1], [sys.argv[1], "-c", prog])
`

// TestPythonExecWakes: the new image of a Python process (an exec: its
// pid was seen before, so its first sample wakes nobody as a new
// process's does) wakes the agent at its first sample, and has its
// Python frames walked once the agent has set it up. The agent polls
// once an hour here: without the wakeup no sample of the new image
// reaches it until the end.
func TestPythonExecWakes(t *testing.T) {
	bpftest.Require(t)
	if err := dwarfSupported(); err != nil {
		t.Skipf("the Python walk runs in the table-walking program, which this kernel cannot run: %v", err)
	}
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s here: %v", python, err)
	}
	// Another name for the same file: the new image's command name
	// tells its samples apart.
	link := filepath.Join(t.TempDir(), "pyexecd")
	if err := os.Symlink(python, link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", pyExecScript, link)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var pid uint32
	if _, err := fmt.Fscan(bufio.NewReader(out), &pid); err != nil {
		t.Fatalf("the script's pid: %v", err)
	}

	p, err := Open(Config{Frequency: 99, PIDs: []uint32{pid}, Unwind: UnwindDWARF, PollInterval: time.Hour})
	if err != nil {
		t.Fatalf("open profiler: %v", err)
	}
	defer p.Close()
	type seen struct {
		comm   string
		python int
	}
	var (
		mu      sync.Mutex
		samples []seen
	)
	newImage := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- p.Run(ctx, func(r *Record, _ int64) {
			mu.Lock()
			samples = append(samples, seen{r.Comm, len(r.Python)})
			mu.Unlock()
			if r.Comm == "pyexecd" {
				once.Do(func() { close(newImage) })
			}
		})
	}()
	// The first image set up: its entry names its interpreter.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var e bpf.ProfileHsProc
		if p.objs.UnwindProcs.Lookup(pid, &e) == nil && e.PyRuntime != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first image was not set up with its interpreter in 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := stdin.Write([]byte("exec\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-newImage:
	case <-time.After(30 * time.Second):
		t.Error("no sample of the exec'd image reached the agent in 30 s (it polls once an hour): its first sample woke nobody")
	}
	// Its samples after it was set up come with the final drain.
	time.Sleep(time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var before, after, afterPy int
	for _, s := range samples {
		switch s.comm {
		case "pyexecd":
			after++
			if s.python > 0 {
				afterPy++
			}
		default:
			before++
		}
	}
	t.Logf("%d samples of the first image, %d of the exec'd one, %d of them with Python frames", before, after, afterPy)
	if afterPy == 0 {
		t.Errorf("none of the exec'd image's %d samples has Python frames", after)
	}
}
