package profiler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/bpf"
)

// A sampled process image's executable mappings, as the BPF program
// snapshots them when the image exits (see bpf/profile.bpf.c). With them
// the agent symbolizes a process that was gone before it could read
// /proc/PID/maps, so a new process no longer has to wake it: under process
// churn most processes cost neither a wakeup nor a /proc read.

// MappingKind says what a Mapping maps.
type MappingKind uint32

// The kinds of mapping, as the BPF program numbers them (HS_MAP_*).
const (
	MappingFile MappingKind = 0 // a file, known by device, inode and ctime
	MappingAnon MappingKind = 1 // anonymous memory: JIT code
	MappingVDSO MappingKind = 2 // the kernel's vDSO
)

// Mapping is one executable mapping of a process.
type Mapping struct {
	Start, End uint64
	// Offset is the file offset mapped at Start.
	Offset uint64
	// Dev (encoded as stat(2)'s st_dev), Inode and CtimeNs identify a
	// mapped file; all zero for other kinds.
	Dev, Inode uint64
	CtimeNs    int64
	Kind       MappingKind
}

// Maps is a snapshot of one process image's executable mappings.
type Maps struct {
	PID uint32
	// Complete is false when the snapshot failed or had more mappings
	// than it holds: the agent must read /proc/PID/maps.
	Complete bool
	Mappings []Mapping
}

// Sizes of struct hs_maps and struct hs_mapping in bpf/profile.bpf.c; a
// test checks them against the generated Go types.
const (
	mapsHeaderSize = 8
	mappingSize    = 56
	// MaxMappings is the most mappings one snapshot holds.
	MaxMappings = 128
)

// Decode parses one snapshot record into m, reusing m's slice. It never
// panics: a record that is short or whose count does not match its length
// is an error.
func (m *Maps) Decode(b []byte) error {
	if len(b) < mapsHeaderSize {
		return fmt.Errorf("decode mappings: %d bytes, shorter than the %d-byte header", len(b), mapsHeaderSize)
	}
	le := binary.LittleEndian
	n := int(le.Uint16(b[4:6]))
	flags := b[6] // b[7], unknown files, is the program's own business
	if n > MaxMappings {
		return fmt.Errorf("decode mappings: %d mappings, more than %d", n, MaxMappings)
	}
	if want := mapsHeaderSize + n*mappingSize; len(b) < want {
		return fmt.Errorf("decode mappings: %d bytes, want %d for %d mappings", len(b), want, n)
	}
	m.PID = le.Uint32(b[0:4])
	m.Complete = flags == 0
	m.Mappings = m.Mappings[:0]
	for i := range n {
		r := b[mapsHeaderSize+i*mappingSize:]
		mp := Mapping{
			Start:  le.Uint64(r[0:8]),
			End:    le.Uint64(r[8:16]),
			Offset: le.Uint64(r[16:24]),
			Inode:  le.Uint64(r[32:40]),
			Kind:   MappingKind(le.Uint32(r[48:52])),
		}
		if mp.End < mp.Start || mp.Kind > MappingVDSO {
			return fmt.Errorf("decode mappings: mapping %d: range %#x-%#x, kind %d", i, mp.Start, mp.End, mp.Kind)
		}
		mp.Dev = userDev(le.Uint64(r[24:32]))
		mp.CtimeNs = int64(le.Uint64(r[40:48]))
		m.Mappings = append(m.Mappings, mp)
	}
	return nil
}

// The kernel keeps a device number as MAJOR << 20 | MINOR (MINORBITS in
// include/linux/kdev_t.h); stat(2) and /proc/PID/maps give it in the
// user-space encoding.
const kernelMinorBits = 20

func userDev(kdev uint64) uint64 {
	return unix.Mkdev(uint32(kdev>>kernelMinorBits), uint32(kdev&(1<<kernelMinorBits-1)))
}

// OnMaps makes Run call fn with each process image's mapping snapshot,
// before the samples of the same poll, on Run's goroutine. The Maps is
// reused after fn returns. Call it before Run.
func (p *Profiler) OnMaps(fn func(*Maps)) { p.onMaps = fn }

// snapshotting reports whether exiting processes' mappings are
// snapshotted now; until then (and for good on a kernel before 6.16) every
// new process wakes the agent to read its /proc/PID/maps.
func (p *Profiler) snapshotting() bool { return p.mapsRing != nil }

// snapshotChurn is the rate of new processes, in forced wakeups a second,
// from which the agent switches to exit snapshots. Below it, reading each
// new process's /proc/PID/maps (about 100 µs) costs less than loading the
// exit program, whose CO-RE relocations parse the kernel's BTF (about 20 ms
// of CPU and a few MB); a node that never sees such churn, nor misses a
// process (MissedProcess), never pays that.
const snapshotChurn = 20

// MissedProcess tells the profiler that a sampled process exited before
// its /proc/PID/maps was read, so that its user frames stay unknown: the
// wakeup came too late. The next poll switches to exit snapshots, which
// do not race with the exit; a missed process is worth the one-off cost
// of loading them. Call it only from Run's handler.
func (p *Profiler) MissedProcess() { p.missedProcess = true }

// maybeEnableSnapshots switches to exit snapshots, once, when a process
// was missed or the last second brought snapshotChurn new processes or
// more. The exit program is loaded on a goroutine of its own: its CO-RE
// relocations parse the kernel's BTF, which took 11 s once on a busy
// machine, and the ring reader must go on reading meanwhile. A later poll
// finds it loaded and switches the sampler over (finishSnapshots).
func (p *Profiler) maybeEnableSnapshots(now time.Time) {
	if p.snapLoad != nil {
		p.finishSnapshots()
		return
	}
	if p.snapshotsTried || p.cfg.noMapsSnapshot {
		return
	}
	why := "a process exited before its maps were read"
	if !p.missedProcess {
		if !p.churnSince.IsZero() && now.Sub(p.churnSince) < time.Second {
			return
		}
		n := p.wakeups.Load()
		churn := n - p.churnWakeups
		p.churnSince, p.churnWakeups = now, n
		if churn < snapshotChurn {
			return
		}
		why = fmt.Sprintf("%d new processes in a second", churn)
	}
	p.snapshotsTried = true
	l := &snapshotLoad{why: why, done: make(chan struct{}), started: time.Now()}
	p.snapLoad = l
	go func() {
		defer close(l.done)
		if d := p.cfg.snapshotLoadDelay; d > 0 {
			time.Sleep(d) // tests: a load as slow as on a starved machine
		}
		l.prog, l.link, l.ring, l.err = p.loadSnapshots()
		l.took = time.Since(l.started)
	}()
}

// snapshotLoad is the exit snapshot program being loaded off the ring
// reader's goroutine; its fields are the goroutine's until done is closed.
type snapshotLoad struct {
	why     string
	done    chan struct{}
	started time.Time
	took    time.Duration
	prog    *ebpf.Program
	link    link.Link
	ring    *ring
	err     error
}

// close frees what the load made, once it is done.
func (l *snapshotLoad) close() {
	<-l.done
	if l.ring != nil {
		l.ring.close()
	}
	if l.link != nil {
		l.link.Close()
	}
	if l.prog != nil {
		l.prog.Close()
	}
}

// finishSnapshots switches the sampler to exit snapshots once their
// program is loaded and attached (or logs why it could not be); until then
// it returns at once.
func (p *Profiler) finishSnapshots() {
	l := p.snapLoad
	select {
	case <-l.done:
	default:
		return
	}
	p.snapLoad = nil
	err := l.err
	if err == nil {
		if err = p.objs.Mode.Put(uint32(0), uint32(1)); err != nil {
			err = fmt.Errorf("switch the sampler to exit snapshots: %w", err)
		}
	}
	if err != nil {
		l.close()
		p.cfg.Logger.Info("the kernel cannot snapshot exiting processes' mappings (needs Linux 6.16): every new process keeps waking the agent to read /proc/PID/maps", "why", l.why, "err", err)
		return
	}
	p.exitProg, p.exitLink, p.mapsRing = l.prog, l.link, l.ring
	p.snapshotLoadTime.Store(int64(l.took))
	p.cfg.Logger.Info("new processes are now symbolized from the mappings snapshotted as they exit", "why", l.why, "load took", l.took.Round(time.Millisecond))
}

// enableSnapshots loads and attaches the exit snapshot program and
// switches the sampler to it at once, on the caller's goroutine (tests).
func (p *Profiler) enableSnapshots() error {
	prog, l, r, err := p.loadSnapshots()
	if err != nil {
		return err
	}
	if err := p.objs.Mode.Put(uint32(0), uint32(1)); err != nil {
		r.close()
		l.Close()
		prog.Close()
		return fmt.Errorf("switch the sampler to exit snapshots: %w", err)
	}
	p.exitProg, p.exitLink, p.mapsRing = prog, l, r
	return nil
}

// loadSnapshots loads the exit snapshot program beside the running
// sampler, sharing its maps, attaches it, and maps the ring it writes to.
// The sampler goes on waking the agent for new processes until its mode
// is switched. It touches nothing the ring reader uses, so it may run on
// another goroutine.
func (p *Profiler) loadSnapshots() (*ebpf.Program, link.Link, *ring, error) {
	cache := p.btfCache
	// The exit program is loaded once: the kernel's BTF is not needed
	// after it.
	defer func() { p.btfCache = nil }()
	if err := exitTracepointSeesMM(p.kernelTypes, cache); err != nil {
		return nil, nil, nil, err
	}
	spec := p.spec.Copy()
	for name := range spec.Programs {
		if name != bpf.ProfileProgOnExit {
			delete(spec.Programs, name)
		}
	}
	var objs struct {
		OnExit *ebpf.Program `ebpf:"on_exit"`
	}
	opts := &ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{KernelTypes: p.kernelTypes},
		Cache:    cache,
		MapReplacements: map[string]*ebpf.Map{
			bpf.ProfileMapSeenPids: p.objs.SeenPids, bpf.ProfileMapPendingPids: p.objs.PendingPids,
			bpf.ProfileMapMapsRing: p.objs.MapsRing, bpf.ProfileMapMapsScratch: p.objs.MapsScratch,
		},
	}
	if err := spec.LoadAndAssign(&objs, opts); err != nil {
		return nil, nil, nil, fmt.Errorf("load the exit snapshot program: %w", err)
	}
	if p.cfg.OnProgram != nil {
		if sym, err := programSymbol(objs.OnExit); err != nil {
			p.cfg.Logger.Debug("the exit snapshot program's frames are named from kallsyms", "err", err)
		} else {
			p.cfg.OnProgram(sym)
		}
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: objs.OnExit})
	if err != nil {
		objs.OnExit.Close()
		return nil, nil, nil, fmt.Errorf("attach the exit snapshot program: %w", err)
	}
	r, err := openRing(p.objs.MapsRing.FD(), int(p.objs.MapsRing.MaxEntries()))
	if err != nil {
		l.Close()
		objs.OnExit.Close()
		return nil, nil, nil, err
	}
	return objs.OnExit, l, r, nil
}

// exitTracepointSeesMM checks that the sched_process_exit tracepoint comes
// before the exiting task's mm is released: since Linux 6.16, where it
// also gained its group_dead argument, by which it is told apart.
func exitTracepointSeesMM(kernelTypes *btf.Spec, cache *btf.Cache) error {
	spec := kernelTypes
	if spec == nil {
		if cache == nil {
			cache = btf.NewCache()
		}
		var err error
		if spec, err = cache.Kernel(); err != nil {
			return err
		}
	}
	var proto *btf.Typedef
	if err := spec.TypeByName("btf_trace_sched_process_exit", &proto); err != nil {
		return err
	}
	ptr, ok := proto.Type.(*btf.Pointer)
	if !ok {
		return fmt.Errorf("btf_trace_sched_process_exit is a %v", proto.Type)
	}
	fn, ok := ptr.Target.(*btf.FuncProto)
	if !ok || len(fn.Params) < 3 {
		return errors.New("the sched_process_exit tracepoint comes after the exiting task's mm is released (before Linux 6.16)")
	}
	return nil
}

// DrainMaps hands every snapshot written so far to the OnMaps function. Run
// does it at each poll; a handler that meets a process it has no mappings
// for calls it to catch a process that exited since. Call it only from
// Run's handler.
func (p *Profiler) DrainMaps() {
	if p.mapsRing == nil {
		return
	}
	p.mapsRing.read(func(b []byte) {
		if err := p.maps.Decode(b); err != nil {
			p.decodeErrors.Add(1)
			return
		}
		if p.onMaps != nil {
			p.onMaps(&p.maps)
		}
	})
}
