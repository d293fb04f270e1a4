// Package pyfixture runs the Python programs the tests of Python stacks
// read: real CPython interpreters (Debian's /usr/bin/python3.11 and the
// pyenv shared-library builds where installed) running scripts with known
// hot functions, each of which prints one JSON line when it is ready,
// naming its pid and the addresses (id) of its functions' code objects.
package pyfixture

import (
	"bufio"
	"embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/needs"
)

//go:embed scripts/*.py
var scripts embed.FS

// Interpreter is a CPython interpreter the tests run.
type Interpreter struct {
	// Name names it in subtests: "debian-3.11", "pyenv-3.12.1".
	Name string
	// Path is the executable.
	Path string
	// Version is the major.minor version, "3.11".
	Version string
	// Required says CI must have it: a test fails without it under
	// HEATSCOPE_REQUIRE_BPF=1 (.ci/run installs it) rather than skips.
	Required bool
}

// Interpreters are the interpreters the tests of Python stacks try, each
// skipped with the reason where it is not installed: Debian's static
// python3.11 and pyenv's shared-library builds (libpython3.X.so).
var Interpreters = []Interpreter{
	{Name: "debian-3.11", Path: "/usr/bin/python3.11", Version: "3.11", Required: true},
	{Name: "pyenv-3.11.7", Path: "/root/.pyenv/versions/3.11.7/bin/python3", Version: "3.11"},
	{Name: "pyenv-3.12.1", Path: "/root/.pyenv/versions/3.12.1/bin/python3", Version: "3.12"},
	{Name: "pyenv-3.13.0", Path: "/root/.pyenv/versions/3.13.0/bin/python3", Version: "3.13"},
}

// Need skips t (or fails it, for a required interpreter under
// HEATSCOPE_REQUIRE_BPF=1) when py is not installed.
func Need(t testing.TB, py Interpreter) {
	t.Helper()
	if _, err := os.Stat(py.Path); err != nil {
		if !py.Required {
			t.Skipf("no %s here: %v", py.Path, err)
		}
		needs.Missing(t, "HEATSCOPE_REQUIRE_BPF", fmt.Sprintf("no %s here: %v", py.Path, err))
	}
}

// Ready is what a script prints when it runs its hot functions.
type Ready struct {
	// PID is the script's process id.
	PID int `json:"pid"`
	// Codes maps the qualified names of the script's functions to the
	// addresses of their code objects (id(f.__code__)).
	Codes map[string]uint64 `json:"codes"`
	// Workers are the pids of the processes it started (a pool's).
	Workers []int `json:"workers"`
	// Tids are the thread ids of its threads, by name (threads.py).
	Tids map[string]int `json:"tids"`
	// Lines are instructions the script saw run: a code object, the
	// offset of an instruction in its code (f_lasti, bytes) and its line.
	Lines []Instr `json:"lines"`
	// File is the script's path, its code objects' co_filename.
	File string `json:"file"`
	// Traceable maps qualified names to the code unit of the code's
	// first traceable instruction, its first RESUME (setup.py).
	Traceable map[string]int `json:"traceable"`
}

// Instr is an instruction a running frame was at.
type Instr struct {
	Code  uint64 `json:"code"`
	Lasti int    `json:"lasti"`
	Line  int    `json:"line"`
	Func  string `json:"func"`
}

// Process is a running script.
type Process struct {
	Ready
	Cmd *exec.Cmd
}

// Installed returns the Interpreters installed here, each missing one
// named in t's log: a required one missing fails t under
// HEATSCOPE_REQUIRE_BPF=1 (as Need), and t is skipped when none is
// installed.
func Installed(t testing.TB) []Interpreter {
	t.Helper()
	var have []Interpreter
	for _, py := range Interpreters {
		if _, err := os.Stat(py.Path); err != nil {
			if py.Required && needs.Required("HEATSCOPE_REQUIRE_BPF") {
				Need(t, py)
			}
			t.Logf("%s skipped: %v", py.Name, err)
			continue
		}
		have = append(have, py)
	}
	if len(have) == 0 {
		t.Skip("no CPython 3.11 to 3.13 installed here")
	}
	return have
}

// Start runs script (a file of scripts/, "busy.py") under py with args
// until the test ends, and waits for it to be ready (at most 30 s).
func Start(t testing.TB, py Interpreter, script string, args ...string) *Process {
	t.Helper()
	Need(t, py)
	src, err := scripts.ReadFile("scripts/" + script)
	if err != nil {
		t.Fatalf("pyfixture: %v", err)
	}
	path := filepath.Join(t.TempDir(), script)
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatalf("pyfixture: %v", err)
	}
	cmd := exec.Command(py.Path, append([]string{path}, args...)...)
	cmd.Stderr = os.Stderr
	// A process group of its own, killed whole at the end: a pool's
	// workers go with their parent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("pyfixture: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("pyfixture: start %s %s: %v", py.Path, script, err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	ready := make(chan error, 1)
	p := &Process{Cmd: cmd}
	go func() {
		line, err := bufio.NewReader(out).ReadBytes('\n')
		if err != nil {
			ready <- fmt.Errorf("read its ready line: %w", err)
			return
		}
		ready <- json.Unmarshal(line, &p.Ready)
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("pyfixture: %s under %s: %v", script, py.Name, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("pyfixture: %s under %s not ready after 30 s", script, py.Name)
	}
	return p
}
