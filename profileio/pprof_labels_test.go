package profileio

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/sample"
)

// TestPprofContainerLabels writes samples with and without container
// metadata and reads the labels back with pprof's own parser.
func TestPprofContainerLabels(t *testing.T) {
	c := &sample.Container{Cgroup: "/kubepods/besteffort/podu/abc", ID: "abc", Runtime: "containerd",
		PodUID: "u", QoS: "besteffort", Namespace: "shop", Pod: "cart-1", Name: "cart"}
	stack := []sample.Frame{{Function: "main", Module: "/bin/app", Kind: sample.KindUser}}
	b := NewPprofBuilder(10_000_000)
	b.Add(&sample.Sample{Time: 1e9, PID: 1, TID: 1, Comm: "app", Container: c, Stack: stack})
	b.Add(&sample.Sample{Time: 2e9, PID: 1, TID: 1, Comm: "app", Container: c, Stack: stack})
	b.Add(&sample.Sample{Time: 3e9, PID: 2, TID: 2, Comm: "host", Stack: stack})
	var buf bytes.Buffer
	if err := WritePprof(&buf, b.Profile()); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != 2 {
		t.Fatalf("%d pprof samples, want 2 (one per container)", len(p.Sample))
	}
	want := map[string]string{"cgroup": c.Cgroup, "container_id": "abc", "container_runtime": "containerd",
		"container": "cart", "pod": "cart-1", "pod_uid": "u", "namespace": "shop", "qos": "besteffort"}
	for _, s := range p.Sample {
		switch s.Label["comm"][0] {
		case "app":
			for k, v := range want {
				if got := s.Label[k]; len(got) != 1 || got[0] != v {
					t.Errorf("label %s = %v, want %q", k, got, v)
				}
			}
			if s.Value[0] != 2 {
				t.Errorf("the container's sample counts %d, want 2", s.Value[0])
			}
		case "host":
			for k := range want {
				if _, ok := s.Label[k]; ok {
					t.Errorf("a sample without container metadata has label %s", k)
				}
			}
		}
	}
}
