// Package synth generates deterministic, realistic-looking samples for
// tests and benchmarks: many CPUs sampled at a fixed rate, a few dozen
// processes with several threads, a skewed set of stacks with kernel and
// user frames, and idle CPUs running the swapper idle loop.
package synth

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/heatscope/heatscope/sample"
)

// Config describes the machine and workload to simulate.
type Config struct {
	CPUs      int
	Hz        int
	Start     int64   // Unix ns of the first tick
	Seconds   float64 // how long to generate
	Processes int     // distinct processes (default 40)
	Stacks    int     // distinct stacks (default 5000)
	IdleShare float64 // share of samples that are idle (default 0.3)
	Seed      uint64
	// Containers labels the samples of some cgroups with container
	// metadata: Kubernetes pods, a Docker container, host services.
	Containers bool
	// Unwind marks the user frames above the sampled pc as a walk with
	// unwind tables finds them (sample.Frame.Method): of a stack's
	// samples, a third unmarked (frame pointers alone), a third every
	// frame found with a table, a third every other one with frame
	// pointers, so that frames are reached both ways.
	Unwind bool
	// Python makes every fourth stack (the second most sampled among
	// them) a CPython program's, as the symbolizer interleaves them:
	// Python frames (sample.KindPython, with lines) between the
	// interpreter's native root frames and, in half of them, a C
	// extension's native leaf frames.
	Python bool
}

// Generator produces samples tick by tick, CPU by CPU.
type Generator struct {
	cfg    Config
	rng    *rand.Rand
	stacks [][]sample.Frame
	// unwound holds each stack marked (Config.Unwind): every frame
	// found with a table, then every other one with frame pointers.
	unwound [][2][]sample.Frame
	idle    [][]sample.Frame
	threads []thread
	// containers holds the metadata of each of the 7 cgroups (by cgroup
	// id - 5000) when Config.Containers is set.
	containers []*sample.Container
	tick       int64
	cpu        int
	zipf       *rand.Zipf
}

type thread struct {
	pid, tid uint32
	comm     string
	cgroup   uint64
}

// New returns a generator for cfg.
func New(cfg Config) *Generator {
	if cfg.Processes == 0 {
		cfg.Processes = 40
	}
	if cfg.Stacks == 0 {
		cfg.Stacks = 5000
	}
	if cfg.IdleShare == 0 {
		cfg.IdleShare = 0.3
	}
	g := &Generator{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 42))}
	g.zipf = rand.NewZipf(g.rng, 1.1, 2, uint64(cfg.Stacks-1))
	comms := []string{"kubelet", "java", "postgres", "nginx", "containerd", "node", "python3", "envoy", "dockerd", "sshd"}
	for p := range cfg.Processes {
		pid := uint32(1000 + p*100)
		for t := range 1 + p%4 {
			g.threads = append(g.threads, thread{pid: pid, tid: pid + uint32(t),
				comm: comms[p%len(comms)], cgroup: uint64(5000 + p%7)})
		}
	}
	if cfg.Containers {
		g.containers = Containers()
	}
	kernelPath := []string{"entry_SYSCALL_64_after_hwframe", "do_syscall_64", "__x64_sys_read", "ksys_read", "vfs_read",
		"seq_read_iter", "memory_stat_show", "mem_cgroup_flush_stats", "cgroup_rstat_flush", "tcp_sendmsg", "ext4_file_read_iter"}
	const maxDepth = 30
	for s := range cfg.Stacks {
		depth := 8 + s%(maxDepth-8)
		var st []sample.Frame
		if s%3 == 0 {
			for k := range 2 + s%5 {
				name := kernelPath[(s+k)%len(kernelPath)]
				st = append(st, sample.Frame{Function: name, Module: sample.KernelModule,
					Address: 0xffffffff81000000 + uint64(k*4096+s%4096), Kind: sample.KindKernel})
			}
		}
		// Stacks are paths through one call tree per binary, branching a
		// little at every level, as real programs' call graphs do: stack
		// k of a binary shares its first levels with stacks k±1, k±2...
		// A shorter stack is a prefix of longer ones.
		if cfg.Python && s%4 == 1 {
			user := PythonStack(s / 4)
			st = append(st, user...)
			g.stacks = append(g.stacks, st)
			if cfg.Unwind {
				// The native frames as a walk finds them; the Python
				// frames are read from the interpreter, not unwound.
				tables := sample.Unwind{UserFrames: len(user), Table: [2]uint64{^uint64(0), ^uint64(0)}}
				mixed := sample.Unwind{UserFrames: len(user), Table: [2]uint64{0x5555555555555555, 0x5555555555555555}}
				marked := [2][]sample.Frame{tables.Mark(st), mixed.Mark(st)}
				for _, m := range marked {
					for i := range m {
						if m[i].Kind == sample.KindPython {
							m[i].Method = sample.MethodNotKnown
						}
					}
				}
				g.unwound = append(g.unwound, marked)
			}
			continue
		}
		app, k := s%13, s/13
		mod := fmt.Sprintf("/usr/bin/app%d", app)
		for d := depth - 1; d >= 0; d-- { // the leaf first
			branch := k >> max(0, 9-9*d/maxDepth)
			st = append(st, sample.Frame{Function: fmt.Sprintf("app%d::fn_%d_%d", app, d, branch), Module: mod,
				BuildID: fmt.Sprintf("%040x", app), Address: uint64(0x401000 + d*64 + int(branch)%64), Kind: sample.KindUser})
		}
		g.stacks = append(g.stacks, st)
		if cfg.Unwind {
			tables := sample.Unwind{UserFrames: depth, Table: [2]uint64{^uint64(0), ^uint64(0)}}
			mixed := sample.Unwind{UserFrames: depth, Table: [2]uint64{0x5555555555555555, 0x5555555555555555}}
			g.unwound = append(g.unwound, [2][]sample.Frame{tables.Mark(st), mixed.Mark(st)})
		}
	}
	idleFns := [][]string{
		{"pv_native_safe_halt", "default_idle", "default_idle_call", "do_idle", "cpu_startup_entry", "start_secondary"},
		{"acpi_idle_enter", "cpuidle_enter_state", "cpuidle_enter", "do_idle", "cpu_startup_entry"},
	}
	for _, fns := range idleFns {
		var st []sample.Frame
		for i, fn := range fns {
			st = append(st, sample.Frame{Function: fn, Module: sample.KernelModule, Address: 0xffffffff81f00000 + uint64(i*64), Kind: sample.KindKernel})
		}
		g.idle = append(g.idle, st)
	}
	return g
}

// Feed passes every remaining sample to fn, in time order, and stops at
// fn's first error: the shape of store.DB.Import's read function.
func (g *Generator) Feed(fn func(*sample.Sample) error) error {
	var s sample.Sample
	for g.Next(&s) {
		if err := fn(&s); err != nil {
			return err
		}
	}
	return nil
}

// Next returns the next sample in time order, or false when done. The
// sample's Stack is shared with the generator: callers must not modify it.
func (g *Generator) Next(s *sample.Sample) bool {
	period := sample.PeriodOf(int64(g.cfg.Hz))
	if float64(g.tick*period) >= g.cfg.Seconds*1e9 {
		return false
	}
	jitter := g.rng.Int64N(20_000) // 20 µs of timer jitter
	*s = sample.Sample{Time: g.cfg.Start + g.tick*period + jitter, CPU: uint32(g.cpu)}
	if g.rng.Float64() < g.cfg.IdleShare {
		s.Comm = "swapper/" + fmt.Sprint(g.cpu)
		s.Stack = g.idle[g.cpu%len(g.idle)]
	} else {
		// Each CPU mostly runs a few threads, as real schedulers do.
		th := g.threads[(g.cpu*7+int(g.rng.Int64N(5))+int(g.tick/500))%len(g.threads)]
		s.PID, s.TID, s.Comm, s.CgroupID = th.pid, th.tid, th.comm, th.cgroup
		if g.containers != nil {
			s.Container = g.containers[th.cgroup-5000]
		}
		k := g.zipf.Uint64()
		s.Stack = g.stacks[k]
		if g.unwound != nil {
			// Not from rng: the samples are the same with and without.
			if m := (g.tick + int64(g.cpu)) % 3; m > 0 {
				s.Stack = g.unwound[k][m-1]
			}
		}
	}
	g.cpu++
	if g.cpu == g.cfg.CPUs {
		g.cpu = 0
		g.tick++
	}
	return true
}

// PythonFunction is one of the Python functions PythonStack calls.
type PythonFunction struct {
	// Name is the qualified name, File the source file and StartLine
	// the first line of the function.
	Name, File string
	StartLine  uint32
}

// PythonFunctions are the functions of PythonStack's programs, the
// outermost first.
var PythonFunctions = []PythonFunction{
	{"<module>", "/srv/train.py", 1},
	{"main", "/srv/train.py", 40},
	{"Trainer.fit", "/srv/trainer.py", 12},
	{"Trainer.step", "/srv/trainer.py", 30},
	{"Model.forward", "/srv/model.py", 8},
	{"Linear.forward", "/srv/model.py", 51},
}

// PythonStack returns user stack k of a CPython program, leaf first, as
// the symbolizer interleaves it: the Python frames (PythonFunctions from
// <module> down, 3 to 6 deep, each at a line past its first that depends
// on k) above the interpreter's native root and, when k is odd, zlib's
// native frames of a C extension above them.
func PythonStack(k int) []sample.Frame {
	const interp, libz = "/usr/bin/python3.11", "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13"
	var st []sample.Frame
	if k%2 == 1 {
		for i, fn := range []string{"deflate_slow", "deflate", "compress2"} {
			st = append(st, sample.Frame{Function: fn, Module: libz, Address: uint64(0x3000 + i*0x100), Kind: sample.KindUser})
		}
		st = append(st, sample.Frame{Function: "zlib_compress", Module: interp, Address: 0x2a0000, Kind: sample.KindUser})
	}
	depth := 3 + k%4
	for d := depth - 1; d >= 0; d-- {
		fn := PythonFunctions[d]
		st = append(st, sample.Frame{Function: fn.Name, Module: fn.File, Kind: sample.KindPython,
			Line: fn.StartLine + 1 + uint32((k+d)%5), StartLine: fn.StartLine})
	}
	for i, fn := range []string{"PyEval_EvalCode", "run_mod", "_PyRun_SimpleFileObject", "Py_RunMain", "Py_BytesMain", "main"} {
		st = append(st, sample.Frame{Function: fn, Module: interp, Address: uint64(0x250000 + i*0x1000), Kind: sample.KindUser})
	}
	return st
}

// Containers returns the metadata Config.Containers gives cgroups 5000 to
// 5006: four containers (three in Kubernetes pods, one plain Docker),
// two host services, and a cgroup with no metadata (nil).
func Containers() []*sample.Container {
	const cart, etl = "11111111-2222-3333-4444-555555555555", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
	// Ids that differ in their first 12 digits, as "docker ps" shows them.
	id := func(n int) string { return strings.Repeat(fmt.Sprintf("%x", n), 12) + fmt.Sprintf("%052x", n) }
	pod := func(id, runtime, prefix, ns, pod, uid, qos, name string) *sample.Container {
		return &sample.Container{
			Cgroup: fmt.Sprintf("/kubepods.slice/kubepods-%s.slice/kubepods-%s-pod%s.slice/%s-%s.scope",
				qos, qos, strings.ReplaceAll(uid, "-", "_"), prefix, id),
			ID: id, Runtime: runtime, PodUID: uid, QoS: qos, Namespace: ns, Pod: pod, Name: name}
	}
	return []*sample.Container{
		pod(id(1), "containerd", "cri-containerd", "shop", "cart-7d9f", cart, "burstable", "cart"),
		pod(id(2), "containerd", "cri-containerd", "shop", "cart-7d9f", cart, "burstable", "istio-proxy"),
		pod(id(3), "cri-o", "crio", "batch", "etl-1", etl, "besteffort", "etl"),
		{Cgroup: "/system.slice/docker-" + id(4) + ".scope", ID: id(4), Runtime: "docker"},
		{Cgroup: "/system.slice/ssh.service"},
		{Cgroup: "/system.slice/containerd.service"},
		nil,
	}
}

// ChurnCallers returns n shared caller frames for ChurnSample's stacks
// (functions caller_0 to caller_<n-1> of /usr/bin/churn).
func ChurnCallers(n int) []sample.Frame {
	callers := make([]sample.Frame, n)
	for d := range callers {
		callers[d] = sample.Frame{Function: fmt.Sprintf("caller_%d", d), Module: "/usr/bin/churn", Address: uint64(0x1000 + d*64), Kind: sample.KindUser}
	}
	return callers
}

// ChurnSample is a sample, at Unix ns at, of a short-lived process as
// heavy process churn records them: its own pid, command (churn-<pid>)
// and cgroup, and a leaf frame of its own under callers.
func ChurnSample(pid uint32, at int64, callers []sample.Frame) sample.Sample {
	leaf := sample.Frame{Function: "hot_c_function", Module: "/usr/bin/churn", Address: uint64(pid) * 16, Kind: sample.KindUser}
	return sample.Sample{Time: at, CPU: pid % 2, PID: pid, TID: pid, Comm: fmt.Sprintf("churn-%d", pid),
		CgroupID: uint64(1_000_000 + pid), Stack: append([]sample.Frame{leaf}, callers...)}
}
