package pysymbol

import (
	"testing"

	"github.com/heatscope/heatscope/internal/pyfixture"
)

// The cost of naming one Python frame (its code object and line), in a
// running python3.11 busy loop: cold (the code object read from the
// process: its header, two str objects and the location table) and cached
// (a cache hit and a walk of the location table).
//
//	go test ./pysymbol/ -run '^$' -bench Frame -count 6
func BenchmarkFrame(b *testing.B) {
	proc := pyfixture.Start(b, pyfixture.Interpreters[0], "busy.py")
	p := pythonProcess(b, proc.PID)
	in := proc.Lines[0]
	frame := func(b *testing.B, r *Resolver) {
		c, err := r.Code(p, in.Code)
		if err != nil {
			b.Fatal(err)
		}
		if line, ok := c.Line(uint32(in.Lasti)); !ok || line != in.Line {
			b.Fatalf("line %d, want %d", line, in.Line)
		}
	}
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			frame(b, New(0))
		}
	})
	b.Run("cached", func(b *testing.B) {
		r := New(0)
		frame(b, r)
		b.ReportAllocs()
		for b.Loop() {
			frame(b, r)
		}
	})
}
