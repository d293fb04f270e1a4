package profileio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// PerfScriptHeader is what the header `perf script --header` prints says
// about a capture: when it was taken, and at what rate.
type PerfScriptHeader struct {
	// CapturedOn is the "captured on" line: the time perf.data was last
	// written, when perf record finished (perf prints the file's mtime), to
	// the second, read in loc. Zero when the header has none.
	CapturedOn time.Time
	// FirstSample and LastSample are the "time of first sample" and "time
	// of last sample" lines, in ns of perf's clock (as the samples' times);
	// HasSampleTimes is false when the header has neither.
	FirstSample, LastSample int64
	HasSampleTimes          bool
	// PeriodNs is the sampling period the first event line gives, in ns of
	// CPU time: 1e9/sample_freq when sampling by frequency (freq = 1), or
	// sample_period for cpu-clock and task-clock events, whose periods are
	// ns. 0 when the header does not tell.
	PeriodNs int64
}

// ReadPerfScriptHeader reads the comment lines at the start of a perf
// script (plain or gzipped), stopping at the first sample, and returns
// what they say. A file without a header gives a zero PerfScriptHeader.
// The "captured on" time is local time of the machine perf ran on, which
// the file does not name: it is read in loc.
func ReadPerfScriptHeader(r io.Reader, loc *time.Location) (PerfScriptHeader, error) {
	var h PerfScriptHeader
	in, err := openInput(r)
	if err != nil {
		return h, fmt.Errorf("perf script header: %w", err)
	}
	lines := lineReader{r: in}
	event := false
	for {
		line, err := lines.next()
		if errors.Is(err, io.EOF) {
			return h, nil
		}
		if err != nil {
			return h, fmt.Errorf("perf script header: %w", err)
		}
		t := bytes.TrimSpace(line)
		if len(t) == 0 {
			continue
		}
		if t[0] != '#' {
			return h, nil
		}
		key, value, ok := bytes.Cut(t[1:], []byte(":"))
		if !ok {
			continue
		}
		key, value = bytes.TrimSpace(key), bytes.TrimSpace(value)
		switch string(key) {
		case "captured on":
			if c, err := time.ParseInLocation("Mon Jan _2 15:04:05 2006", string(value), loc); err == nil {
				h.CapturedOn = c
			}
		case "time of first sample":
			if ns, ok := parseTimestamp(value); ok && allTimestamp(value) {
				h.FirstSample, h.HasSampleTimes = ns, true
			}
		case "time of last sample":
			if ns, ok := parseTimestamp(value); ok && allTimestamp(value) {
				h.LastSample, h.HasSampleTimes = ns, true
			}
		case "event":
			if !event { // the first event is the one sampled; others are perf's own (dummy)
				event = true
				h.PeriodNs = eventPeriod(value)
			}
		}
	}
}

func allTimestamp(b []byte) bool {
	for _, c := range b {
		if c != '.' && !isDigit(c) {
			return false
		}
	}
	return true
}

// eventPeriod reads the sampling period from an "event :" header line:
// "name = cpu-clock:ppp, , id = { 61, 62 }, type = 1, size = 128,
// { sample_period, sample_freq } = 99, ..., freq = 1, ...".
func eventPeriod(line []byte) int64 {
	fields := map[string]string{}
	for len(line) > 0 {
		var field []byte
		if bytes.HasPrefix(bytes.TrimSpace(line), []byte("{")) {
			// "{ a, b } = v": a group of names sharing a value.
			end := bytes.IndexByte(line, '}')
			if end < 0 {
				break
			}
			next := bytes.IndexByte(line[end:], ',')
			if next < 0 {
				field, line = line, nil
			} else {
				field, line = line[:end+next], line[end+next+1:]
			}
		} else {
			var ok bool
			field, line, ok = bytes.Cut(line, []byte(","))
			if !ok {
				line = nil
			}
		}
		k, v, ok := bytes.Cut(field, []byte("="))
		if !ok {
			continue
		}
		fields[string(bytes.Trim(k, " {}"))] = string(bytes.TrimSpace(v))
	}
	n := fields["sample_period, sample_freq"]
	if n == "" {
		n = fields["sample_freq"]
		if fields["freq"] != "1" {
			n = fields["sample_period"]
		}
	}
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil || v <= 0 {
		return 0
	}
	if fields["freq"] == "1" {
		return sample.PeriodOf(v)
	}
	name := fields["name"]
	if bytes.HasPrefix([]byte(name), []byte("cpu-clock")) || bytes.HasPrefix([]byte(name), []byte("task-clock")) {
		return v
	}
	return 0
}

// spacingSamples is how many of a perf script's first samples
// PerfScriptPeriod reads when the header gives no period.
const spacingSamples = 10_000

// PerfScriptPeriod is the sampling period of the perf script r, whose
// header is h: the header's, or, when it gives none, the one its first
// samples' spacing says (PeriodFromSpacing), read from r's start. 0 when
// neither tells.
func PerfScriptPeriod(r io.ReadSeeker, h PerfScriptHeader) (int64, error) {
	if h.PeriodNs != 0 {
		return h.PeriodNs, nil
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("perf script period: %w", err)
	}
	return PeriodFromSpacing(r, spacingSamples)
}

// PeriodFromSpacing estimates the sampling period of a perf script from
// the spacing of its first n samples: the median gap between consecutive
// samples of one CPU (a busy CPU is sampled once a period). 0 when no CPU
// has two samples.
func PeriodFromSpacing(r io.Reader, n int) (int64, error) {
	last := map[uint32]int64{}
	var gaps []int64
	errEnough := errors.New("enough samples")
	err := ReadPerfScript(r, func(s *sample.Sample) error {
		if t, ok := last[s.CPU]; ok && s.Time > t {
			gaps = append(gaps, s.Time-t)
		}
		last[s.CPU] = s.Time
		if n--; n <= 0 {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return 0, err
	}
	if len(gaps) == 0 {
		return 0, nil
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2], nil
}

// WallClockShift is how far to move a capture's times (perf's clock, ns)
// to place it at wall time from its header: the last sample is put within
// half a second of "captured on" (when perf record finished writing, to
// the second), by a whole number of seconds, so that every sample keeps
// its offset within its second (ShiftBySeconds). ok is false when the
// header lacks "captured on" or the samples' times.
func (h PerfScriptHeader) WallClockShift() (shift int64, ok bool) {
	if h.CapturedOn.IsZero() || !h.HasSampleTimes {
		return 0, false
	}
	return ShiftBySeconds(h.CapturedOn.UnixNano() - h.LastSample), true
}

// ShiftBySeconds rounds a shift of a capture's times (ns) to the nearest
// whole second. A perf capture's clock has its own phase: FlameScope's
// heatmap of a file has a column per second of that clock and a row per
// slice of the second, so only a whole-second shift leaves every sample
// in its row, and the heatmap of an import FlameScope's, cell for cell.
// Placement from a header is good to a second or two anyway.
func ShiftBySeconds(ns int64) int64 {
	const second = int64(time.Second)
	q, r := ns/second, ns%second
	switch {
	case r >= second/2:
		q++
	case r < -second/2:
		q--
	}
	return q * second
}
