package profileio

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/heatscope/heatscope/sample"
)

// FoldedBuilder aggregates samples into Brendan Gregg's folded stack format:
// one line per distinct stack, "comm;root;...;leaf count". Semicolons inside
// names would split frames, so they are written as colons. A Python frame
// is named "qualname (file)" (sample.Frame.Name, py-spy's style without
// the line): its lines add up, as a native function's addresses do.
//
// A count is a number of samples taken at one rate. When the samples were
// taken at different periods (SetPeriod: the overhead guard changed the
// rate), every sample is weighed by its own period and the counts are
// samples at the shortest period, rounded: widths stay proportional to CPU
// time.
type FoldedBuilder struct {
	counts   map[string]int64
	cpuNs    map[string]int64
	line     strings.Builder
	annotate bool
	node     bool
	periodNs int64
	// minPeriod and maxPeriod are the periods seen, 0 before any.
	minPeriod, maxPeriod int64
}

// NodeFrames makes Add start each line with the sample's node as a frame
// of its own, "node;comm;root;...;leaf count", so that the stacks of a
// fleet stay apart and a flame graph's first level is the node. It is off
// by default.
func (b *FoldedBuilder) NodeFrames(on bool) { b.node = on }

// AnnotateKinds makes Add mark kernel frames with a "_[k]" suffix and JIT
// frames with "_[j]", as FlameGraph's stackcollapse-perf.pl --all does, so
// flamegraph.pl colours them and ReadFolded restores their kinds, and
// Python frames with "_[p]" (heatscope's, in the same style). It is off
// by default.
func (b *FoldedBuilder) AnnotateKinds(on bool) { b.annotate = on }

// NewFoldedBuilder returns an empty builder.
func NewFoldedBuilder() *FoldedBuilder {
	return &FoldedBuilder{counts: map[string]int64{}, cpuNs: map[string]int64{}, periodNs: 1}
}

// SetPeriod sets the sampling period, in nanoseconds of CPU time, of the
// samples added from now on that do not carry their own
// (sample.Sample.PeriodNs).
func (b *FoldedBuilder) SetPeriod(periodNs int64) { b.periodNs = max(periodNs, 1) }

// MixedPeriods returns the shortest and longest periods of the samples
// added, and whether they differ (the counts are then samples at the
// shortest).
func (b *FoldedBuilder) MixedPeriods() (shortest, longest int64, mixed bool) {
	return b.minPeriod, b.maxPeriod, b.minPeriod != b.maxPeriod
}

var foldedEscaper = strings.NewReplacer(";", ":", "\n", " ")

// Add adds one sample, weighing its own period (s.PeriodNs) when it
// carries one, else the builder's.
func (b *FoldedBuilder) Add(s *sample.Sample) {
	b.line.Reset()
	if b.node {
		b.line.WriteString(foldedEscaper.Replace(s.Node))
		b.line.WriteByte(';')
	}
	b.line.WriteString(foldedEscaper.Replace(s.Comm))
	for i := len(s.Stack) - 1; i >= 0; i-- {
		b.line.WriteByte(';')
		f := &s.Stack[i]
		b.line.WriteString(foldedEscaper.Replace(f.Name()))
		if b.annotate {
			switch f.Kind {
			case sample.KindKernel:
				b.line.WriteString(kernelSuffix)
			case sample.KindJIT:
				b.line.WriteString(jitSuffix)
			case sample.KindPython:
				b.line.WriteString(pythonSuffix)
			}
		}
	}
	key := b.line.String()
	b.counts[key]++
	period := b.periodNs
	if s.PeriodNs > 0 {
		period = s.PeriodNs
	}
	b.cpuNs[key] += period
	if b.minPeriod == 0 || period < b.minPeriod {
		b.minPeriod = period
	}
	b.maxPeriod = max(b.maxPeriod, period)
}

// WriteTo writes the stacks, sorted, to w.
func (b *FoldedBuilder) WriteTo(w io.Writer) (int64, error) {
	stacks := make([]string, 0, len(b.counts))
	for s := range b.counts {
		stacks = append(stacks, s)
	}
	slices.Sort(stacks)
	bw := bufio.NewWriter(w)
	var n int64
	_, _, mixed := b.MixedPeriods()
	for _, s := range stacks {
		c := b.counts[s]
		if mixed {
			c = max(1, (b.cpuNs[s]+b.minPeriod/2)/b.minPeriod)
		}
		m, err := fmt.Fprintf(bw, "%s %d\n", s, c)
		n += int64(m)
		if err != nil {
			return n, fmt.Errorf("write folded stacks: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("write folded stacks: %w", err)
	}
	return n, nil
}
