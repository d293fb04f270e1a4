// Package metrics exposes heatscope's own health in the Prometheus text
// format: what the sampler took and lost, what the symbolizer resolved, what
// the store holds and did, how long queries took, and what the agent costs
// (the standard process_* and go_* collectors).
//
// Nothing is counted twice on the sampling path: the collectors read the
// counters the profiler, symbolizer and store already keep, at scrape time.
// Only query latencies are observed as they happen, once per request.
package metrics

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/heatscope/heatscope/overview"
	"github.com/heatscope/heatscope/profiler"
	"github.com/heatscope/heatscope/store"
	"github.com/heatscope/heatscope/symbolize"
)

// namespace prefixes every heatscope metric.
const namespace = "heatscope"

// Metrics is a registry of heatscope's collectors plus the query latency
// histogram. It is safe for concurrent use.
type Metrics struct {
	reg     *prometheus.Registry
	queries *prometheus.HistogramVec
}

// gcCPU adds to the Go collector's defaults the runtime's estimate of the
// CPU its garbage collector has used (go_cpu_classes_gc_total_cpu_seconds_total:
// marking, assists, pauses), which the overhead guard counts in "the rest":
// beside go_gc_duration_seconds' count of collections, what they cost.
var gcCPU = collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/cpu/classes/gc/total:cpu-seconds$`)}

// New returns a registry with the process and Go runtime collectors and the
// query latency histogram; add the sampler's and store's with
// RegisterRecorder and RegisterStore.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		queries: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "query_duration_seconds",
			Help:      "Time to answer an API request, by endpoint and HTTP status.",
			Buckets:   []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"endpoint", "code"}),
	}
	m.reg.MustRegister(
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(gcCPU)),
		m.queries,
	)
	return m
}

// Register adds another collector, e.g. one of another package's counters.
func (m *Metrics) Register(c prometheus.Collector) error {
	if err := m.reg.Register(c); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return nil
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// ObserveQuery records one API request's duration.
func (m *Metrics) ObserveQuery(endpoint string, status int, elapsed time.Duration) {
	m.queries.WithLabelValues(endpoint, strconv.Itoa(status)).Observe(elapsed.Seconds())
}

// Recorder is what RegisterRecorder reads at scrape time: the recorder.
type Recorder interface {
	Stats() (profiler.Stats, error)
	SymbolizerStats() symbolize.Stats
	Frequency() int
}

// RegisterRecorder adds the sampler's and symbolizer's counters of rec.
// frequencyChanges, when not nil, counts the overhead guard's changes of
// frequency.
func (m *Metrics) RegisterRecorder(rec Recorder, frequencyChanges func() uint64) error {
	return m.Register(&recorderCollector{rec: rec, changes: frequencyChanges})
}

// RegisterOverview exports what the fleet overview's cells hold, read at
// scrape time (overview.Cells.Stats over the store it serves).
func (m *Metrics) RegisterOverview(stats func() overview.Stats) error {
	return m.Register(tableCollector{descs: overviewDescriptions, read: func() []constMetric { return overviewTable(stats()) }})
}

// StoreStats is what RegisterStore reads at scrape time: the store.
type StoreStats interface{ Stats() store.Stats }

// RegisterStore adds the store's sizes and counters.
func (m *Metrics) RegisterStore(db StoreStats) error {
	return m.Register(tableCollector{descs: storeDescriptions, read: func() []constMetric { return storeTable(db.Stats()) }})
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
}

// The sampler's and symbolizer's metrics.
var (
	descSamples         = desc("samples_total", "Samples the BPF program took (after the pid and cgroup filters), per CPU.", "cpu")
	descDropped         = desc("samples_dropped_total", "Samples lost because the ring buffer was full, per CPU.", "cpu")
	descFiltered        = desc("samples_filtered_total", "Samples the pid or cgroup filter skipped, per CPU.", "cpu")
	descStackErrors     = desc("stack_errors_total", "Failed stack walks, per CPU and stack (kernel or user).", "cpu", "stack")
	descReceived        = desc("samples_received_total", "Samples the agent read from the ring buffer.")
	descDecodeErrors    = desc("record_decode_errors_total", "Ring buffer records that failed to decode.")
	descRingSize        = desc("ring_buffer_size_bytes", "Size of the BPF ring buffer.")
	descRingUsed        = desc("ring_buffer_used_bytes", "Bytes waiting in the BPF ring buffer at scrape time.")
	descRingFill        = desc("ring_buffer_fill_ratio", "Share of the BPF ring buffer in use at scrape time (0 to 1).")
	descBPFSeconds      = desc("bpf_program_seconds_total", "Run time of the BPF sampling program, counted while kernel.bpf_stats_enabled is on.")
	descExitSeconds     = desc("bpf_exit_program_seconds_total", "Run time of the BPF program that snapshots exiting processes' mappings, counted while kernel.bpf_stats_enabled is on.")
	descExitRuns        = desc("bpf_exit_program_runs_total", "Runs of the BPF program that snapshots exiting processes' mappings, counted while kernel.bpf_stats_enabled is on.")
	descWakeups         = desc("sampler_wakeups_total", "Times the BPF program woke the agent before its next poll (a new process, on kernels that cannot snapshot mappings).")
	descSnapshots       = desc("symbolizer_snapshots_total", "Processes symbolized from the mappings snapshotted as they exited, without reading /proc.")
	descSnapshotUnnamed = desc("symbolizer_snapshot_unnamed_files_total", "Files mapped by snapshotted processes that no /proc read had named; their frames stay unknown.")
	descBPFRuns         = desc("bpf_program_runs_total", "Runs of the BPF sampling program, counted while kernel.bpf_stats_enabled is on.")
	descFrequency       = desc("sampling_frequency_hertz", "Effective sampling frequency per CPU (the overhead guard may lower it).")
	descFreqChanges     = desc("sampling_frequency_changes_total", "Changes of the sampling frequency by the overhead guard.")
	descBinaryHits      = desc("symbolizer_binary_cache_hits_total", "Mapped files found in the symbolizer's binary cache.")
	descBinaryMisses    = desc("symbolizer_binary_cache_misses_total", "Binaries whose symbol tables were loaded into the cache.")
	descBinaryDiskHits  = desc("symbolizer_binary_disk_cache_hits_total", "Binaries whose symbol tables were loaded into the cache from the disk cache (--cache-dir), not from their ELF files.")
	descBinaryErrors    = desc("symbolizer_binary_errors_total", "Mapped files that could not be read as ELF.")
	descMapsReads       = desc("symbolizer_maps_reads_total", "Reads of /proc/PID/maps.")
	descMapsErrors      = desc("symbolizer_maps_errors_total", "Failed reads of /proc/PID/maps (mostly processes that had exited).")
	descFrames          = desc("frames_total", "Frames symbolized, by result (resolved or unknown).", "result")
	descStackHits       = desc("symbolizer_stack_cache_hits_total", "Stacks symbolized from the cache of recent stacks, without a lookup per frame.")
	descUnknownRatio    = desc("frames_unknown_ratio", "Share of all frames symbolized so far that stayed unknown (0 to 1).")
	descProcesses       = desc("processes_tracked", "Processes whose address maps the symbolizer holds.")
	descBinariesTracked = desc("binaries_cached", "Binaries whose symbol tables the symbolizer holds.")
	descBinaryBytes     = desc("symbol_cache_bytes", "About the memory the cached symbol tables take (bounded by --symbol-cache).")
	descPythonFrames    = desc("python_frames_total", "Python frames put in samples, by result: named from their code object, or unknown (the code object could not be read: named by its address).", "result")
	descPythonMisplaced = desc("python_misplaced_samples_total", "Samples whose native stack and Python chain disagreed on the calls of the interpreter's evaluation loop (no frame dropped: Python frames left over go below the native stack).")
	descPythonCodeHits  = desc("python_code_cache_hits_total", "Python frames named from the cache of code objects.")
	descPythonCodeMiss  = desc("python_code_cache_misses_total", "Code objects read from a Python process's memory into the cache.")
	descPythonCodes     = desc("python_code_cache_objects", "Code objects the cache holds.")
	descPythonCodeBytes = desc("python_code_cache_bytes", "About the memory the cached code objects (names, location tables) take, bounded at 16 MiB.")
	descUnwindWalks     = desc("unwind_walks_total", "User stacks walked with unwind tables (dwarf), or with frame pointers because the process's tables were not loaded yet (fp); --unwind dwarf only.", "method")
	descUnwindStops     = desc("unwind_stops_total", "Table walks that stopped at a row they cannot follow (unsupported) or reached the frame limit (truncated).", "reason")
	descPythonWalks     = desc("python_walks_total", "Samples of processes running a CPython the agent found (walked); of those, the ones of a thread with no thread state (no_thread), whose frame chain a failed read cut (read_error), or longer than the frame limit (truncated); --unwind dwarf only.", "outcome")
	descUnwindTables    = desc("unwind_tables", "Unwind tables loaded into BPF maps.")
	descUnwindBytes     = desc("unwind_table_bytes", "Bytes of the unwind tables loaded into BPF maps (bounded by --unwind-tables).")
	descUnwindEvictions = desc("unwind_table_evictions_total", "Unwind tables evicted (least recently used) to stay within --unwind-tables.")
	descUnwindNoCFI     = desc("unwind_binaries_without_cfi_total", "Mapped binaries without .eh_frame or .debug_frame: their frames are walked with frame pointers.")
	descUnwindErrors    = desc("unwind_table_errors_total", "Mapped binaries whose unwind table could not be built.")
	descUnwindDeferred  = desc("unwind_tables_deferred_total", "Unwind tables not loaded for a while because the loaded ones were all in use within --unwind-tables.")
	descUnwindPruned    = desc("unwind_cache_pruned_files_total", "Unwind table files removed from --cache-dir, least recently used first, to stay within --cache-size.")
	descUnwindPrunedB   = desc("unwind_cache_pruned_bytes_total", "Bytes of the unwind table files removed from --cache-dir to stay within --cache-size.")
	descUnwindRefused   = desc("unwind_tables_refused_total", "Unwind tables the kernel refused (map creation, fill, or unwind_tables update): their frames are walked with frame pointers.")
	descUnwindFallback  = desc("unwind_table_walk_fallback", "1 when --unwind auto walks user stacks with frame pointers because a check found the table walk cannot work on this kernel; check names it (helpers, table-maps, program, walk-results).", "check")
	descUnwindFrames    = desc("unwind_frames_total", "User frames (the sampled pc aside) found with an unwind table (table) or with frame pointers (fp); --unwind dwarf only.", "method")
)

// recorderCollector reads the recorder's counters at scrape time.
type recorderCollector struct {
	rec     Recorder
	changes func() uint64
}

func (c *recorderCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSamples, descDropped, descFiltered, descStackErrors, descReceived,
		descDecodeErrors, descRingSize, descRingUsed, descRingFill, descBPFSeconds, descBPFRuns, descFrequency,
		descExitSeconds, descExitRuns, descWakeups, descSnapshots, descSnapshotUnnamed,
		descFreqChanges, descBinaryHits, descBinaryMisses, descBinaryDiskHits, descBinaryErrors, descMapsReads, descMapsErrors,
		descFrames, descStackHits, descUnknownRatio, descProcesses, descBinariesTracked, descBinaryBytes,
		descPythonFrames, descPythonMisplaced, descPythonCodeHits, descPythonCodeMiss, descPythonCodes, descPythonCodeBytes,
		descUnwindWalks, descUnwindStops, descPythonWalks, descUnwindTables, descUnwindBytes, descUnwindEvictions, descUnwindNoCFI, descUnwindErrors,
		descUnwindDeferred, descUnwindFrames, descUnwindPruned, descUnwindPrunedB, descUnwindRefused, descUnwindFallback} {
		ch <- d
	}
}

func (c *recorderCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if st, err := c.rec.Stats(); err != nil {
		ch <- prometheus.NewInvalidMetric(descSamples, err)
	} else {
		for cpu, cc := range st.PerCPU {
			l := strconv.Itoa(cpu)
			counter(descSamples, float64(cc.Samples), l)
			counter(descDropped, float64(cc.Lost), l)
			counter(descFiltered, float64(cc.Filtered), l)
			counter(descStackErrors, float64(cc.KernelStackErrors), l, "kernel")
			counter(descStackErrors, float64(cc.UserStackErrors), l, "user")
		}
		counter(descReceived, float64(st.Received))
		counter(descDecodeErrors, float64(st.DecodeErrors))
		gauge(descRingSize, float64(st.RingBufferSize))
		gauge(descRingUsed, float64(st.RingBufferUsed))
		if st.RingBufferSize > 0 {
			gauge(descRingFill, float64(st.RingBufferUsed)/float64(st.RingBufferSize))
		}
		counter(descBPFSeconds, st.BPFRunTime.Seconds())
		counter(descBPFRuns, float64(st.BPFRunCount))
		counter(descExitSeconds, st.ExitRunTime.Seconds())
		counter(descExitRuns, float64(st.ExitRunCount))
		counter(descWakeups, float64(st.Wakeups))
		if f := st.Unwind.Fallback; f.Check != "" {
			gauge(descUnwindFallback, 1, f.Check)
		}
		if st.Unwind.Enabled {
			counter(descUnwindRefused, float64(st.Unwind.LoadErrors))
			counter(descUnwindWalks, float64(st.DWARFWalks), "dwarf")
			counter(descUnwindWalks, float64(st.FPWalks), "fp")
			counter(descUnwindStops, float64(st.UnsupportedRows), "unsupported")
			counter(descUnwindStops, float64(st.TruncatedWalks), "truncated")
			counter(descPythonWalks, float64(st.PythonWalks), "walked")
			counter(descPythonWalks, float64(st.PythonNoThread), "no_thread")
			counter(descPythonWalks, float64(st.PythonReadErrors), "read_error")
			counter(descPythonWalks, float64(st.PythonTruncated), "truncated")
			gauge(descUnwindTables, float64(st.Unwind.Tables))
			gauge(descUnwindBytes, float64(st.Unwind.TableBytes))
			counter(descUnwindEvictions, float64(st.Unwind.Evictions))
			counter(descUnwindNoCFI, float64(st.Unwind.NoCFI))
			counter(descUnwindErrors, float64(st.Unwind.BuildErrors))
			counter(descUnwindDeferred, float64(st.Unwind.Deferred))
			counter(descUnwindFrames, float64(st.Unwind.TableFrames), "table")
			counter(descUnwindFrames, float64(st.Unwind.FPFrames), "fp")
			counter(descUnwindPruned, float64(st.Unwind.CachePrunedFiles))
			counter(descUnwindPrunedB, float64(st.Unwind.CachePrunedBytes))
		}
	}
	gauge(descFrequency, float64(c.rec.Frequency()))
	if c.changes != nil {
		counter(descFreqChanges, float64(c.changes()))
	}
	sy := c.rec.SymbolizerStats()
	counter(descBinaryHits, float64(sy.BinaryHits))
	counter(descBinaryMisses, float64(sy.BinaryMisses))
	counter(descBinaryDiskHits, float64(sy.BinaryDiskHits))
	counter(descBinaryErrors, float64(sy.BinaryErrors))
	counter(descMapsReads, float64(sy.MapsReads))
	counter(descMapsErrors, float64(sy.MapsErrors))
	counter(descSnapshots, float64(sy.Snapshots))
	counter(descSnapshotUnnamed, float64(sy.SnapshotUnknownFiles))
	counter(descFrames, float64(sy.FramesResolved), "resolved")
	counter(descFrames, float64(sy.FramesUnknown), "unknown")
	counter(descStackHits, float64(sy.StackCacheHits))
	if total := sy.FramesResolved + sy.FramesUnknown; total > 0 {
		gauge(descUnknownRatio, float64(sy.FramesUnknown)/float64(total))
	}
	gauge(descProcesses, float64(sy.Processes))
	gauge(descBinariesTracked, float64(sy.Binaries))
	gauge(descBinaryBytes, float64(sy.BinaryBytes))
	counter(descPythonFrames, float64(sy.PythonFrames-sy.PythonUnknown), "named")
	counter(descPythonFrames, float64(sy.PythonUnknown), "unknown")
	counter(descPythonMisplaced, float64(sy.PythonMisplaced))
	counter(descPythonCodeHits, float64(sy.PythonCode.Hits))
	counter(descPythonCodeMiss, float64(sy.PythonCode.Misses))
	gauge(descPythonCodes, float64(sy.PythonCode.Codes))
	gauge(descPythonCodeBytes, float64(sy.PythonCode.Bytes))
}

// The store's metrics.
var (
	descWALBytes      = desc("store_wal_bytes", "Bytes in the current WAL segment.")
	descBlockBytes    = desc("store_block_bytes", "Bytes of all blocks in the data directory.")
	descBlocks        = desc("store_blocks", "Blocks in the data directory.")
	descHeadSamples   = desc("store_head_samples", "Samples in the in-memory head.")
	descAppended      = desc("store_samples_appended_total", "Samples appended to the store.")
	descLost          = desc("store_samples_lost_total", "Samples lost for good (disk full with nothing left to drop).")
	descWALDropped    = desc("store_wal_dropped_samples_total", "Samples whose WAL page could not be written (kept in memory).")
	descCuts          = desc("store_head_cuts_total", "Heads cut into blocks.")
	descCompactions   = desc("store_compactions_total", "Compactions (merges of blocks).")
	descRetention     = desc("store_retention_deletions_total", "Blocks deleted by retention or to free disk space.")
	descCorruptSkips  = desc("store_corrupt_skips_total", "Corrupt blocks, block indexes or WAL segments skipped.")
	descIndexBytes    = desc("store_index_cache_bytes", "Approximate memory of the block indexes (tables, summaries) cached for queries.")
	descIndexReads    = desc("store_index_reads_total", "Block indexes read from disk for queries (index cache misses).")
	descSummaryReads  = desc("store_cpu_summary_reads_total", "Blocks' per-CPU summaries read for the fleet overview (its cache misses, and the start-up warming's reads) and the timelines of every thread.")
	descWarmBlocks    = desc("overview_warm_blocks", "Blocks whose per-CPU cells are warm for the fleet overview's warm step, which serves its first page and every coarser step (serve warms them at start and as blocks arrive).")
	descWarmPending   = desc("overview_warm_pending", "Blocks still cold for the fleet overview's warm step: warming is done when this is 0.")
	descWarmBytes     = desc("overview_warm_bytes", "Approximate memory of the warm per-CPU cells, bounded by overview_warm_limit_bytes.")
	descWarmLimit     = desc("overview_warm_limit_bytes", "The bound of overview_warm_bytes: past it, warming leaves the remaining blocks to the queries.")
	descStepCellBytes = desc("overview_step_cells_bytes", "Approximate memory of the per-CPU cells at steps the warm ones do not serve: the fleet overview's zooms' and the timelines' of every thread, in one budget (overview_step_cells_limit_bytes).")
	descStepCellLimit = desc("overview_step_cells_limit_bytes", "The one bound of overview_step_cells_bytes, the zooms' and the timelines' cells together (least recently used out first).")
	storeDescriptions = []*prometheus.Desc{descWALBytes, descBlockBytes, descBlocks, descHeadSamples, descAppended,
		descLost, descWALDropped, descCuts, descCompactions, descRetention, descCorruptSkips, descIndexBytes, descIndexReads,
		descSummaryReads}
	overviewDescriptions = []*prometheus.Desc{descWarmBlocks, descWarmPending, descWarmBytes, descWarmLimit, descStepCellBytes, descStepCellLimit}
)

// tableCollector is a collector whose metrics are read at scrape time, as
// a table of values: the store's counters, a bucket's reads.
type tableCollector struct {
	descs []*prometheus.Desc
	read  func() []constMetric
}

// constMetric is one metric's value at a scrape.
type constMetric struct {
	d *prometheus.Desc
	t prometheus.ValueType
	v float64
}

func (c tableCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c tableCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.read() {
		ch <- prometheus.MustNewConstMetric(m.d, m.t, m.v)
	}
}

// storeTable is the store's counters as metrics.
func storeTable(st store.Stats) []constMetric {
	return []constMetric{
		{descWALBytes, prometheus.GaugeValue, float64(st.WALBytes)},
		{descBlockBytes, prometheus.GaugeValue, float64(st.BlockBytes)},
		{descBlocks, prometheus.GaugeValue, float64(st.Blocks)},
		{descHeadSamples, prometheus.GaugeValue, float64(st.HeadSamples)},
		{descAppended, prometheus.CounterValue, float64(st.Appended)},
		{descLost, prometheus.CounterValue, float64(st.Lost)},
		{descWALDropped, prometheus.CounterValue, float64(st.WALDropped)},
		{descCuts, prometheus.CounterValue, float64(st.Cuts)},
		{descCompactions, prometheus.CounterValue, float64(st.Compactions)},
		{descRetention, prometheus.CounterValue, float64(st.RetentionDrop)},
		{descCorruptSkips, prometheus.CounterValue, float64(st.CorruptSkips)},
		{descIndexBytes, prometheus.GaugeValue, float64(st.IndexCacheBytes)},
		{descIndexReads, prometheus.CounterValue, float64(st.IndexReads)},
		{descSummaryReads, prometheus.CounterValue, float64(st.CPUSummaryReads)},
	}
}

// overviewTable is the fleet overview's cells as metrics.
func overviewTable(st overview.Stats) []constMetric {
	return []constMetric{
		{descWarmBlocks, prometheus.GaugeValue, float64(st.WarmBlocks)},
		{descWarmPending, prometheus.GaugeValue, float64(st.WarmPending)},
		{descWarmBytes, prometheus.GaugeValue, float64(st.WarmBytes)},
		{descWarmLimit, prometheus.GaugeValue, float64(st.WarmLimit)},
		{descStepCellBytes, prometheus.GaugeValue, float64(st.StepBytes)},
		{descStepCellLimit, prometheus.GaugeValue, float64(st.StepLimit)},
	}
}
