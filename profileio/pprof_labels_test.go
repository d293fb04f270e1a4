package profileio

import (
	"bytes"
	"slices"
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
	p := writeAndParse(t, b)
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

// writeAndParse writes b's profile and parses it with pprof's parser.
func writeAndParse(t *testing.T, b *PprofBuilder) *profile.Profile {
	t.Helper()
	var buf bytes.Buffer
	if err := WritePprof(&buf, b.Profile()); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReadPprofContainerLabelsWithoutCgroupID reads a profile whose samples
// carry container labels but no cgroup_id, as another tool might write:
// each distinct container gets an id of its own, shared by its samples.
func TestReadPprofContainerLabelsWithoutCgroupID(t *testing.T) {
	cart := &sample.Container{Namespace: "shop", Pod: "cart-1", Name: "cart"}
	web := &sample.Container{Namespace: "shop", Pod: "web-1", Name: "web"}
	stack := []sample.Frame{{Function: "main", Module: "/bin/app", Kind: sample.KindUser}}
	b := NewPprofBuilder(10_000_000)
	b.KeepTimestamps(true)
	for i, c := range []*sample.Container{cart, web, cart, nil} {
		b.Add(&sample.Sample{Time: int64(i+1) * 1e9, PID: 1, TID: 1, Comm: "app", Container: c, Stack: stack})
	}
	var buf bytes.Buffer
	if err := WritePprof(&buf, b.Profile()); err != nil {
		t.Fatal(err)
	}
	got := readPprof(t, buf.Bytes())
	if len(got) != 4 {
		t.Fatalf("%d samples, want 4", len(got))
	}
	for i, want := range []*sample.Container{cart, web, cart, nil} {
		g := got[i]
		if want == nil {
			if g.Container != nil || g.CgroupID != 0 {
				t.Errorf("sample %d without labels: container %+v, cgroup %d", i, g.Container, g.CgroupID)
			}
			continue
		}
		if g.Container == nil || *g.Container != *want || g.CgroupID>>63 != 1 {
			t.Errorf("sample %d: container %+v, cgroup %#x; want %+v and a synthetic id", i, g.Container, g.CgroupID, want)
		}
	}
	if got[0].CgroupID != got[2].CgroupID || got[0].CgroupID == got[1].CgroupID || got[0].Container != got[2].Container {
		t.Errorf("cgroup ids %#x %#x %#x: want one per container, and one Container shared", got[0].CgroupID, got[1].CgroupID, got[2].CgroupID)
	}
}

// TestPprofUnwindLabels writes samples whose user frames were found with
// unwind tables, frame pointers, or both, and reads the labels back with
// pprof's parser: unwind says which, unwind_fp names the frames found
// with frame pointers, leaf first; a sample that says nothing of its
// unwinding (frame pointers only, or stored before the store kept it) has
// neither. The frames are marked as the recorder marks them
// (sample.Unwind.Mark), and a frame reached both ways stays one location
// of one function.
func TestPprofUnwindLabels(t *testing.T) {
	stack := []sample.Frame{
		{Function: "do_syscall_64", Module: sample.KernelModule, Kind: sample.KindKernel},
		{Function: "leaf", Module: "/bin/app", Kind: sample.KindUser},
		{Function: "JS:middle", Module: "[anon]", Kind: sample.KindJIT},
		{Function: "caller", Module: "/bin/app", Kind: sample.KindUser},
		{Function: "main", Module: "/bin/app", Kind: sample.KindUser},
	}
	tests := []struct {
		comm   string
		unwind sample.Unwind
		method string
		fp     []string
	}{
		{"tables", sample.Unwind{UserFrames: 4, Table: [2]uint64{0b111}}, "table", nil},
		// Frame 2 (caller) was found with frame pointers, from the JIT
		// frame; frames 1 and 3 with tables.
		{"mixed", sample.Unwind{UserFrames: 4, Table: [2]uint64{0b101}}, "table+fp", []string{"caller"}},
		{"fp", sample.Unwind{UserFrames: 4}, "fp", []string{"JS:middle", "caller", "main"}},
		{"unknown", sample.Unwind{}, "", nil},
		{"leafonly", sample.Unwind{UserFrames: 1, Table: [2]uint64{1}}, "", nil},
	}
	b := NewPprofBuilder(10_000_000)
	marked := map[string][]sample.Frame{}
	for i, tt := range tests {
		st := stack
		if tt.unwind.UserFrames == 1 {
			st = stack[:2]
		}
		marked[tt.comm] = tt.unwind.Mark(st)
		b.Add(&sample.Sample{Time: int64(i+1) * 1e9, PID: 1, TID: 1, Comm: tt.comm, Stack: marked[tt.comm]})
	}
	if stack[2].Method != sample.MethodNotKnown {
		t.Fatal("Mark changed the stack it was given")
	}
	p := writeAndParse(t, b)
	if len(p.Location) != len(stack) || len(p.Function) != len(stack) {
		t.Errorf("%d locations and %d functions for %d frames reached different ways, want one each", len(p.Location), len(p.Function), len(stack))
	}
	if len(p.Sample) != len(tests) {
		t.Fatalf("%d pprof samples, want %d", len(p.Sample), len(tests))
	}
	for _, s := range p.Sample {
		for _, tt := range tests {
			if s.Label["comm"][0] != tt.comm {
				continue
			}
			if got := s.Label[UnwindLabel]; tt.method == "" && got != nil || tt.method != "" && (len(got) != 1 || got[0] != tt.method) {
				t.Errorf("%s: label %s = %q, want %q", tt.comm, UnwindLabel, got, tt.method)
			}
			if got := s.Label[UnwindFPLabel]; !slices.Equal(got, tt.fp) {
				t.Errorf("%s: label %s = %q, want %q", tt.comm, UnwindFPLabel, got, tt.fp)
			}
		}
	}
}

// TestReadPprofUnwindLabels reads back the unwind labels as the frames'
// methods (a profile of record --output imported keeps them), and leaves
// the frames unmarked when the labels do not fit the stack.
func TestReadPprofUnwindLabels(t *testing.T) {
	stack := []sample.Frame{
		{Function: "do_syscall_64", Module: sample.KernelModule, Address: 0xffffffff81000010, Kind: sample.KindKernel},
		{Function: "leaf", Module: "/bin/app", Address: 0x10, Kind: sample.KindUser},
		{Function: "walk", Module: "/bin/app", Address: 0x20, Kind: sample.KindUser},
		{Function: "walk", Module: "/bin/app", Address: 0x30, Kind: sample.KindUser},
		{Function: "main", Module: "/bin/app", Address: 0x40, Kind: sample.KindUser},
	}
	var want [][]sample.Frame
	for _, bits := range []uint64{0b111, 0b000, 0b101, 0b110, 0b011} {
		u := sample.Unwind{UserFrames: 4, Table: [2]uint64{bits}}
		want = append(want, u.Mark(stack))
	}
	want = append(want, stack) // not walked with tables
	b := NewPprofBuilder(10_000_000)
	for i, st := range want {
		b.Add(&sample.Sample{Time: int64(i+1) * 1e9, PID: uint32(i + 1), TID: uint32(i + 1), Comm: "app", Stack: st})
	}
	var buf bytes.Buffer
	if err := WritePprof(&buf, b.Profile()); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	got := make([][]sample.Frame, len(want))
	if err := ReadPprof(bytes.NewReader(raw), func(s *sample.Sample) error {
		got[s.PID-1] = s.Stack
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	methods := func(st []sample.Frame) []sample.Method {
		var m []sample.Method
		for _, f := range st {
			m = append(m, f.Method)
		}
		return m
	}
	for i := range want {
		w := methods(want[i])
		if i == 2 {
			// walk (table) calls walk (frame pointers): the labels say
			// "table+fp" with one walk, which the first walk takes.
			w = methods(want[3])
		}
		if g := methods(got[i]); !slices.Equal(g, w) {
			t.Errorf("sample %d: read back marked %v, want %v", i, g, w)
		}
	}

	// Labels that do not fit: nothing is marked.
	p, err := profile.Parse(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2][]string{
		{{"table"}, {"main"}},            // table with a frame pointer frame
		{{"fp"}, {"main"}},               // fp, but not every frame
		{{"table+fp"}, {"nosuch"}},       // a name not in the stack
		{{"table+fp"}, {"main", "walk"}}, // out of order
		{{"sideways"}, nil},              // no such method
	} {
		for _, ps := range p.Sample {
			ps.Label = map[string][]string{"comm": {"app"}, UnwindLabel: bad[0], UnwindFPLabel: bad[1]}
		}
		var out bytes.Buffer
		if err := p.Write(&out); err != nil {
			t.Fatal(err)
		}
		if err := ReadPprof(&out, func(s *sample.Sample) error {
			if m := methods(s.Stack); slices.ContainsFunc(m, func(x sample.Method) bool { return x != sample.MethodNotKnown }) {
				t.Errorf("labels %q marked the frames %v", bad, m)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadPprofUnwindLabelsKernelAbove reads a crafted profile whose stack
// has a kernel frame above a user one, labelled as walked with tables:
// nothing is marked, since a kernel frame cannot have been found by the
// user stack walk (and the store refuses a marked kernel frame).
func TestReadPprofUnwindLabelsKernelAbove(t *testing.T) {
	b := NewPprofBuilder(10_000_000)
	b.Add(&sample.Sample{Time: 1e9, PID: 1, TID: 1, Comm: "app", Stack: []sample.Frame{
		{Function: "leaf", Module: "/bin/app", Address: 0x10, Kind: sample.KindUser},
		{Function: "do_syscall_64", Module: sample.KernelModule, Address: 0xffffffff81000010, Kind: sample.KindKernel},
		{Function: "main", Module: "/bin/app", Address: 0x40, Kind: sample.KindUser},
	}})
	p := b.Profile()
	for _, ps := range p.Sample {
		ps.Label = map[string][]string{"comm": {"app"}, UnwindLabel: {"table"}}
	}
	var buf bytes.Buffer
	if err := WritePprof(&buf, p); err != nil {
		t.Fatal(err)
	}
	read := 0
	if err := ReadPprof(&buf, func(s *sample.Sample) error {
		read++
		checkSample(t, s)
		for _, f := range s.Stack {
			if f.Method != sample.MethodNotKnown {
				t.Errorf("frame %s (kind %d) marked %d", f.Function, f.Kind, f.Method)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if read != 1 {
		t.Fatalf("read %d samples, want 1", read)
	}
}
