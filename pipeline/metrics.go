package pipeline

import (
	"sync/atomic"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// Counter is the sink that counts the samples recorded and the CPU time
// they weigh, read by /metrics while the recording runs.
type Counter struct {
	samples atomic.Uint64
	cpuNs   atomic.Int64
}

// Add counts s and its period.
func (c *Counter) Add(s *sample.Sample) {
	c.samples.Add(1)
	c.cpuNs.Add(s.PeriodNs)
}

// Close does nothing.
func (c *Counter) Close() error { return nil }

// Samples is how many samples were recorded.
func (c *Counter) Samples() uint64 { return c.samples.Load() }

// SampledCPU is the CPU time the samples recorded weigh: the sum of their
// periods.
func (c *Counter) SampledCPU() time.Duration { return time.Duration(c.cpuNs.Load()) }
