package otlpprofile

import (
	"crypto/rand"
	"encoding/binary"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/heatscope/heatscope/sample"
)

// Encoder collects samples into one OTLP profiles request (a batch): one
// resource per node, its samples of one stack and one set of attributes
// sharing an OTLP Sample that keeps each one's timestamp and period. Not
// safe for concurrent use.
//
// A request's dictionary (its strings, mappings, functions, locations,
// stacks and attributes) is what a recording repeats batch after batch:
// Request keeps it for the next batch while the batch used nearly all of
// it, so that a stack seen before is not built in pdata again (its
// frames are still hashed once a batch, to find it). A request then carries at most a quarter more stacks and
// attributes than its samples use (plus keptSlack); a dictionary found
// staler than that starts afresh and is not kept for a while (nextBatch),
// as on a node whose stacks change faster than its batches (a busy build
// machine), where keeping it would only make requests larger.
type Encoder struct {
	version string
	node    string
	period  int64
	// hostID is the host.id of the resources written, "" for none.
	hostID string

	profiles pprofile.Profiles
	dict     pprofile.ProfilesDictionary
	n        int

	// gen numbers the batches; stackGen and attrGen hold, for each stack
	// and attribute of the dictionary, the last batch that used it, and
	// usedStacks and usedAttrs count the current batch's.
	gen                   uint32
	stackGen, attrGen     []uint32
	usedStacks, usedAttrs int
	// fresh says the batch started on a new dictionary; retryIn counts
	// the batches still to start afresh after a kept one proved stale.
	fresh   bool
	retryIn int

	// The dictionary's tables: each value's index in it. They are
	// emptied, not dropped, when the dictionary starts afresh (their room
	// is reused): the agent's memory is small, and its garbage
	// collector's work grows with what it holds.
	strings  map[string]int32
	attrs    map[attrKey]int32
	mappings map[mappingKey]int32
	funcs    map[funcKey]int32
	locs     map[sample.Frame]int32
	stacks   map[string]int32
	// threads finds the attributes of a thread's OTLP samples (its pid,
	// tid, CPU, command and container) in the attribute table:
	// threadAttrs[threadSpans[i].from:threadSpans[i].to] for its entry
	// i, built once while the dictionary is kept, so that a new OTLP
	// sample of a known thread looks up no attribute; threadGen holds,
	// for each, the last batch that used it.
	threads     map[threadKey]int32
	threadSpans []span
	threadAttrs []int32
	threadGen   []uint32
	// shared finds the stack of a slice the batch has seen by the
	// slice alone: the recorder's samples of one stack share one slice
	// (symbolize caches it), and a slice given to Add is not modified
	// (Add's contract) nor, held here, reused for another stack while
	// the batch is open. It is the batch's: it holds no slice of the
	// recorder's past it (kept across batches, they were live heap the
	// agent's collector paid for, in a bench/otlp run 3.6% of its CPU).
	shared map[stackRef]sharedStack
	// nodes are the batch's profiles, one per node; a node's entry is
	// kept for the next batch, its tables emptied.
	nodes map[string]*nodeProfile
	// obs holds each sample's time and weight until Profiles writes them
	// into their OTLP samples, each slice allocated once at its size.
	obs []observation

	// locBuf and keyBuf are scratch space for one stack.
	locBuf []int32
	keyBuf []byte
}

// observation is one sample: its OTLP sample (its node's profile and
// index there), time and weight.
type observation struct {
	node   *nodeProfile
	sample int32
	time   uint64
	period int64
}

// stackRef names a stack slice by its first frame's address and length.
type stackRef struct {
	first *sample.Frame
	n     int
}

// sharedStack is a stack slice seen in the batch (held, so that its
// memory is not another slice's while the batch is open), and its
// stack's index.
type sharedStack struct {
	frames []sample.Frame
	index  int32
}

// attrKey is one attribute: a key and a string or integer value.
type attrKey struct {
	key   string
	str   string
	num   int64
	isNum bool
}

// funcKey is what a function of heatscope's is: its name, and for a
// Python function its file and first line.
type funcKey struct {
	name, file string
	startLine  uint32
}

// mappingKey is what a mapping of heatscope's says: its module and build id.
type mappingKey struct{ module, buildID string }

// threadKey is what a heatscope sample says besides its stack and time:
// the attributes of its OTLP sample.
type threadKey struct {
	pid, tid, cpu uint32
	comm          string
	cgroupID      uint64
	// container is the sample's: the samples of one cgroup share one
	// (sample.Sample.Container), which is read-only.
	container *sample.Container
}

// span is a range of indices.
type span struct{ from, to int32 }

// sampleKey is what an OTLP Sample of heatscope's is: a stack and a
// thread's attributes (its entry in Encoder.threads).
type sampleKey struct{ stack, thread int32 }

// maxThreads bounds the thread entries kept with the dictionary for the
// next batch: past it they are forgotten (and built again as samples need
// them).
const maxThreads = 1 << 12

// nodeProfile is the profile of one node's samples.
type nodeProfile struct {
	profile  pprofile.Profile
	inBatch  bool // profile is the current batch's
	samples  map[sampleKey]int
	counts   []int32 // the observations of each OTLP sample
	periods  map[int64]int
	from, to int64 // the first and last sample's time
	n        int   // samples added
}

// NewEncoder returns an empty encoder writing version as the scope's
// version, node as the host.name of samples that do not name their own
// (sample.Sample.Node), and periodNs as the weight of samples that do not
// carry their own (PeriodNs 0: samples read from the store, whose period
// is kept per block; SetPeriod changes it).
func NewEncoder(version, node string, periodNs int64) *Encoder {
	e := &Encoder{version: version, node: node, period: periodNs}
	e.reset()
	return e
}

// SetHostID sets the host.id of the nodes' resources written from now
// on: what tells two machines apart that send under one host.name (a
// recorder gives its data directory's instance id).
func (e *Encoder) SetHostID(id string) { e.hostID = id }

// SetPeriod sets the weight of the samples added from now on that do not
// carry their own period.
func (e *Encoder) SetPeriod(periodNs int64) { e.period = periodNs }

// Len returns the number of samples added since the last Profiles.
func (e *Encoder) Len() int { return e.n }

// reset starts a new batch with a new dictionary.
func (e *Encoder) reset() {
	e.profiles = pprofile.NewProfiles()
	e.dict = e.profiles.Dictionary()
	if e.strings == nil {
		e.strings, e.attrs, e.mappings, e.funcs = map[string]int32{}, map[attrKey]int32{}, map[mappingKey]int32{}, map[funcKey]int32{}
		e.locs, e.stacks, e.shared, e.nodes = map[sample.Frame]int32{}, map[string]int32{}, map[stackRef]sharedStack{}, map[string]*nodeProfile{}
		e.threads = map[threadKey]int32{}
	}
	clear(e.strings)
	clear(e.attrs)
	clear(e.mappings)
	clear(e.funcs)
	clear(e.locs)
	clear(e.stacks)
	clear(e.nodes)
	e.forgetThreads()
	e.stackGen, e.attrGen = e.stackGen[:0], e.attrGen[:0]
	e.newBatch()
	e.fresh = true
	// Every dictionary table starts with its zero value, which an index
	// of 0 means ("not set").
	e.str("")
	e.dict.MappingTable().AppendEmpty()
	e.dict.LocationTable().AppendEmpty()
	e.dict.FunctionTable().AppendEmpty()
	e.dict.LinkTable().AppendEmpty()
	e.dict.AttributeTable().AppendEmpty()
	e.attrGen = append(e.attrGen, 0)
	e.dict.StackTable().AppendEmpty()
	e.stackGen = append(e.stackGen, 0)
	e.mappings[mappingKey{}] = 0
	e.funcs[funcKey{}] = 0
	e.stacks[""] = 0
}

// forgetThreads empties the thread entries.
func (e *Encoder) forgetThreads() {
	clear(e.threads)
	e.threadSpans, e.threadAttrs, e.threadGen = e.threadSpans[:0], e.threadAttrs[:0], e.threadGen[:0]
}

// newBatch starts a new batch on the dictionary as it is.
func (e *Encoder) newBatch() {
	e.profiles.ResourceProfiles().RemoveIf(func(pprofile.ResourceProfiles) bool { return true })
	for _, np := range e.nodes {
		np.inBatch = false
	}
	clear(e.shared)
	clear(e.obs) // no pointer into the last batch kept
	e.obs = e.obs[:0]
	e.n = 0
	e.gen++
	e.usedStacks, e.usedAttrs = 0, 0
}

// keptSlack is how many stacks and attributes a batch may leave unused
// over a quarter of those it used, the dictionary kept; keptLocations
// bounds its locations whatever the batches use; keptRetry is how many
// batches start afresh after a kept dictionary proved stale, before one is
// kept again.
const (
	keptSlack     = 16
	keptLocations = 1 << 16
	keptRetry     = 12
)

// nextBatch starts a new batch after the current one was marshaled. The
// dictionary is kept while the batches use nearly all of it. One that
// proved stale (the batch left a fifth of it unused: the node's stacks
// change faster than its batches) is not kept for the next
// keptRetry batches, so that a node whose stacks keep changing sends a
// request larger than its samples need once every keptRetry+1 batches.
func (e *Encoder) nextBatch() {
	stale := e.dict.StackTable().Len() > e.usedStacks+e.usedStacks/4+keptSlack ||
		e.dict.AttributeTable().Len() > e.usedAttrs+e.usedAttrs/4+keptSlack || e.dict.LocationTable().Len() > keptLocations
	if stale && !e.fresh {
		e.retryIn = keptRetry
	}
	if stale || e.retryIn > 0 {
		e.retryIn = max(e.retryIn-1, 0)
		e.reset()
		return
	}
	if len(e.threads) > maxThreads {
		e.forgetThreads()
	}
	e.newBatch()
	e.fresh = false
}

// Add adds one sample, which weighs its own period (s.PeriodNs, else the
// encoder's). It keeps nothing of s but copies, and s.Stack until the
// batch is cut: the caller does not modify a Stack slice once given (the
// recorder's and Decode's are shared between samples, the store's are
// new), since a slice seen before in the batch is taken for the stack it
// held then.
func (e *Encoder) Add(s *sample.Sample) {
	node := s.Node
	if node == "" {
		node = e.node
	}
	np := e.nodes[node]
	if np == nil || !np.inBatch {
		np = e.newNodeProfile(node, np)
	}
	key := sampleKey{stack: e.stack(s.Stack), thread: e.thread(s)}
	i, ok := np.samples[key]
	if !ok {
		i = np.profile.Samples().Len()
		np.samples[key] = i
		np.counts = append(np.counts, 0)
		os := np.profile.Samples().AppendEmpty()
		os.SetStackIndex(key.stack)
		t := e.threadSpans[key.thread]
		a := os.AttributeIndices()
		a.EnsureCapacity(int(t.to - t.from))
		a.Append(e.threadAttrs[t.from:t.to]...)
	}
	period := s.PeriodNs
	if period <= 0 {
		period = e.period
	}
	np.counts[i]++
	e.obs = append(e.obs, observation{node: np, sample: int32(i), time: uint64(s.Time), period: period})
	np.periods[period]++
	if np.n == 0 || s.Time < np.from {
		np.from = s.Time
	}
	if np.n == 0 || s.Time > np.to {
		np.to = s.Time
	}
	np.n++
	e.n++
}

// newNodeProfile adds the resource, scope and profile of a node to the
// batch, reusing np's tables (the node's in the last batch) if not nil.
func (e *Encoder) newNodeProfile(node string, np *nodeProfile) *nodeProfile {
	rp := e.profiles.ResourceProfiles().AppendEmpty()
	rp.SetSchemaUrl(schemaURL)
	if node != "" {
		rp.Resource().Attributes().PutStr(keyHostName, node)
	}
	if e.hostID != "" {
		rp.Resource().Attributes().PutStr(keyHostID, e.hostID)
	}
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.SetSchemaUrl(schemaURL)
	sp.Scope().SetName(ScopeName)
	sp.Scope().SetVersion(e.version)
	p := sp.Profiles().AppendEmpty()
	p.SampleType().SetTypeStrindex(e.str(typeCPU))
	p.SampleType().SetUnitStrindex(e.str(unitNanoseconds))
	p.PeriodType().SetTypeStrindex(e.str(typeCPU))
	p.PeriodType().SetUnitStrindex(e.str(unitNanoseconds))
	var id pprofile.ProfileID
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails
	p.SetProfileID(id)
	if np == nil {
		np = &nodeProfile{samples: map[sampleKey]int{}, periods: map[int64]int{}}
		e.nodes[node] = np
	}
	clear(np.samples)
	clear(np.periods)
	np.profile, np.inBatch, np.counts, np.n = p, true, np.counts[:0], 0
	return np
}

// thread returns the index of the entry of s's thread (its attributes),
// adding it if new, and marks its attributes used by the batch.
func (e *Encoder) thread(s *sample.Sample) int32 {
	k := threadKey{pid: s.PID, tid: s.TID, cpu: s.CPU, comm: s.Comm, cgroupID: s.CgroupID}
	if s.Container != nil && *s.Container != (sample.Container{}) {
		k.container = s.Container
	}
	t, ok := e.threads[k]
	if !ok {
		t = int32(len(e.threadSpans))
		from := int32(len(e.threadAttrs))
		e.threadAttrs = e.appendAttrs(e.threadAttrs, &k)
		e.threadSpans = append(e.threadSpans, span{from, int32(len(e.threadAttrs))})
		e.threadGen = append(e.threadGen, e.gen)
		e.threads[k] = t
		return t
	}
	if e.threadGen[t] != e.gen {
		e.threadGen[t] = e.gen
		sp := e.threadSpans[t]
		for _, a := range e.threadAttrs[sp.from:sp.to] {
			e.use(a)
		}
	}
	return t
}

// appendAttrs appends the indices of a thread's attributes (adding those
// that are new to the table) to dst.
func (e *Encoder) appendAttrs(dst []int32, k *threadKey) []int32 {
	dst = append(dst, e.intAttr(keyPID, int64(k.pid)), e.intAttr(keyTID, int64(k.tid)), e.intAttr(keyCPU, int64(k.cpu)))
	if k.comm != "" {
		dst = append(dst, e.strAttr(keyThreadName, k.comm))
	}
	if k.cgroupID != 0 {
		// The id's 64 bits, read back as they were written.
		dst = append(dst, e.intAttr(keyCgroupID, int64(k.cgroupID)))
	}
	c := k.container
	if c == nil {
		return dst
	}
	if c.Cgroup != "" {
		dst = append(dst, e.strAttr(keyCgroup, cgroupV2Prefix+c.Cgroup))
	}
	for _, kv := range [...]struct{ key, value string }{
		{keyContainerID, c.ID},
		{keyContainerRuntime, c.Runtime},
		{keyPodUID, c.PodUID},
		{keyQoS, c.QoS},
		{keyNamespace, c.Namespace},
		{keyPodName, c.Pod},
		{keyContainerName, c.Name},
	} {
		if kv.value != "" {
			dst = append(dst, e.strAttr(kv.key, kv.value))
		}
	}
	return dst
}

// stack returns the index of a stack's entry in the stack table, adding
// it (and its locations) if new in this batch.
func (e *Encoder) stack(frames []sample.Frame) int32 {
	if len(frames) == 0 {
		return 0 // the table's zero entry: no frames
	}
	ref := stackRef{&frames[0], len(frames)}
	if c, ok := e.shared[ref]; ok {
		return e.used(c.index)
	}
	e.locBuf = e.locBuf[:0]
	e.keyBuf = e.keyBuf[:0]
	for i := range frames {
		l, ok := e.locs[frames[i]]
		if !ok {
			l = e.location(&frames[i])
			e.locs[frames[i]] = l
		}
		e.locBuf = append(e.locBuf, l)
		e.keyBuf = binary.LittleEndian.AppendUint32(e.keyBuf, uint32(l))
	}
	i, ok := e.stacks[string(e.keyBuf)]
	if !ok {
		t := e.dict.StackTable()
		i = int32(t.Len())
		st := t.AppendEmpty().LocationIndices()
		st.EnsureCapacity(len(e.locBuf))
		st.Append(e.locBuf...)
		e.stacks[string(e.keyBuf)] = i
		e.stackGen = append(e.stackGen, 0)
	}
	e.shared[ref] = sharedStack{frames, i}
	return e.used(i)
}

// used marks stack i used by the batch, and returns it.
func (e *Encoder) used(i int32) int32 {
	if e.stackGen[i] != e.gen {
		e.stackGen[i] = e.gen
		e.usedStacks++
	}
	return i
}

// location adds a frame's location (once a batch) and returns its
// index. A Python frame is a location of no mapping and no address, its line the
// line being run, its function's file the Python source and its start
// line the function's first: the shape the eBPF profiler gives an
// interpreted frame.
func (e *Encoder) location(f *sample.Frame) int32 {
	t := e.dict.LocationTable()
	i := int32(t.Len())
	l := t.AppendEmpty()
	line := l.Lines().AppendEmpty()
	if f.Kind == sample.KindPython {
		line.SetFunctionIndex(e.function(funcKey{f.Function, f.Module, f.StartLine}))
		line.SetLine(int64(f.Line))
	} else {
		l.SetAddress(f.Address)
		l.SetMappingIndex(e.mapping(f.Module, f.BuildID))
		line.SetFunctionIndex(e.function(funcKey{name: f.Function}))
	}
	if v, ok := frameTypes[f.Kind]; ok {
		l.AttributeIndices().Append(e.strAttr(keyFrameType, v))
	}
	if v, ok := unwindMethods[f.Method]; ok {
		l.AttributeIndices().Append(e.strAttr(keyUnwindMethod, v))
	}
	return i
}

// mapping returns the index of a module's mapping, adding it if new.
func (e *Encoder) mapping(module, buildID string) int32 {
	k := mappingKey{module, buildID}
	if i, ok := e.mappings[k]; ok {
		return i
	}
	t := e.dict.MappingTable()
	i := int32(t.Len())
	m := t.AppendEmpty()
	m.SetFilenameStrindex(e.str(module))
	if buildID != "" {
		m.AttributeIndices().Append(e.strAttr(keyBuildIDGNU, buildID))
	}
	e.mappings[k] = i
	return i
}

// function returns the index of a function, adding it if new.
func (e *Encoder) function(k funcKey) int32 {
	if i, ok := e.funcs[k]; ok {
		return i
	}
	t := e.dict.FunctionTable()
	i := int32(t.Len())
	fn := t.AppendEmpty()
	fn.SetNameStrindex(e.str(k.name))
	if k.file != "" {
		fn.SetFilenameStrindex(e.str(k.file))
	}
	fn.SetStartLine(int64(k.startLine))
	e.funcs[k] = i
	return i
}

// str returns the index of a string in the string table, adding it if new.
func (e *Encoder) str(s string) int32 {
	if i, ok := e.strings[s]; ok {
		return i
	}
	t := e.dict.StringTable()
	i := int32(t.Len())
	t.Append(s)
	e.strings[s] = i
	return i
}

func (e *Encoder) strAttr(key, value string) int32 {
	return e.attr(attrKey{key: key, str: value})
}

func (e *Encoder) intAttr(key string, value int64) int32 {
	return e.attr(attrKey{key: key, num: value, isNum: true})
}

// attr returns the index of an attribute in the attribute table, adding
// it if new.
func (e *Encoder) attr(k attrKey) int32 {
	i, ok := e.attrs[k]
	if !ok {
		t := e.dict.AttributeTable()
		i = int32(t.Len())
		a := t.AppendEmpty()
		a.SetKeyStrindex(e.str(k.key))
		if k.isNum {
			a.Value().SetInt(k.num)
		} else {
			a.Value().SetStr(k.str)
		}
		e.attrs[k] = i
		e.attrGen = append(e.attrGen, 0)
	}
	e.use(i)
	return i
}

// use marks attribute i used by the batch.
func (e *Encoder) use(i int32) {
	if e.attrGen[i] != e.gen {
		e.attrGen[i] = e.gen
		e.usedAttrs++
	}
}

// Profiles returns the batch of the samples added since the last call,
// and starts a new one with a new dictionary. Each profile's time is its
// first sample's, its duration reaches just past its last, and its
// period is the one most of its samples weigh.
func (e *Encoder) Profiles() pprofile.Profiles {
	e.finish()
	out := e.profiles
	e.reset()
	return out
}

// finish writes the batch's samples' times and weights, and its
// profiles' times and periods.
func (e *Encoder) finish() {
	for _, np := range e.nodes {
		if !np.inBatch {
			continue
		}
		p := np.profile
		p.SetTime(pcommon.Timestamp(np.from))
		p.SetDurationNano(uint64(np.to-np.from) + 1)
		var most int
		for period, n := range np.periods {
			if n > most || n == most && period < p.Period() {
				most = n
				p.SetPeriod(period)
			}
		}
		for i, n := range np.counts {
			os := p.Samples().At(i)
			os.TimestampsUnixNano().EnsureCapacity(int(n))
			os.Values().EnsureCapacity(int(n))
		}
	}
	for _, o := range e.obs {
		os := o.node.profile.Samples().At(int(o.sample))
		os.TimestampsUnixNano().Append(o.time)
		os.Values().Append(o.period)
	}
}

// Request returns the protobuf of an ExportProfilesServiceRequest holding
// the batch of the samples added since the last call (as MarshalRequest
// of Profiles would), and starts a new one, keeping the dictionary while
// the batch used most of it.
func (e *Encoder) Request() ([]byte, error) {
	e.finish()
	b, err := MarshalRequest(e.profiles)
	e.nextBatch()
	return b, err
}
