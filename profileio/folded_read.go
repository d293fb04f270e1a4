package profileio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// Frame-name suffixes FlameGraph's stackcollapse-perf.pl writes with --all
// (--kernel, --jit, --inline), and FoldedBuilder with AnnotateKinds.
const (
	kernelSuffix = "_[k]"
	jitSuffix    = "_[j]"
	inlineSuffix = "_[i]"
	pythonSuffix = "_[p]"
)

// FoldedOptions says how to read folded stacks.
type FoldedOptions struct {
	// FirstFrameIsComm takes each line's first (root-most) frame as the
	// samples' command name rather than as a stack frame. heatscope's
	// FoldedBuilder and FlameGraph's stackcollapse-perf.pl (by default)
	// write the command first; most other tools (stackcollapse-go,
	// async-profiler's collapsed output, pprof's -folded) do not, so it is
	// off by default and Comm stays empty.
	FirstFrameIsComm bool
}

// ReadFolded reads Brendan Gregg's folded (collapsed) stacks,
// "root;...;leaf count" per line, with every frame a stack frame. It is
// FoldedOptions{}.Read; see there.
func ReadFolded(r io.Reader, start time.Time, span time.Duration, fn func(*sample.Sample) error) error {
	return FoldedOptions{}.Read(r, start, span, fn)
}

// Read reads folded stacks, "frame1;frame2;...;leaf count" per line, root
// first, and calls fn once per sample: a line with count n gives n samples.
// The file may be gzipped; blank lines are skipped; a line must end in a
// positive integer count or the read fails with its line number.
//
// Folded stacks carry no times, so the samples of the whole file are spread
// evenly over [start, start+span) in file order: sample i of N is at
// start + i*span/N. That needs N first, so Read keeps the file's stacks
// and counts (folded files are aggregated and small) before calling fn;
// fn may keep each sample, whose Stack is its own.
//
// Frames are KindUser with no module, except: a "_[k]" suffix (removed)
// marks a kernel frame, given module "[kernel.kallsyms]"; "_[j]" a JIT
// frame, module "[jit]"; "_[p]" a Python frame, whose name
// "qualname (file)" gives its Function and Module (a name without the
// file is its Function alone); "_[i]" (an inlined frame) is removed; a name in
// brackets such as "[unknown]" or "[libc.so.6+0x1f00]" is KindUnknown.
// Empty frames ("a;;b") are dropped. Only names survive a folded file:
// pid, tid, CPU, addresses and build ids are zero.
func (o FoldedOptions) Read(r io.Reader, start time.Time, span time.Duration, fn func(*sample.Sample) error) error {
	base := start.UnixNano()
	if span < 0 || !time.Unix(0, base).Equal(start) || base > math.MaxInt64-int64(span) {
		return fmt.Errorf("folded stacks: time range %v + %v cannot be expressed in Unix nanoseconds", start, span)
	}
	in, err := openInput(r)
	if err != nil {
		return fmt.Errorf("folded stacks: %w", err)
	}
	stacks, err := readFoldedLines(&lineReader{r: in})
	if err != nil {
		return fmt.Errorf("folded stacks: %w", err)
	}
	if err := stacks.emit(o.FirstFrameIsComm, base, uint64(span), fn); err != nil {
		return fmt.Errorf("folded stacks: %w", err)
	}
	return nil
}

// foldedFile is a folded file in compact form: every line's stack text one
// after the other in text, and each line's end offset and count.
type foldedFile struct {
	text  []byte
	lines []foldedLine
	total uint64 // the sum of counts
}

type foldedLine struct {
	end   int
	count uint64
}

func readFoldedLines(lines *lineReader) (*foldedFile, error) {
	f := &foldedFile{}
	for {
		line, err := lines.next()
		if errors.Is(err, io.EOF) {
			return f, nil
		}
		if err != nil {
			return nil, err
		}
		line = bytes.TrimRight(line, " \t")
		if len(line) == 0 {
			continue
		}
		sp := bytes.LastIndexAny(line, " \t")
		if sp < 0 {
			return nil, fmt.Errorf("line %d: no sample count after the stack: %q", lines.n, clip(line))
		}
		count, ok := parsePositive(line[sp+1:])
		if !ok {
			return nil, fmt.Errorf("line %d: sample count %q is not a positive integer", lines.n, clip(line[sp+1:]))
		}
		if count > math.MaxInt64-f.total {
			return nil, fmt.Errorf("line %d: sample counts add up to more than %d", lines.n, int64(math.MaxInt64))
		}
		f.total += count
		f.text = append(f.text, bytes.TrimRight(line[:sp], " \t")...)
		f.lines = append(f.lines, foldedLine{end: len(f.text), count: count})
	}
}

// parsePositive parses a decimal integer above zero.
func parsePositive(b []byte) (uint64, bool) {
	n, ok := parseDecimal(b, 19)
	return n, ok && n > 0
}

// emit calls fn for every sample, spread over span nanoseconds from base.
func (f *foldedFile) emit(firstIsComm bool, base int64, span uint64, fn func(*sample.Sample) error) error {
	names := interner{}
	var frames []sample.Frame
	var i uint64
	from := 0
	for _, l := range f.lines {
		var comm string
		comm, frames = parseFoldedStack(f.text[from:l.end], firstIsComm, names, frames[:0])
		from = l.end
		for range l.count {
			hi, lo := bits.Mul64(span, i)
			offset, _ := bits.Div64(hi, lo, f.total) // i < total, so it fits
			s := &sample.Sample{Time: base + int64(offset), Comm: comm}
			if len(frames) > 0 {
				s.Stack = make([]sample.Frame, len(frames))
				copy(s.Stack, frames)
			}
			if err := fn(s); err != nil {
				return err
			}
			i++
		}
	}
	return nil
}

// parseFoldedStack splits "comm;root;...;leaf" into the command (when
// firstIsComm) and frames appended leaf first.
func parseFoldedStack(text []byte, firstIsComm bool, names interner, frames []sample.Frame) (string, []sample.Frame) {
	var comm string
	if firstIsComm {
		first := text
		text = nil
		if i := bytes.IndexByte(first, ';'); i >= 0 {
			first, text = first[:i], first[i+1:]
		}
		comm = names.get(first)
	}
	for len(text) > 0 {
		i := bytes.LastIndexByte(text, ';')
		if name := text[i+1:]; len(name) > 0 {
			frames = append(frames, foldedFrame(name, names))
		}
		if i < 0 {
			break
		}
		text = text[:i]
	}
	return comm, frames
}

// foldedFrame makes a frame of a folded name, reading its kind suffix. A
// name that is nothing but a suffix is kept whole.
func foldedFrame(name []byte, names interner) sample.Frame {
	f := sample.Frame{Kind: sample.KindUser}
	switch {
	case len(name) <= len(kernelSuffix): // all suffixes are this long
	case bytes.HasSuffix(name, []byte(kernelSuffix)):
		name = name[:len(name)-len(kernelSuffix)]
		f.Module, f.Kind = sample.KernelModule, sample.KindKernel
	case bytes.HasSuffix(name, []byte(jitSuffix)):
		name = name[:len(name)-len(jitSuffix)]
		f.Module, f.Kind = jitModule, sample.KindJIT
	case bytes.HasSuffix(name, []byte(inlineSuffix)):
		name = name[:len(name)-len(inlineSuffix)]
	case bytes.HasSuffix(name, []byte(pythonSuffix)):
		name = name[:len(name)-len(pythonSuffix)]
		f.Kind = sample.KindPython
		if i := bytes.LastIndex(name, []byte(" (")); i > 0 && name[len(name)-1] == ')' && i+3 < len(name) {
			f.Module = names.get(name[i+2 : len(name)-1])
			name = name[:i]
		}
		f.Function = names.get(name)
		return f
	}
	f.Function = names.get(name)
	if f.Kind == sample.KindUser && isUnresolvedName(f.Function) {
		f.Kind = sample.KindUnknown
	}
	return f
}
