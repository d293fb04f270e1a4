// Package pipeline carries a recording's samples from the recorder to its
// sinks, one at a time and in the order they are read: the store, CPU
// saturation detection, the run's own pprof or folded output and the
// metrics are each a Sink. A new consumer of a recording is a new Sink
// given to New; cmd/heatscope chooses the sinks from record's flags.
//
// Every sample weighs its own period (sample.Sample.PeriodNs, stamped by
// the recorder): a sink reads the weight from the sample, never from the
// sampler.
package pipeline

import (
	"context"
	"errors"

	"github.com/heatscope/heatscope/sample"
)

// Sink takes a recording's samples, one at a time, on the recorder's
// goroutine.
type Sink interface {
	// Add takes one sample, which weighs its own period (s.PeriodNs).
	// s is reused after Add returns: a sink copies what it keeps, and
	// never modifies s.Stack, which is shared with other samples.
	Add(s *sample.Sample)
	// Close finishes the sink's work once the recording has stopped.
	Close() error
}

// Source takes a recording's samples and hands them to a function until
// ctx is done: recorder.Recorder.
type Source interface {
	Run(ctx context.Context, sink func(*sample.Sample)) error
}

// Pipeline hands each sample of a source to its sinks, in order.
type Pipeline struct {
	sinks []Sink
}

// New returns a pipeline to the sinks, which get each sample in the order
// given.
func New(sinks ...Sink) *Pipeline { return &Pipeline{sinks: sinks} }

// Run records from src until ctx is done, then closes every sink, in
// order. Its error joins the source's and the sinks'.
func (p *Pipeline) Run(ctx context.Context, src Source) error {
	err := src.Run(ctx, p.add)
	for _, k := range p.sinks {
		err = errors.Join(err, k.Close())
	}
	return err
}

func (p *Pipeline) add(s *sample.Sample) {
	for _, k := range p.sinks {
		k.Add(s)
	}
}
