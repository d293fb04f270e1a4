package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/otlpprofile"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// TestExportOTLP: export --format otlp writes the protobuf of an OTLP
// ExportProfilesServiceRequest holding the samples the filters select,
// each with its own time, its own period (the rate changed mid-range),
// node, CPU, pid, tid, command, container and frames; the samples the
// filters leave out are not in it.
func TestExportOTLP(t *testing.T) {
	dir := t.TempDir()
	start := time.Now().Add(-time.Hour).Truncate(time.Second)
	cont := &sample.Container{Cgroup: "/kubepods/burstable/pod42/abc", ID: "abc", Runtime: "containerd", PodUID: "42", QoS: "burstable"}
	stack := []sample.Frame{
		{Function: "do_syscall_64", Module: sample.KernelModule, Address: 0xffffffff81000010, Kind: sample.KindKernel},
		{Function: "spin", Module: "/bin/spin", BuildID: "beef", Address: 0x401000, Kind: sample.KindUser},
		{Function: "Model.forward", Module: "/srv/model.py", Kind: sample.KindPython, Line: 42, StartLine: 40},
	}
	var want []sample.Sample
	for _, node := range []string{"a", "b"} {
		db, err := store.Open(dir, store.Options{Source: "live", Node: node, PeriodNs: 10_101_010})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 300 {
			period := int64(10_101_010)
			if i == 150 {
				db.SetPeriod(20_202_020) // the overhead guard halved the rate
			}
			if i >= 150 {
				period = 20_202_020
			}
			pid := uint32(7 + i%2) // pid 8 is filtered out
			s := sample.Sample{Time: start.Add(time.Duration(i) * 20 * time.Millisecond).UnixNano(), CPU: uint32(i % 4), PID: pid, TID: pid + 100,
				Comm: "spin", CgroupID: 99, Container: cont, Stack: stack}
			if err := db.Append(&s); err != nil {
				t.Fatal(err)
			}
			if node == "a" && pid == 7 {
				s.Node, s.PeriodNs = node, period
				want = append(want, s)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "a.otlp")
	var stdout, stderr bytes.Buffer
	args := []string{"export", "--data", dir, "--node", "a", "--pid", "7", "--format", "otlp", "-o", out}
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "exported 150 samples") || !strings.Contains(stderr.String(), "(otlp)") {
		t.Errorf("export said %q", stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	p, err := otlpprofile.UnmarshalRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	var got []sample.Sample
	if _, err := otlpprofile.Decode(p, otlpprofile.DecodeOptions{}, func(s *sample.Sample) error {
		got = append(got, *s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d samples in the request, want %d", len(got), len(want))
	}
	byTime := map[int64]sample.Sample{}
	for _, s := range got {
		byTime[s.Time] = s
	}
	for _, w := range want {
		g, ok := byTime[w.Time]
		if !ok || !reflect.DeepEqual(g, w) {
			t.Fatalf("sample at %d:\n got %+v %+v\nwant %+v %+v", w.Time, g, g.Container, w, w.Container)
		}
	}
}
