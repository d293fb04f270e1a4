package profiler

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/internal/bpftest"
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
