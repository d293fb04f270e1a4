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
// names would split frames, so they are written as colons.
type FoldedBuilder struct {
	counts   map[string]int64
	line     strings.Builder
	annotate bool
	node     bool
}

// NodeFrames makes Add start each line with the sample's node as a frame
// of its own, "node;comm;root;...;leaf count", so that the stacks of a
// fleet stay apart and a flame graph's first level is the node. It is off
// by default.
func (b *FoldedBuilder) NodeFrames(on bool) { b.node = on }

// AnnotateKinds makes Add mark kernel frames with a "_[k]" suffix and JIT
// frames with "_[j]", as FlameGraph's stackcollapse-perf.pl --all does, so
// flamegraph.pl colours them and ReadFolded restores their kinds. It is
// off by default.
func (b *FoldedBuilder) AnnotateKinds(on bool) { b.annotate = on }

// NewFoldedBuilder returns an empty builder.
func NewFoldedBuilder() *FoldedBuilder {
	return &FoldedBuilder{counts: map[string]int64{}}
}

var foldedEscaper = strings.NewReplacer(";", ":", "\n", " ")

// Add adds one sample.
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
		b.line.WriteString(foldedEscaper.Replace(f.Function))
		if b.annotate {
			switch f.Kind {
			case sample.KindKernel:
				b.line.WriteString(kernelSuffix)
			case sample.KindJIT:
				b.line.WriteString(jitSuffix)
			}
		}
	}
	b.counts[b.line.String()]++
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
	for _, s := range stacks {
		m, err := fmt.Fprintf(bw, "%s %d\n", s, b.counts[s])
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
