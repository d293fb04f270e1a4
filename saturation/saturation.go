// Package saturation finds, in the stream of samples the recorder takes,
// the spans where one thread kept one CPU busy while the rest of the node
// was not: the "one saturated core behind a healthy node average" that
// per-node CPU graphs hide. Each span becomes a system event of kind
// cpu-saturation (events.Event with the label kind=cpu-saturation) naming
// the thread, its CPU, how long and how busy, and the functions it ran.
//
// # What counts
//
// Time is cut into slots of a tenth of the minimum duration (100 ms for
// the default 1 s); a window is the last ten slots. A thread saturates its
// CPU over a window when its sampled CPU time on that CPU in the window,
// over the CPU's sampled time, is above Config.CPUBusy, while the rest of
// the node's busy share over the same window (the other CPUs' non-idle
// sampled time over their sampled time: the saturated CPU left out) is
// below Config.NodeBusy. Leaving the CPU out is what makes the rule hold
// on small nodes: on two CPUs one saturated CPU is already a node 50%
// busy, whatever the other does. A node of one CPU has no rest: a thread
// that keeps its only CPU busy is marked (the node graph shows that CPU
// busy, but not who kept it so). Neither denominator
// is taken as less than the wall time it covers, less one sampling period
// per CPU (a CPU sampled all along has a sample more or less in a
// window). A span is a run of consecutive saturated
// windows of the same thread on the same CPU, trimmed to the thread's
// first and last sample in it; it is reported when it lasts at least the
// minimum duration. So every window of the minimum duration inside a
// reported span held the thread above the threshold.
//
// Every sample weighs its own sampling period (the overhead guard may
// change the rate at any time), so a rate change inside a window changes
// nothing. A share's denominator is never less than the wall time it
// covers: a CPU whose idle time went unsampled (idle samples are not
// guaranteed: a thread that sleeps in step with the sampling timer can
// leave its CPU's idle time unsampled) must not make a thread busy half
// the time look busy all of it. So a lost sample can only lower a share:
// it can shorten or miss a span, never invent one. The rest of the node's busy share needs every
// CPU's busy samples, so the detector is for recorders without --pid or
// --cgroup filters.
//
// # Cost
//
// Add is O(1): it adds the sample's period to its CPU's current slot (a
// table of at most maxThreads threads) and, for the thread followed on
// that CPU, to two tables of at most maxFuncs leaf functions. Closing a
// slot costs O(windowSlots × maxThreads) per CPU, ten times per minimum
// duration. Memory is fixed per CPU (ringSlots slots), whatever the number
// of threads or functions. A slot in which more than maxThreads threads
// ran on one CPU counts the first maxThreads only: a thread that first ran
// after them is undercounted in that slot, which can shorten or miss a
// span, never invent one. The top functions are space-saving counts
// (Metwally et al.): exact while a span's thread ran at most maxFuncs
// distinct leaf functions per slot, otherwise the top may be overcounted
// by the smallest count it displaced.
package saturation

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/sample"
)

// Kind is the kind label of the events the detector emits.
const Kind = "cpu-saturation"

// Source is the source of the events the detector emits (the recorder's
// own events, like the overhead guard's frequency changes).
const Source = "heatscope"

const (
	// windowSlots is the number of slots in a window (the minimum
	// duration).
	windowSlots = 10
	// ringSlots is the number of slots kept per CPU: a window, the slot
	// being filled, and one more for samples that arrive a little late
	// (the ring buffer is shared by every CPU; their order is not
	// strictly the time order).
	ringSlots = windowSlots + 2
	// maxThreads bounds the threads counted per CPU per slot.
	maxThreads = 8
	// maxFuncs bounds the leaf functions counted per slot and per span.
	maxFuncs = 8
	// maxCPU bounds the CPU numbers followed.
	maxCPU = 1 << 14
	// maxPeriodNs bounds a sample's weight (the sampler's slowest rate is
	// 1 Hz).
	maxPeriodNs = int64(10 * time.Second)
)

// Defaults of Config.
const (
	DefaultCPUBusy     = 0.90
	DefaultNodeBusy    = 0.50
	DefaultMinDuration = time.Second
	DefaultMaxSpan     = time.Minute
)

// Config sets what counts as saturation.
type Config struct {
	// CPUBusy is the share of one CPU (at least 0.5, below 1) that a
	// thread must be above over every window of a span.
	CPUBusy float64
	// NodeBusy is the busy share of the rest of the node (the other
	// CPUs' average, the saturated CPU left out; above 0, at most 1) that
	// must stay below over every window of a span. A node of one CPU has
	// no other CPU: its rest is taken as quiet.
	NodeBusy float64
	// MinDuration is the shortest span reported, and the window's length
	// (100 ms to 10 min).
	MinDuration time.Duration
	// MaxSpan cuts longer spans into events of at most this length, so
	// that a thread saturating its CPU for hours shows while it does; 0
	// is DefaultMaxSpan. At least MinDuration.
	MaxSpan time.Duration
	// CPUs is the node's number of CPUs (the rest of the node is the
	// others); 0 counts the CPUs that have sent a sample.
	CPUs int
	// Emit is called with each span's event, on the goroutine that
	// called Add or Flush.
	Emit func(events.Event)
}

// Validate checks the thresholds and durations; the error is a
// *ConfigError naming the field.
func (c *Config) Validate() error {
	switch {
	case !(c.CPUBusy >= 0.5 && c.CPUBusy < 1):
		return &ConfigError{"CPUBusy", fmt.Errorf("CPU threshold %g%%: want at least 50%% (one thread per CPU) and below 100%%", 100*c.CPUBusy)}
	case !(c.NodeBusy > 0 && c.NodeBusy <= 1):
		return &ConfigError{"NodeBusy", fmt.Errorf("threshold of the other CPUs %g%%: want above 0%% and at most 100%%", 100*c.NodeBusy)}
	case c.MinDuration < 100*time.Millisecond || c.MinDuration > 10*time.Minute:
		return &ConfigError{"MinDuration", fmt.Errorf("minimum duration %v: want 100ms to 10m", c.MinDuration)}
	case c.MaxSpan != 0 && c.MaxSpan < c.MinDuration:
		return &ConfigError{"MaxSpan", fmt.Errorf("longest span %v: want at least the minimum duration %v", c.MaxSpan, c.MinDuration)}
	case c.CPUs < 0 || c.CPUs > maxCPU:
		return &ConfigError{"CPUs", fmt.Errorf("%d CPUs: want 0 (count them) to %d", c.CPUs, maxCPU)}
	case c.Emit == nil:
		return &ConfigError{"Emit", fmt.Errorf("no Emit function")}
	}
	return nil
}

// ConfigError is an invalid field of a Config.
type ConfigError struct {
	// Field is the Config field's name.
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Stats counts what a Detector saw.
type Stats struct {
	// Samples counts the samples added, Late those that came after their
	// slot was closed and Ignored those on a CPU numbered beyond 16383 or
	// with no period; Events counts the events emitted.
	Samples, Late, Ignored, Events uint64
}

// Detector finds saturation spans in a stream of samples. It is not safe
// for concurrent use: the recorder feeds it from its one sample loop.
type Detector struct {
	cfg      Config
	slotNs   int64
	windowNs int64
	maxSpan  int64
	cpus     []*cpuState
	node     [ringSlots]nodeSlot
	started  bool
	first    int64 // the first slot with a sample
	seenCPUs int   // CPUs that have sent a sample
	period   int64 // the last sample's period
	closed   int64 // the last slot closed
	newest   int64 // the newest slot a sample fell in
	stats    Stats
}

// nodeSlot sums every CPU's sampled time in one slot.
type nodeSlot struct {
	slot      int64
	all, busy int64
}

// cpuState is one CPU's recent slots and open span.
type cpuState struct {
	cpu   uint32
	ring  [ringSlots]cpuSlot
	track uint32 // the thread whose leaf functions are counted (0: none)
	span  span
}

// cpuSlot is one CPU's samples in one slot.
type cpuSlot struct {
	slot    int64
	all     int64 // sampled ns
	busy    int64 // sampled ns of threads other than the idle task
	n       int
	threads [maxThreads]threadTime
	tracked uint32 // the thread whose leaf functions kernel and user count
	kernel  topFuncs
	user    topFuncs
}

// threadTime is one thread's sampled time in a slot.
type threadTime struct {
	tid, pid uint32
	comm     string
	ns       int64
	start    int64 // the first sample's time minus its period
	last     int64 // the last sample's time
}

// topFuncs counts leaf functions by sampled time, space-saving style.
type topFuncs struct {
	n    int
	name [maxFuncs]string
	ns   [maxFuncs]int64
}

// span is a CPU's open saturation span.
type span struct {
	active            bool
	continued         bool // a piece after the first of a span cut by MaxSpan
	tid, pid          uint32
	comm              string
	start, end        int64
	threadNs, cpuNs   int64 // the thread's and the CPU's sampled time
	wallNs            int64 // the slots' length
	nodeBusy, nodeAll int64 // every CPU's busy and sampled time
	restBusy, restAll int64 // the other CPUs'
	kernel, user      topFuncs
}

// New returns a detector; cfg.MaxSpan 0 is DefaultMaxSpan.
func New(cfg Config) (*Detector, error) {
	if cfg.MaxSpan == 0 {
		cfg.MaxSpan = max(DefaultMaxSpan, cfg.MinDuration)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	slot := cfg.MinDuration.Nanoseconds() / windowSlots
	return &Detector{cfg: cfg, slotNs: slot, windowNs: slot * windowSlots, maxSpan: cfg.MaxSpan.Nanoseconds()}, nil
}

// Stats returns the detector's counters.
func (d *Detector) Stats() Stats { return d.stats }

// Add takes one sample, which weighs its own period (s.PeriodNs: taken
// that much CPU time after the previous one on its CPU). Samples should
// come roughly in time order (those more than a slot late are counted in
// Stats.Late and left out). The sample is not kept: its strings are (they
// are immutable).
func (d *Detector) Add(s *sample.Sample) {
	periodNs := s.PeriodNs
	if periodNs <= 0 || s.CPU >= maxCPU || s.Time < 0 {
		d.stats.Ignored++
		return
	}
	d.stats.Samples++
	w := min(periodNs, maxPeriodNs)
	d.period = w
	k := s.Time / d.slotNs
	if !d.started {
		d.started, d.closed, d.newest, d.first = true, k-1, k, k
	}
	if k <= d.closed && d.closed-k > 2*ringSlots {
		// Far behind: the wall clock was stepped back. Report what was
		// open and start again from this sample.
		d.Flush()
		for _, c := range d.cpus {
			if c != nil {
				*c = cpuState{cpu: c.cpu}
				for i := range c.ring {
					c.ring[i].slot = -1
				}
			}
		}
		d.node = [ringSlots]nodeSlot{}
		d.closed, d.newest, d.first = k-1, k, k
	}
	if k <= d.closed {
		d.stats.Late++
		return
	}
	if k > d.newest {
		d.advance(k)
	}
	c := d.cpu(s.CPU)
	cs := c.slotAt(k)
	ns := &d.node[k%ringSlots]
	if ns.slot != k {
		*ns = nodeSlot{slot: k}
	}
	cs.all += w
	ns.all += w
	if s.TID == 0 { // the idle task
		return
	}
	ns.busy += w
	cs.busy += w
	if t := cs.find(s.TID); t != nil {
		t.ns += w
		t.last = max(t.last, s.Time)
	} else if cs.n < maxThreads {
		cs.threads[cs.n] = threadTime{tid: s.TID, pid: s.PID, comm: s.Comm, ns: w, start: s.Time - w, last: s.Time}
		cs.n++
	}
	if s.TID == cs.tracked {
		countLeaves(cs, s.Stack, w)
	}
}

// countLeaves adds w to the stack's leaf kernel and leaf user function,
// each named as views name it (sample.Frame.Name: a Python function with
// its file, as the flame graph, pprof and folded output show it).
func countLeaves(cs *cpuSlot, stack []sample.Frame, w int64) {
	kernel := false
	for i := range stack {
		f := &stack[i]
		if f.Kind == sample.KindKernel {
			if !kernel {
				cs.kernel.add(f.Name(), w)
				kernel = true
			}
			continue
		}
		cs.user.add(f.Name(), w)
		return
	}
}

// Flush closes every slot and reports the spans still open, as at the
// end of a recording.
func (d *Detector) Flush() {
	if !d.started {
		return
	}
	for k := d.closed + 1; k <= d.newest; k++ {
		d.closeSlot(k)
	}
	d.closed = d.newest
	for _, c := range d.cpus {
		if c != nil && c.span.active {
			d.finish(c)
		}
	}
}

// cpu returns the state of a CPU, created at its first sample.
func (d *Detector) cpu(n uint32) *cpuState {
	if int(n) >= len(d.cpus) {
		d.cpus = append(d.cpus, make([]*cpuState, int(n)+1-len(d.cpus))...)
	}
	c := d.cpus[n]
	if c == nil {
		d.seenCPUs++
		c = &cpuState{cpu: n}
		for i := range c.ring {
			c.ring[i].slot = -1
		}
		d.cpus[n] = c
	}
	return c
}

// slotAt returns the CPU's slot k, emptied when it held an older one.
func (c *cpuState) slotAt(k int64) *cpuSlot {
	cs := &c.ring[k%ringSlots]
	if cs.slot != k {
		*cs = cpuSlot{slot: k, tracked: c.track}
	}
	return cs
}

// slot returns the CPU's slot k, nil when it has no sample.
func (c *cpuState) slot(k int64) *cpuSlot {
	if k < 0 {
		return nil
	}
	if cs := &c.ring[k%ringSlots]; cs.slot == k {
		return cs
	}
	return nil
}

func (cs *cpuSlot) find(tid uint32) *threadTime {
	for i := range cs.n {
		if cs.threads[i].tid == tid {
			return &cs.threads[i]
		}
	}
	return nil
}

// top returns the thread with the most sampled time in the slot.
func (cs *cpuSlot) top() *threadTime {
	var best *threadTime
	for i := range cs.n {
		if best == nil || cs.threads[i].ns > best.ns {
			best = &cs.threads[i]
		}
	}
	return best
}

// advance closes the slots before k-1 (k-1 stays open for late samples).
// After a gap in the samples only a window's worth of empty slots is
// closed: that ends every span, and the rest would change nothing.
func (d *Detector) advance(k int64) {
	for s := d.closed + 1; s < k-1 && s <= d.newest+windowSlots; s++ {
		d.closeSlot(s)
	}
	d.closed = max(d.closed, k-2)
	d.newest = k
}

// nodeWindow sums the node's sampled time over the window ending at k.
func (d *Detector) nodeWindow(k int64) (busy, all int64) {
	for i := k - windowSlots + 1; i <= k; i++ {
		if i >= 0 {
			if ns := &d.node[i%ringSlots]; ns.slot == i {
				busy += ns.busy
				all += ns.all
			}
		}
	}
	return busy, all
}

// floor is the least sampled time a CPU sampled all along has over wall
// time: a sample less than the wall time covers.
func (d *Detector) floor(wall int64) int64 { return max(wall-d.period, 0) }

// cpuCount is the number of the node's CPUs.
func (d *Detector) cpuCount() int64 {
	if d.cfg.CPUs > 0 {
		return int64(d.cfg.CPUs)
	}
	return int64(max(d.seenCPUs, 1))
}

// cpuWindow sums the CPU's busy and sampled time over the window ending
// at k.
func (c *cpuState) cpuWindow(k int64) (busy, all int64) {
	for i := k - windowSlots + 1; i <= k; i++ {
		if cs := c.slot(i); cs != nil {
			busy += cs.busy
			all += cs.all
		}
	}
	return busy, all
}

// restQuiet reports whether the node's CPUs other than c were busy less
// than the threshold over the window ending at k, given the node's busy
// and sampled time over it: their non-idle sampled time over their
// sampled time, or over their count times the window less a period when
// that is longer. A node of one CPU has no other: quiet.
func (d *Detector) restQuiet(c *cpuState, k, nodeBusy, nodeAll int64) bool {
	others := d.cpuCount() - 1
	if others <= 0 {
		return true
	}
	busy, all := c.cpuWindow(k)
	return float64(nodeBusy-busy) < d.cfg.NodeBusy*float64(max(nodeAll-all, others*d.floor(d.windowNs)))
}

// threadWindow sums a thread's and its CPU's sampled time over the window
// ending at k.
func (c *cpuState) threadWindow(k int64, tid uint32) (thread, all int64) {
	for i := k - windowSlots + 1; i <= k; i++ {
		if cs := c.slot(i); cs != nil {
			all += cs.all
			if t := cs.find(tid); t != nil {
				thread += t.ns
			}
		}
	}
	return thread, all
}

// closeSlot judges the window ending at slot k on every CPU.
func (d *Detector) closeSlot(k int64) {
	// Only whole windows since the first sample are judged: a window
	// that began before it would count time nobody sampled as idle.
	whole := k-d.first+1 >= windowSlots
	busy, all := d.nodeWindow(k)
	for _, c := range d.cpus {
		if c != nil {
			d.closeCPU(c, k, whole && d.restQuiet(c, k, busy, all))
		}
	}
}

// saturated reports whether tid kept c above the threshold over the window
// ending at k: its sampled time over the CPU's, or over the window's
// length less a period when the CPU's sampled time is shorter.
func (d *Detector) saturated(c *cpuState, k int64, tid uint32) bool {
	thread, all := c.threadWindow(k, tid)
	return float64(thread) > d.cfg.CPUBusy*float64(max(all, d.floor(d.windowNs)))
}

// closeCPU ends, extends or opens c's span at slot k; restQuiet says
// whether the other CPUs stayed under the threshold over the window.
func (d *Detector) closeCPU(c *cpuState, k int64, restQuiet bool) {
	cs := c.slot(k)
	if c.span.active {
		if restQuiet && d.saturated(c, k, c.span.tid) {
			d.extend(c, k)
		} else {
			d.finish(c)
		}
	}
	var top *threadTime
	if cs != nil {
		top = cs.top()
	}
	if !c.span.active && top != nil && restQuiet && d.saturated(c, k, top.tid) {
		d.open(c, k, top)
	}
	next := uint32(0)
	switch {
	case c.span.active:
		next = c.span.tid
	case top != nil:
		next = top.tid
	}
	if next != c.track {
		c.track = next
		// The slots still open count the new thread's functions from now.
		for i := k + 1; i <= k+2; i++ {
			if o := c.slot(i); o != nil {
				o.tracked, o.kernel, o.user = next, topFuncs{}, topFuncs{}
			}
		}
	}
}

// open starts a span of thread t over the window ending at k.
func (d *Detector) open(c *cpuState, k int64, t *threadTime) {
	c.span = span{active: true, tid: t.tid, pid: t.pid, comm: t.comm, start: t.start, end: t.last}
	// From the window's first slot in which the thread ran: the span's
	// shares are those of its own time.
	first := k - windowSlots + 1
	for first < k {
		if cs := c.slot(first); cs != nil && cs.find(t.tid) != nil {
			break
		}
		first++
	}
	for i := first; i <= k; i++ {
		d.addSlot(c, i)
	}
}

// extend adds slot k to the CPU's span, then cuts it when it is as long
// as MaxSpan.
func (d *Detector) extend(c *cpuState, k int64) {
	d.addSlot(c, k)
	if sp := &c.span; sp.end-sp.start >= d.maxSpan {
		next := span{active: true, continued: true, tid: sp.tid, pid: sp.pid, comm: sp.comm, start: sp.end, end: sp.end}
		d.finish(c)
		*sp = next
	}
}

// addSlot adds slot i's figures to the CPU's span.
func (d *Detector) addSlot(c *cpuState, i int64) {
	sp := &c.span
	sp.wallNs += d.slotNs
	cs := c.slot(i)
	if i >= 0 {
		if ns := &d.node[i%ringSlots]; ns.slot == i {
			sp.nodeBusy += ns.busy
			sp.nodeAll += ns.all
			sp.restBusy += ns.busy
			sp.restAll += ns.all
			if cs != nil {
				sp.restBusy -= cs.busy
				sp.restAll -= cs.all
			}
		}
	}
	if cs == nil {
		return
	}
	sp.cpuNs += cs.all
	t := cs.find(sp.tid)
	if t == nil {
		return
	}
	sp.threadNs += t.ns
	sp.start = min(sp.start, t.start)
	sp.end = max(sp.end, t.last)
	if t.pid != 0 {
		sp.pid, sp.comm = t.pid, t.comm
	}
	if cs.tracked == sp.tid {
		sp.kernel.merge(&cs.kernel)
		sp.user.merge(&cs.user)
	}
}

// finish reports the CPU's span when it lasted the minimum duration, and
// closes it.
func (d *Detector) finish(c *cpuState) {
	sp := &c.span
	if sp.active && sp.end-sp.start >= d.cfg.MinDuration.Nanoseconds() && sp.wallNs > 0 {
		d.stats.Events++
		d.cfg.Emit(d.event(c.cpu, sp))
	}
	*sp = span{}
}

// Label value and text limits of events.Event.
const maxLabel = events.MaxLabelValLen

// event describes a span.
func (d *Detector) event(cpu uint32, sp *span) events.Event {
	dur := time.Duration(sp.end - sp.start)
	// As the windows judge them: never over less than the wall time.
	busy := 100 * float64(sp.threadNs) / float64(max(sp.cpuNs, d.floor(sp.wallNs), 1))
	node := 100 * float64(sp.nodeBusy) / float64(max(sp.nodeAll, d.cpuCount()*d.floor(sp.wallNs), 1))
	others := d.cpuCount() - 1
	comm := clean(sp.comm, 64)
	labels := map[string]string{
		"kind":              Kind,
		"comm":              comm,
		"pid":               strconv.FormatUint(uint64(sp.pid), 10),
		"tid":               strconv.FormatUint(uint64(sp.tid), 10),
		"cpu":               strconv.FormatUint(uint64(cpu), 10),
		"duration_seconds":  strconv.FormatFloat(dur.Seconds(), 'f', 3, 64),
		"cpu_busy_percent":  strconv.FormatFloat(busy, 'f', 1, 64),
		"node_busy_percent": strconv.FormatFloat(node, 'f', 1, 64),
	}
	var text strings.Builder
	fmt.Fprintf(&text, "%s (pid %d, tid %d) kept CPU %d %.0f%% busy for %.1fs", comm, sp.pid, sp.tid, cpu, busy, dur.Seconds())
	if others > 0 {
		rest := 100 * float64(sp.restBusy) / float64(max(sp.restAll, others*d.floor(sp.wallNs), 1))
		labels["other_cpus_busy_percent"] = strconv.FormatFloat(rest, 'f', 1, 64)
		if others == 1 {
			fmt.Fprintf(&text, " while the node's other CPU was %.0f%% busy (the node %.0f%%)", rest, node)
		} else {
			fmt.Fprintf(&text, " while the node's %d other CPUs averaged %.0f%% (the node %.0f%%)", others, rest, node)
		}
	} else {
		text.WriteString(", the node's only CPU")
	}
	if f, _ := sp.user.top(); f != "" {
		labels["user_function"] = clean(f, maxLabel)
		fmt.Fprintf(&text, "; top user function %s", labels["user_function"])
	}
	if f, _ := sp.kernel.top(); f != "" {
		labels["kernel_function"] = clean(f, maxLabel)
		fmt.Fprintf(&text, "; top kernel function %s", labels["kernel_function"])
	}
	if sp.continued {
		labels["continued"] = "true"
		text.WriteString(" (continued)")
	}
	return events.Event{Time: sp.start, Source: Source, Severity: events.Warning, Text: text.String(), Labels: labels}
}

// clean makes untrusted text (a command, a function name) an event's
// label value: valid UTF-8, control characters as '?', at most n bytes.
func clean(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// add counts w for name; when full, name replaces the smallest count and
// inherits it (space-saving).
func (t *topFuncs) add(name string, w int64) {
	for i := range t.n {
		if t.name[i] == name {
			t.ns[i] += w
			return
		}
	}
	if t.n < maxFuncs {
		t.name[t.n], t.ns[t.n] = name, w
		t.n++
		return
	}
	m := 0
	for i := 1; i < t.n; i++ {
		if t.ns[i] < t.ns[m] {
			m = i
		}
	}
	t.name[m] = name
	t.ns[m] += w
}

func (t *topFuncs) merge(o *topFuncs) {
	for i := range o.n {
		t.add(o.name[i], o.ns[i])
	}
}

// top returns the function with the most time, "" when none.
func (t *topFuncs) top() (string, int64) {
	best := -1
	for i := range t.n {
		if best < 0 || t.ns[i] > t.ns[best] {
			best = i
		}
	}
	if best < 0 {
		return "", 0
	}
	return t.name[best], t.ns[best]
}
