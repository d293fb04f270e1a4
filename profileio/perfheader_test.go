package profileio

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// TestReadPerfScriptHeader reads the header of a real capture
// (testdata/perf-record-header.perf: perf record -F 99 -g of a shell
// loop, then perf script --header, perf 6.1).
func TestReadPerfScriptHeader(t *testing.T) {
	f, err := os.Open("testdata/perf-record-header.perf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := ReadPerfScriptHeader(f, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 11, 24, 21, 41, 23, 0, time.UTC)
	if !h.CapturedOn.Equal(want) || !h.HasSampleTimes || h.FirstSample != 3269_555182000 || h.LastSample != 3272_521358000 ||
		h.PeriodNs != int64(time.Second)/99 {
		t.Fatalf("header %+v; want captured on %v, samples 3269.555182 to 3272.521358, period %d", h, want, int64(time.Second)/99)
	}
	// The header's sample times are the samples'.
	f.Seek(0, 0)
	var first, last int64
	n := 0
	if err := ReadPerfScript(f, func(s *sample.Sample) error {
		if n == 0 {
			first = s.Time
		}
		last, n = s.Time, n+1
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 20 || first != h.FirstSample || last != h.LastSample {
		t.Fatalf("%d samples from %d to %d; the header says %d to %d", n, first, last, h.FirstSample, h.LastSample)
	}
}

func TestEventPeriod(t *testing.T) {
	for _, tc := range []struct {
		line string
		want int64
	}{
		{"name = cpu-clock:ppp, , id = { 61, 62 }, type = 1, size = 128, { sample_period, sample_freq } = 99, sample_type = IP|TID, freq = 1, precise_ip = 3", 10101010},
		{"name = cycles, , id = { 7 }, type = 0, size = 136, { sample_period, sample_freq } = 4000, sample_type = IP|TID|TIME|PERIOD, read_format = ID, freq = 1", 250000},
		{"name = cpu-clock, , id = { 7 }, type = 1, size = 136, { sample_period, sample_freq } = 1000000, sample_type = IP|TID|TIME", 1000000},
		{"name = cycles, , id = { 7 }, type = 0, size = 136, { sample_period, sample_freq } = 100003, sample_type = IP", 0}, // cycles, not time
		{"name = cpu-clock, sample_freq = 49, freq = 1", 20408163},
		{"garbage { without = an end", 0},
	} {
		if got := eventPeriod([]byte(tc.line)); got != tc.want {
			t.Errorf("eventPeriod(%q) = %d, want %d", tc.line, got, tc.want)
		}
	}
}

// TestPeriodFromSpacing estimates the period of a header-less script from
// the gaps between one CPU's samples.
func TestPeriodFromSpacing(t *testing.T) {
	var b strings.Builder
	for i := range 200 { // two CPUs in turn, 5 ms apart
		ns := int64(1000e9) + int64(i)*5e6
		fmt.Fprintf(&b, "java 1/1 [%03d] %d.%06d: cpu-clock:\n\t0 f (/x)\n\n", i%2, ns/1e9, ns%1e9/1e3)
	}
	script := b.String()
	got, err := PeriodFromSpacing(strings.NewReader(script), 10_000)
	if err != nil || got != 10e6 {
		t.Fatalf("period %d, %v; want 10 ms (each CPU sampled every 10 ms)", got, err)
	}
	if got, err := PeriodFromSpacing(strings.NewReader("java 1/1 [000] 5.000000: cpu-clock:\n\t0 f (/x)\n"), 10); err != nil || got != 0 {
		t.Fatalf("one sample: %d, %v; want 0", got, err)
	}
}

// TestPerfScriptPeriod: a header's period wins; without one, the samples'
// spacing says it, read from the file's start whatever was read before.
func TestPerfScriptPeriod(t *testing.T) {
	script := "# ========\n# event : name = cpu-clock, { sample_period, sample_freq } = 99, freq = 1\n# ========\n#\n"
	for i := range 20 { // one CPU every 4 ms
		ns := int64(7e9) + int64(i)*4e6
		script += fmt.Sprintf("java 1/1 [000] %d.%06d: cpu-clock:\n\t0 f (/x)\n\n", ns/1e9, ns%1e9/1e3)
	}
	r := strings.NewReader(script)
	h, err := ReadPerfScriptHeader(r, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := PerfScriptPeriod(r, h); err != nil || got != sample.PeriodOf(99) {
		t.Errorf("with the header's period: %d, %v; want %d", got, err, sample.PeriodOf(99))
	}
	h.PeriodNs = 0
	if got, err := PerfScriptPeriod(r, h); err != nil || got != 4e6 {
		t.Errorf("from the spacing: %d, %v; want 4 ms", got, err)
	}
}

func FuzzReadPerfScriptHeader(f *testing.F) {
	if b, err := os.ReadFile("testdata/perf-record-header.perf"); err == nil {
		f.Add(string(b[:min(len(b), 3000)]))
	}
	f.Add("# captured on : Mon Jan  2 15:04:05 2006\n# event : name = x, { sample_period, sample_freq } = 0, freq = 1\n")
	f.Fuzz(func(t *testing.T, text string) {
		h, err := ReadPerfScriptHeader(strings.NewReader(text), time.UTC)
		if err == nil && h.PeriodNs < 0 {
			t.Fatalf("negative period %d", h.PeriodNs)
		}
	})
}

// TestWallClockShift: a header places a capture by whole seconds, its last
// sample within half a second of "captured on", each sample keeping its
// offset within its second; without "captured on" or the sample times it
// does not place it.
func TestWallClockShift(t *testing.T) {
	captured := time.Date(2026, 11, 24, 21, 41, 23, 0, time.UTC)
	for _, c := range []struct {
		last int64 // perf's clock, ns
		want int64 // the last sample's place, ns after captured
	}{
		{3272_521358000, -478_642000},
		{3272_499999000, 499_999000},
		{3272_500000000, 500_000000},
		{3272_000000000, 0},
		{3272_999999000, -1000},
	} {
		shift, ok := PerfScriptHeader{CapturedOn: captured, HasSampleTimes: true, LastSample: c.last}.WallClockShift()
		if !ok || shift%int64(time.Second) != 0 || c.last+shift-captured.UnixNano() != c.want {
			t.Errorf("last sample %d: shift %d (%v); want a whole number of seconds putting it %d ns after captured on", c.last, shift, ok, c.want)
		}
	}
	if _, ok := (PerfScriptHeader{CapturedOn: captured}).WallClockShift(); ok {
		t.Error("placed without the samples' times")
	}
	if _, ok := (PerfScriptHeader{HasSampleTimes: true, LastSample: 5}).WallClockShift(); ok {
		t.Error("placed without captured on")
	}
	for _, c := range [][2]int64{{1_795_237_380_637_000_000, 1_795_237_381e9}, {1_795_237_380_499_999_999, 1_795_237_380e9},
		{-1_400_000_000, -1e9}, {-1_500_000_000, -1e9}, {-1_600_000_000, -2e9}, {0, 0}} {
		if got := ShiftBySeconds(c[0]); got != c[1] {
			t.Errorf("ShiftBySeconds(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}
