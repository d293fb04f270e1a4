package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The recording pipeline's metrics.
var (
	descPipelineSamples = desc("recorded_samples_total", "Samples the recording pipeline handed to its sinks (store, outputs, saturation).")
	descPipelineCPU     = desc("recorded_cpu_seconds_total", "CPU time the samples handed to the sinks weigh: the sum of each sample's own sampling period.")
	descAppendErrors    = desc("store_append_errors_total", "Samples the store's Append failed to take durably (kept in memory when the WAL cannot be written); the recording goes on.")
)

// PipelineCounts is what RegisterPipeline reads of the samples recorded:
// pipeline.Counter.
type PipelineCounts interface {
	Samples() uint64
	SampledCPU() time.Duration
}

// AppendErrors is what RegisterPipeline reads of the store's appends:
// pipeline.Store.
type AppendErrors interface{ AppendErrors() uint64 }

// RegisterPipeline adds the recording pipeline's counters: the samples and
// the CPU time they weigh, and, with appends not nil (a recording into a
// store), its failed appends.
func (m *Metrics) RegisterPipeline(counts PipelineCounts, appends AppendErrors) error {
	descs := []*prometheus.Desc{descPipelineSamples, descPipelineCPU}
	if appends != nil {
		descs = append(descs, descAppendErrors)
	}
	return m.Register(tableCollector{descs: descs, read: func() []constMetric {
		t := []constMetric{
			{descPipelineSamples, prometheus.CounterValue, float64(counts.Samples())},
			{descPipelineCPU, prometheus.CounterValue, counts.SampledCPU().Seconds()},
		}
		if appends != nil {
			t = append(t, constMetric{descAppendErrors, prometheus.CounterValue, float64(appends.AppendErrors())})
		}
		return t
	}})
}
