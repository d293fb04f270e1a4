package otlpprofile

import (
	"reflect"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/heatscope/heatscope/sample"
)

// attributes reads a record's attributes as a plain map.
func attributes(t *testing.T, p pprofile.Profiles, record interface {
	AttributeIndices() pcommon.Int32Slice
}) map[string]any {
	t.Helper()
	m, err := pprofile.FromAttributeIndices(p.Dictionary().AttributeTable(), record, p.Dictionary())
	if err != nil {
		t.Fatal(err)
	}
	return m.AsRaw()
}

// TestEncodeConventions: what other OTLP consumers read is keyed as
// OpenTelemetry's semantic conventions and the eBPF profiler key it: the
// node as the resource's host.name, the scope heatscope's, CPU time in
// nanoseconds with the batch's period, each sample's time and weight,
// the process, thread, CPU and container as sample attributes, the frame
// kind as profile.frame.type, the build id on the mapping.
func TestEncodeConventions(t *testing.T) {
	c := &sample.Container{Cgroup: "/kubepods/burstable/pod42/abc", ID: "abc", Runtime: "containerd", PodUID: "42",
		QoS: "burstable", Namespace: "shop", Pod: "cart-1", Name: "cart"}
	stack := []sample.Frame{
		{Function: "do_idle", Module: sample.KernelModule, Address: 0xffff0001, Kind: sample.KindKernel},
		{Function: "main", Module: "/bin/app", BuildID: "beef", Address: 0x401000, Kind: sample.KindUser, Method: sample.MethodTable},
		{Function: "Model.forward", Module: "/srv/model.py", Kind: sample.KindPython, Line: 42, StartLine: 40},
	}
	e := NewEncoder("v9", "node-1", 0)
	e.Add(&sample.Sample{Time: 100, CPU: 3, PID: 10, TID: 11, Comm: "app", CgroupID: 77, Container: c, Stack: stack, PeriodNs: 10_101_010})
	e.Add(&sample.Sample{Time: 250, CPU: 3, PID: 10, TID: 11, Comm: "app", CgroupID: 77, Container: c, Stack: stack, PeriodNs: 20_202_020})
	e.Add(&sample.Sample{Time: 300, CPU: 1, PID: 10, TID: 11, Comm: "app", CgroupID: 77, Container: c, Stack: stack, PeriodNs: 20_202_020})
	p := wire(t, e.Profiles())
	strs := p.Dictionary().StringTable()

	if p.ResourceProfiles().Len() != 1 {
		t.Fatalf("%d resources, want 1 (one node)", p.ResourceProfiles().Len())
	}
	rp := p.ResourceProfiles().At(0)
	if got := rp.Resource().Attributes().AsRaw(); !reflect.DeepEqual(got, map[string]any{"host.name": "node-1"}) {
		t.Errorf("resource %v", got)
	}
	sp := rp.ScopeProfiles().At(0)
	if sp.Scope().Name() != "heatscope" || sp.Scope().Version() != "v9" {
		t.Errorf("scope %q %q", sp.Scope().Name(), sp.Scope().Version())
	}
	prof := sp.Profiles().At(0)
	vt := func(v pprofile.ValueType) string {
		return strs.At(int(v.TypeStrindex())) + "/" + strs.At(int(v.UnitStrindex()))
	}
	if vt(prof.SampleType()) != "cpu/nanoseconds" || vt(prof.PeriodType()) != "cpu/nanoseconds" || prof.Period() != 20_202_020 {
		t.Errorf("sample type %s, period %d %s; want cpu/nanoseconds, the most common period 20202020 cpu/nanoseconds",
			vt(prof.SampleType()), prof.Period(), vt(prof.PeriodType()))
	}
	if prof.Time() != 100 || prof.DurationNano() != 201 || prof.ProfileID().IsEmpty() {
		t.Errorf("time %d, duration %d, id %v; want 100, 201 (to just past the last sample), an id", prof.Time(), prof.DurationNano(), prof.ProfileID())
	}
	if prof.Samples().Len() != 2 {
		t.Fatalf("%d OTLP samples, want 2 (CPU 3's two share one)", prof.Samples().Len())
	}
	s := prof.Samples().At(0)
	if got := s.TimestampsUnixNano().AsRaw(); !reflect.DeepEqual(got, []uint64{100, 250}) {
		t.Errorf("timestamps %v", got)
	}
	if got := s.Values().AsRaw(); !reflect.DeepEqual(got, []int64{10_101_010, 20_202_020}) {
		t.Errorf("values %v, want each sample's own period", got)
	}
	wantAttrs := map[string]any{
		"process.pid": int64(10), "thread.id": int64(11), "thread.name": "app", "cpu.logical_number": int64(3),
		"heatscope.cgroup.id": int64(77), "process.linux.cgroup": "0::/kubepods/burstable/pod42/abc",
		"container.id": "abc", "container.runtime.name": "containerd", "k8s.pod.uid": "42",
		"heatscope.k8s.pod.qos_class": "burstable", "k8s.namespace.name": "shop", "k8s.pod.name": "cart-1", "k8s.container.name": "cart",
	}
	if got := attributes(t, p, s); !reflect.DeepEqual(got, wantAttrs) {
		t.Errorf("sample attributes\n got %v\nwant %v", got, wantAttrs)
	}
	locs := p.Dictionary().StackTable().At(int(s.StackIndex())).LocationIndices()
	if locs.Len() != 3 {
		t.Fatalf("%d locations, want 3", locs.Len())
	}
	for i, want := range []map[string]any{
		{"profile.frame.type": "kernel"},
		{"profile.frame.type": "native", "heatscope.unwind.method": "table"},
		{"profile.frame.type": "cpython"},
	} {
		l := p.Dictionary().LocationTable().At(int(locs.At(i)))
		if got := attributes(t, p, l); !reflect.DeepEqual(got, want) {
			t.Errorf("location %d attributes %v, want %v", i, got, want)
		}
		fn := p.Dictionary().FunctionTable().At(int(l.Lines().At(0).FunctionIndex()))
		if name := strs.At(int(fn.NameStrindex())); name != stack[i].Function || l.Address() != stack[i].Address {
			t.Errorf("location %d: %s at %#x", i, name, l.Address())
		}
		if i == 2 {
			// A Python frame: no mapping, its file and first line the
			// function's, the line run the line's.
			if file := strs.At(int(fn.FilenameStrindex())); file != "/srv/model.py" || fn.StartLine() != 40 || l.Lines().At(0).Line() != 42 || l.MappingIndex() != 0 {
				t.Errorf("Python location: file %s, start line %d, line %d, mapping %d", file, fn.StartLine(), l.Lines().At(0).Line(), l.MappingIndex())
			}
			continue
		}
		m := p.Dictionary().MappingTable().At(int(l.MappingIndex()))
		if file := strs.At(int(m.FilenameStrindex())); file != stack[i].Module {
			t.Errorf("location %d: mapping %s", i, file)
		}
		if i == 1 {
			if got := attributes(t, p, m); !reflect.DeepEqual(got, map[string]any{"process.executable.build_id.gnu": "beef"}) {
				t.Errorf("mapping attributes %v", got)
			}
		}
	}
}

// TestEncodeHostID: a recorder's instance id is its resources' host.id,
// in every batch, so that a receiver tells apart two machines sending
// under one host.name.
func TestEncodeHostID(t *testing.T) {
	e := NewEncoder("v9", "node-1", 10_101_010)
	e.SetHostID("0123456789abcdef")
	for range 2 {
		e.Add(&sample.Sample{Time: 100, CPU: 1, PID: 10, TID: 10, Comm: "app", Stack: []sample.Frame{{Function: "main", Module: "/bin/app", Kind: sample.KindUser}}})
		p := wire(t, e.Profiles())
		want := map[string]any{"host.name": "node-1", "host.id": "0123456789abcdef"}
		if got := p.ResourceProfiles().At(0).Resource().Attributes().AsRaw(); !reflect.DeepEqual(got, want) {
			t.Fatalf("resource %v, want %v", got, want)
		}
	}
}
