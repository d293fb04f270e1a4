package profileio

import (
	"bufio"
	"fmt"
	"io"
	"strconv"

	"github.com/heatscope/heatscope/sample"
)

// defaultPeriodNs is the period PerfScriptWriter writes unless told
// otherwise: heatscope's default 99 Hz.
var defaultPeriodNs = sample.PeriodOf(99)

// PerfScriptWriter writes samples as `perf script` text that ReadPerfScript,
// FlameScope and FlameGraph's stackcollapse-perf.pl read. Each sample is an
// event line, "comm pid/tid [cpu] seconds.micros: period cpu-clock:", one
// line per frame, leaf first, "\t<hex address> <function> (<module>)", and
// a blank line. A Python frame is "\t0 py::<qualname>:<file> (<file>)":
// the symbol perf script shows for CPython's own perf map entries (python
// -X perf), which keeps two functions of one qualified name apart in
// tools that read symbols alone (stackcollapse-perf.pl, FlameScope), and
// its file as module; its lines are left out, as perf leaves them out.
//
// Reading the output back with ReadPerfScript gives the same samples with
// their times truncated to the microsecond, except for what the format
// cannot carry: build ids and cgroup ids are dropped, the command is
// trimmed of surrounding spaces and control characters become spaces, an
// empty function or module is written "[unknown]", a function name ending
// in "+0x<hex>" loses it (it reads as an instruction offset), Python
// frames lose their lines, and frame kinds are
// inferred again from the module and address (which gives back the kinds
// heatscope's symbolizer assigns) or, for Python frames, the symbol.
type PerfScriptWriter struct {
	w        *bufio.Writer
	periodNs int64
	buf      []byte
}

// NewPerfScriptWriter returns a writer to w. It buffers: call Flush after
// the last Add.
func NewPerfScriptWriter(w io.Writer) *PerfScriptWriter {
	return &PerfScriptWriter{w: bufio.NewWriterSize(w, 64<<10), periodNs: defaultPeriodNs}
}

// SetPeriod sets the sampling period, in nanoseconds, written on every
// event line (perf script's period field); the default is sample.PeriodOf(99).
func (pw *PerfScriptWriter) SetPeriod(ns int64) { pw.periodNs = ns }

// Add writes one sample. Times before the Unix epoch (negative) cannot be
// written, as perf script's timestamps are unsigned.
func (pw *PerfScriptWriter) Add(s *sample.Sample) error {
	if s.Time < 0 {
		return fmt.Errorf("write perf script: negative sample time %d", s.Time)
	}
	b := pw.buf[:0]
	if len(s.Comm) > 0 && s.Comm[0] == '#' {
		// A line starting with '#' would be read as a comment.
		b = append(b, ' ')
	}
	b = appendSanitized(b, s.Comm)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(s.PID), 10)
	b = append(b, '/')
	b = strconv.AppendUint(b, uint64(s.TID), 10)
	b = append(b, " ["...)
	b = appendPadded(b, strconv.FormatUint(uint64(s.CPU), 10), '0', 3)
	b = append(b, "] "...)
	b = strconv.AppendInt(b, s.Time/1e9, 10)
	b = append(b, '.')
	b = appendPadded(b, strconv.FormatInt(s.Time%1e9/1e3, 10), '0', 6)
	b = append(b, ": "...)
	b = strconv.AppendInt(b, pw.periodNs, 10)
	b = append(b, " cpu-clock:\n"...)
	for i := range s.Stack {
		f := &s.Stack[i]
		if f.Kind == sample.KindPython && f.Function != "" && f.Module != "" {
			b = append(b, "\t               0 "+PythonSymbolPrefix...)
			b = appendSanitized(b, f.Function)
			b = append(b, ':')
			b = appendSanitized(b, f.Module)
			b = append(b, " ("...)
			b = appendSanitized(b, f.Module)
			b = append(b, ")\n"...)
			continue
		}
		b = append(b, '\t')
		b = appendPadded(b, strconv.FormatUint(f.Address, 16), ' ', 16)
		b = append(b, ' ')
		b = appendOrUnknown(b, f.Function)
		b = append(b, " ("...)
		b = appendOrUnknown(b, f.Module)
		b = append(b, ")\n"...)
	}
	b = append(b, '\n')
	pw.buf = b
	if _, err := pw.w.Write(b); err != nil {
		return fmt.Errorf("write perf script: %w", err)
	}
	return nil
}

// Flush writes any buffered data to the underlying writer.
func (pw *PerfScriptWriter) Flush() error {
	if err := pw.w.Flush(); err != nil {
		return fmt.Errorf("write perf script: %w", err)
	}
	return nil
}

// appendPadded appends s right-aligned in width columns filled with pad.
func appendPadded(b []byte, s string, pad byte, width int) []byte {
	for n := len(s); n < width; n++ {
		b = append(b, pad)
	}
	return append(b, s...)
}

// appendOrUnknown appends a name, or "[unknown]" for an empty one.
func appendOrUnknown(b []byte, name string) []byte {
	if name == "" {
		return append(b, "[unknown]"...)
	}
	return appendSanitized(b, name)
}

// appendSanitized appends s with control characters (line breaks above
// all) replaced by spaces, so a name cannot split a line.
func appendSanitized(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' || c == 0x7f {
			c = ' '
		}
		b = append(b, c)
	}
	return b
}
