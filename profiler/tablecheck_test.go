package profiler

import (
	"bytes"
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/internal/bpftest"
	"github.com/heatscope/heatscope/internal/fixture"
)

// TestTableMapsCheckPasses makes a table as the unwinder makes them and
// puts it into unwind_tables: the kernel takes it (on Debian 12's 6.1 it
// refused it, EINVAL, while the template carried the ELF's BTF and the
// tables did not; the kernel matrix, test/kernels, runs this on 6.1).
func TestTableMapsCheckPasses(t *testing.T) {
	bpftest.Require(t)
	spec, err := bpf.LoadProfile()
	if err != nil {
		t.Fatal(err)
	}
	outer := spec.Maps[bpf.ProfileMapUnwindTables]
	table := tableMapSpec(outer)
	if err := checkTableMaps(outer, table); err != nil {
		t.Fatalf("check of the table maps on this kernel: %v", err)
	}
	if outer.InnerMap.Key != nil || outer.InnerMap.Value != nil {
		t.Errorf("the unwind_tables template keeps BTF (key %v, value %v): the tables made without it may be refused", outer.InnerMap.Key, outer.InnerMap.Value)
	}
}

// TestTableWalkFallsBack forces the kernel to refuse the table maps check's
// table (one unlike the template, as 6.1 refused every table): with
// --unwind auto the profiler walks user stacks with frame pointers, warns
// naming the check and the kernel's error, and says so in its stats (the
// unwind summary line and the metric read them); it still samples. With
// --unwind dwarf Open fails with that error.
func TestTableWalkFallsBack(t *testing.T) {
	bpftest.Require(t)
	var logs bytes.Buffer
	cfg := Config{Frequency: 199, Unwind: UnwindAuto, refuseTables: true,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	startSpinner(t, "spin-fallback")
	got, st := record(t, cfg, 700*time.Millisecond)
	if f := st.Unwind.Fallback; f.Check != CheckTableMaps || !strings.Contains(f.Reason, "refuses an unwind table") {
		t.Errorf("fallback %+v, want check %q and the kernel's refusal", f, CheckTableMaps)
	}
	if st.Unwind.Enabled || st.DWARFWalks != 0 {
		t.Errorf("unwind tables enabled %v, %d table walks: want frame pointers only", st.Unwind.Enabled, st.DWARFWalks)
	}
	if w := logs.String(); !strings.Contains(w, "level=WARN") || !strings.Contains(w, "check="+CheckTableMaps) || !strings.Contains(w, "invalid argument") {
		t.Errorf("no warning naming the check and the kernel's error; logs:\n%s", w)
	}
	user := 0
	for _, c := range got {
		if c.user > 0 {
			user++
		}
	}
	if len(got) == 0 || user == 0 {
		t.Errorf("%d samples, %d with user frames: the fallback must still sample", len(got), user)
	}

	cfg.Unwind, cfg.Logger = UnwindDWARF, nil
	if p, err := Open(cfg); err == nil {
		p.Close()
		t.Fatal("--unwind dwarf opened although the kernel refuses the table maps")
	} else if !strings.Contains(err.Error(), "--unwind dwarf") || !strings.Contains(err.Error(), "refuses an unwind table") {
		t.Errorf("--unwind dwarf: error %q, want it to name the refused table", err)
	}
}

// TestTableWalkFallsBackWhenTheProgramIsRefused offers the verifier a
// table-walking program it refuses: with --unwind auto the sampler loads
// the frame-pointer program instead, warns naming the check and the
// verifier's words, and samples; with --unwind dwarf Open fails.
func TestTableWalkFallsBackWhenTheProgramIsRefused(t *testing.T) {
	bpftest.Require(t)
	var logs bytes.Buffer
	cfg := Config{Frequency: 199, Unwind: UnwindAuto, refuseProgram: true,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	startSpinner(t, "spin-refused")
	got, st := record(t, cfg, 700*time.Millisecond)
	if f := st.Unwind.Fallback; f.Check != CheckProgram || !strings.Contains(f.Reason, "refuses the table-walking program") {
		t.Errorf("fallback %+v, want check %q and the verifier's refusal", f, CheckProgram)
	}
	if w := logs.String(); !strings.Contains(w, "level=WARN") || !strings.Contains(w, "check="+CheckProgram) {
		t.Errorf("no warning naming the check; logs:\n%s", w)
	}
	if len(got) == 0 || st.DWARFWalks != 0 {
		t.Errorf("%d samples, %d table walks: want samples, by frame pointers", len(got), st.DWARFWalks)
	}
	cfg.Unwind, cfg.Logger = UnwindDWARF, nil
	if p, err := Open(cfg); err == nil {
		p.Close()
		t.Fatal("--unwind dwarf opened although the verifier refuses the program")
	} else if !strings.Contains(err.Error(), "verifier") {
		t.Errorf("--unwind dwarf: error %q, want the verifier's", err)
	}
}

// lockedBuffer is a bytes.Buffer the logger's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// nofpSource spends its time three calls below main, built without frame
// pointers: only the table walk finds main.
const nofpSource = `
static volatile long sink;
__attribute__((noinline)) long leaf(long n) { long s = 0; for (long i = 0; i < n; i++) sink = s += i * i; return s; }
__attribute__((noinline)) long mid(long n) { return leaf(n + (sink & 1)) + 1; }
__attribute__((noinline)) long top(long n) { return mid(n) * 2; }
int main(void) { for (;;) sink += top(100000); }
`

// TestWalkResultsTurnTheWalkOff records a frame-pointer-less program
// whose table is loaded with a wrong load bias, so that the walk finds no
// row, as on a kernel where it cannot work although every check at start
// passed: after walkCheckSamples samples with not one frame found with a
// table, the unwinder turns the walk off (no entry left: frame pointers),
// warns with check walk-results, and says so in its stats. The same
// recording with the right bias finds frames with the table and stays on.
func TestWalkResultsTurnTheWalkOff(t *testing.T) {
	bpftest.Require(t)
	bin := fixture.BuildC(t, "", "gcc", "nofp", nofpSource, "-O2", "-fomit-frame-pointer")
	for _, skew := range []bool{true, false} {
		cmd := exec.Command(bin)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var logs lockedBuffer
		p, err := Open(Config{Frequency: 499, Unwind: UnwindAuto, PIDs: []uint32{uint32(cmd.Process.Pid)}, skewTables: skew,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- p.Run(ctx, func(*Record, int64) {}) }()
		var st Stats
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			if st, err = p.Stats(); err != nil {
				t.Fatal(err)
			}
			if st.Unwind.Fallback.Check != "" || !skew && st.Unwind.TableFrames > 0 {
				break
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		entries := 0
		var key uint32
		var val bpf.ProfileHsProc
		for it := p.objs.UnwindProcs.Iterate(); it.Next(&key, &val); {
			entries++
		}
		p.Close()
		cmd.Process.Kill()
		cmd.Wait()
		f := st.Unwind.Fallback
		if !skew {
			if f.Check != "" || st.Unwind.TableFrames == 0 {
				t.Errorf("right bias: fallback %+v, %d frames found with tables: want the walk on, finding frames", f, st.Unwind.TableFrames)
			}
			continue
		}
		if f.Check != CheckWalkResults || !strings.Contains(f.Reason, "not one user frame found with a table") {
			t.Fatalf("wrong bias: fallback %+v after %d table walks, %d frames found with tables: want check %q", f, st.DWARFWalks, st.Unwind.TableFrames, CheckWalkResults)
		}
		if entries != 0 {
			t.Errorf("%d processes keep entries after the walk was turned off", entries)
		}
		if w := logs.String(); !strings.Contains(w, "level=WARN") || !strings.Contains(w, "check="+CheckWalkResults) {
			t.Errorf("no warning naming the check; logs:\n%s", w)
		}
	}
}
