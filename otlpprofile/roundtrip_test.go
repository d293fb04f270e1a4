package otlpprofile

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/heatscope/heatscope/sample"
)

// randomSamples returns n samples as a recorder writes them: several
// nodes, stacks of every frame kind and unwind method, containers of
// every shape, cgroup ids past 2^63, periods that change mid-batch.
func randomSamples(r *rand.Rand, n int) []sample.Sample {
	frames := []sample.Frame{
		{Function: "do_syscall_64", Module: sample.KernelModule, Address: 0xffffffff81001234, Kind: sample.KindKernel},
		{Function: "nft_do_chain", Module: "[nf_tables]", Address: 0xffffffffc0a01000, Kind: sample.KindKernel},
		{Function: "[nf_tables+0x77]", Module: "[nf_tables]", Address: 0xffffffffc0a01077, Kind: sample.KindKernel},
		{Function: "memcpy", Module: "/usr/lib/x86_64-linux-gnu/libc.so.6", BuildID: "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678", Address: 0x9a2c0, Kind: sample.KindUser},
		{Function: "memcpy", Module: "/usr/lib/x86_64-linux-gnu/libc.so.6", BuildID: "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678", Address: 0x9a2c4, Kind: sample.KindUser, Method: sample.MethodTable},
		{Function: "main.spin", Module: "/opt/app/spinner", Address: 0x4012a0, Kind: sample.KindUser, Method: sample.MethodFP},
		{Function: "std::vector<int>::push_back(int const&)", Module: "/opt/app/spinner", Address: 0x4013f0, Kind: sample.KindUser},
		{Function: "[gzip+0x4ce8]", Module: "/usr/bin/gzip", BuildID: "ffee", Address: 0x4ce8, Kind: sample.KindUser},
		{Function: "LInterpreter;::run", Module: "[jit]", Address: 0x7f0012345678, Kind: sample.KindJIT},
		{Function: "[anon+0x7f00dead]", Module: "[anon]", Address: 0x7f00dead},
		{Function: "[unknown+0x10]", Module: "[unknown]", Address: 0x10},
		{Function: "名前 with spaces;and;semicolons", Module: "/tmp/ünïcode bin", Address: 1, Kind: sample.KindUser},
		{Function: "Model.forward", Module: "/srv/app/model.py", Kind: sample.KindPython, Line: 42, StartLine: 40},
		{Function: "Model.forward", Module: "/srv/app/model.py", Kind: sample.KindPython, Line: 47, StartLine: 40},
		{Function: "<lambda>", Module: "/srv/app/model.py", Kind: sample.KindPython, Line: 90, StartLine: 90},
		{Function: "<lambda>", Module: "/srv/app/model.py", Kind: sample.KindPython, Line: 91, StartLine: 91},
		{Function: "<module>", Module: "", Kind: sample.KindPython, Line: 1, StartLine: 0},
	}
	containers := []*sample.Container{
		nil,
		{Cgroup: "/system.slice/kubelet.service"},
		{Cgroup: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-abcd.scope",
			ID: "abcd", Runtime: "containerd", PodUID: "1234-5678", QoS: "burstable", Namespace: "shop", Pod: "cart-7f9", Name: "cart"},
		{ID: "ef01", Runtime: "docker"},
	}
	comms := []string{"spinner", "kworker/0:1", "", "a b", "java"}
	periods := []int64{10101010, 20202020, 1000000}
	nodes := []string{"node-a", "node-b", "ip-10-0-0-1.ec2.internal"}
	out := make([]sample.Sample, n)
	t := int64(1_790_000_000_000_000_000)
	for i := range out {
		t += r.Int64N(3_000_000) + 1 // unique, so that the sorted order is one
		depth := r.IntN(40)
		stack := make([]sample.Frame, depth)
		for j := range stack {
			stack[j] = frames[r.IntN(len(frames))]
		}
		cgroupID := r.Uint64()
		if r.IntN(4) == 0 {
			cgroupID = 0
		}
		out[i] = sample.Sample{
			Time:      t,
			CPU:       uint32(r.IntN(64)),
			PID:       uint32(r.IntN(5) + 1),
			TID:       uint32(r.IntN(1 << 22)),
			Comm:      comms[r.IntN(len(comms))],
			CgroupID:  cgroupID,
			Container: containers[r.IntN(len(containers))],
			Stack:     stack,
			Node:      nodes[r.IntN(len(nodes))],
			PeriodNs:  periods[r.IntN(len(periods))],
		}
	}
	return out
}

// decodeAll decodes p into copies of its samples.
func decodeAll(t testing.TB, p pprofile.Profiles, opts DecodeOptions) ([]sample.Sample, Report) {
	t.Helper()
	var got []sample.Sample
	rep, err := Decode(p, opts, func(s *sample.Sample) error {
		c := *s
		c.Stack = slices.Clone(s.Stack)
		got = append(got, c)
		return nil
	})
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return got, rep
}

// sortSamples orders samples by node and time (and, for the samples of
// one time, by what they say), so that two sets compare whatever order
// they came in.
func sortSamples(ss []sample.Sample) {
	slices.SortStableFunc(ss, func(a, b sample.Sample) int {
		if c := cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Time, b.Time)); c != 0 {
			return c
		}
		return cmp.Compare(fmt.Sprint(a.CPU, a.PID, a.TID, a.Comm, a.PeriodNs, a.CgroupID, a.Container, a.Stack),
			fmt.Sprint(b.CPU, b.PID, b.TID, b.Comm, b.PeriodNs, b.CgroupID, b.Container, b.Stack))
	})
}

// wire sends p through the protobuf of an ExportProfilesServiceRequest.
func wire(t testing.TB, p pprofile.Profiles) pprofile.Profiles {
	t.Helper()
	b, err := MarshalRequest(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// TestRoundTrip: samples → OTLP → protobuf → OTLP → samples gives the
// same samples, field for field (every timestamp, period, CPU, pid, tid,
// command, cgroup, container, node and frame), for many random batches.
func TestRoundTrip(t *testing.T) {
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 25))
		want := randomSamples(r, 1+r.IntN(400))
		e := NewEncoder("v1.2.3", "", 0)
		for i := range want {
			e.Add(&want[i])
		}
		if e.Len() != len(want) {
			t.Fatalf("seed %d: Len %d, added %d", seed, e.Len(), len(want))
		}
		got, rep := decodeAll(t, wire(t, e.Profiles()), DecodeOptions{})
		if rep.Samples != len(want) || rep.NoPeriod+rep.NoTimestamp+rep.TruncatedStacks != 0 || len(rep.Skipped) != 0 {
			t.Errorf("seed %d: report %+v for %d samples", seed, rep, len(want))
		}
		sortSamples(want)
		sortSamples(got)
		if len(got) != len(want) {
			t.Fatalf("seed %d: %d samples back, want %d", seed, len(got), len(want))
		}
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("seed %d, sample %d:\n got %+v %+v\nwant %+v %+v", seed, i, got[i], got[i].Container, want[i], want[i].Container)
			}
		}
		if e.Len() != 0 {
			t.Fatalf("seed %d: Profiles did not start a new batch: Len %d", seed, e.Len())
		}
	}
}

// TestEncoderDefaults: a sample without a node is the encoder's node's; a
// sample without a period weighs the encoder's period, and SetPeriod
// changes it for what follows.
func TestEncoderDefaults(t *testing.T) {
	e := NewEncoder("dev", "here", 10_000_000)
	e.Add(&sample.Sample{Time: 5, PID: 1, Comm: "a"})
	e.SetPeriod(20_000_000)
	e.Add(&sample.Sample{Time: 6, PID: 1, Comm: "a"})
	e.Add(&sample.Sample{Time: 7, PID: 1, Comm: "a", PeriodNs: 3, Node: "there"})
	got, _ := decodeAll(t, wire(t, e.Profiles()), DecodeOptions{})
	sortSamples(got)
	want := []sample.Sample{
		{Time: 5, PID: 1, Comm: "a", Node: "here", PeriodNs: 10_000_000, Stack: []sample.Frame{}},
		{Time: 6, PID: 1, Comm: "a", Node: "here", PeriodNs: 20_000_000, Stack: []sample.Frame{}},
		{Time: 7, PID: 1, Comm: "a", Node: "there", PeriodNs: 3, Stack: []sample.Frame{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// TestRequestsKeepDictionary: batch after batch through Request, each
// request decodes alone to exactly its batch's samples, whether the
// dictionary was kept from the batches before (a node running the same
// stacks: kept, and the requests no larger for it) or started afresh (a
// node whose stacks keep changing: at most one request in keptRetry+1
// carries more than a quarter more stacks than it uses).
func TestRequestsKeepDictionary(t *testing.T) {
	for _, churn := range []bool{false, true} {
		t.Run(fmt.Sprintf("churn %v", churn), func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 25))
			pool := randomSamples(r, 60) // a steady node's threads and stacks, each stack one slice
			e := NewEncoder("v1", "", 0)
			kept, bloated := 0, 0
			const batches = 40
			for b := range batches {
				want := randomSamples(r, 300)
				if !churn {
					// The pool's threads, stacks and labels, at the
					// batch's times.
					for i := range want {
						t := want[i].Time
						want[i] = pool[r.IntN(len(pool))]
						want[i].Time = t
					}
				}
				for i := range want {
					e.Add(&want[i])
				}
				body, err := e.Request()
				if err != nil {
					t.Fatal(err)
				}
				if !e.fresh {
					kept++
				}
				p, err := UnmarshalRequest(body)
				if err != nil {
					t.Fatal(err)
				}
				used := map[int32]bool{}
				for _, rp := range p.ResourceProfiles().All() {
					for _, sp := range rp.ScopeProfiles().All() {
						for _, pr := range sp.Profiles().All() {
							for _, s := range pr.Samples().All() {
								used[s.StackIndex()] = true
							}
						}
					}
				}
				if n := p.Dictionary().StackTable().Len(); n > len(used)+len(used)/4+keptSlack+1 {
					bloated++
				}
				got, _ := decodeAll(t, p, DecodeOptions{})
				sortSamples(want)
				sortSamples(got)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("batch %d: its request decodes to other samples (%d, want %d)", b, len(got), len(want))
				}
			}
			switch {
			case !churn && (kept < batches-2 || bloated > 0):
				t.Errorf("steady stacks: the dictionary kept after %d of %d batches, %d requests bloated; want it kept, none bloated", kept, batches, bloated)
			case churn && bloated > batches/(keptRetry+1)+1:
				t.Errorf("changing stacks: %d of %d requests carry more than a quarter more stacks than they use", bloated, batches)
			}
		})
	}
}

// TestThreadsForgotten: a dictionary kept while its threads' entries
// (one per pid, tid, CPU and labels) are past maxThreads forgets them
// between batches, and the next batches, their entries built again,
// decode to their own samples.
func TestThreadsForgotten(t *testing.T) {
	stack := []sample.Frame{{Function: "spin", Module: "/opt/spin", Address: 0x10, Kind: sample.KindUser}}
	const pids, cpus = 64, 65 // 4 160 threads over a few hundred attributes: a kept dictionary
	e := NewEncoder("v1", "node", 0)
	tm := int64(1_790_000_000_000_000_000)
	for b := range 3 {
		var want []sample.Sample
		for pid := range uint32(pids) {
			for cpu := range uint32(cpus) {
				tm += 1000
				want = append(want, sample.Sample{Time: tm, PeriodNs: 10_101_010, CPU: cpu, PID: 100 + pid, TID: 100 + pid, Comm: "spin", Node: "node", Stack: stack})
			}
		}
		for i := range want {
			e.Add(&want[i])
		}
		body, err := e.Request()
		if err != nil {
			t.Fatal(err)
		}
		if b > 0 && e.fresh {
			t.Fatalf("batch %d: the dictionary was started afresh, so the threads' bound was not what forgot them", b)
		}
		if len(e.threads) != 0 {
			t.Fatalf("batch %d: %d thread entries kept for the next batch, bound %d", b, len(e.threads), maxThreads)
		}
		p, err := UnmarshalRequest(body)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := decodeAll(t, p, DecodeOptions{})
		sortSamples(want)
		sortSamples(got)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("batch %d: its request decodes to other samples (%d, want %d)", b, len(got), len(want))
		}
	}
}
