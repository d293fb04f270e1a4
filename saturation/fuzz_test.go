package saturation

import (
	"encoding/binary"
	"strconv"
	"testing"
	"time"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/sample"
)

// FuzzDetector feeds arbitrary sample streams (times that jump, go back,
// repeat; any CPU, thread and period) to a detector: it must not panic,
// and every event it emits must be valid, last at least the minimum and
// give shares between 0 and 100%.
func FuzzDetector(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{10, 0, 0, 1, 1, 10, 0, 0, 1, 1, 10, 0, 1, 0, 1})
	steady := make([]byte, 0, 5*160)
	for i := range 160 {
		// 3 ms apart, thread 1 on CPU 0, CPUs 1 to 3 idle: one event
		tid := byte(0)
		if i%4 == 0 {
			tid = 1
		}
		steady = append(steady, 3, 0, byte(i%4), tid, 1)
	}
	f.Add(steady)
	periods := []int64{int64(time.Millisecond), int64(time.Second) / 99, int64(time.Second) / 49, int64(100 * time.Millisecond), 0}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []events.Event
		d, err := New(Config{CPUBusy: 0.9, NodeBusy: 0.5, MinDuration: 200 * time.Millisecond, MaxSpan: time.Second,
			Emit: func(e events.Event) { got = append(got, e) }})
		if err != nil {
			t.Fatal(err)
		}
		now := base
		for n := 0; len(data) >= 5 && n < 20_000; n++ {
			// int16 step in ms (negative: back in time), CPU, thread, period
			step := int64(int16(binary.LittleEndian.Uint16(data))) * int64(time.Millisecond)
			cpu, tid, p := data[2], data[3]%4, periods[int(data[4])%len(periods)]
			data = data[5:]
			now += step
			s := sample.Sample{Time: now, CPU: uint32(cpu % 8), TID: uint32(tid), PID: uint32(tid), Comm: "c" + strconv.Itoa(int(tid)),
				Stack: frames(uint32(tid), int(cpu))}
			if cpu >= 250 {
				s.CPU = 1 << 20
			}
			s.PeriodNs = p
			d.Add(&s)
		}
		d.Flush()
		if d.Stats().Events != uint64(len(got)) {
			t.Fatalf("stats say %d events, %d emitted", d.Stats().Events, len(got))
		}
		for _, e := range got {
			if err := e.Validate(); err != nil {
				t.Fatalf("invalid event %+v: %v", e, err)
			}
			dur, err1 := strconv.ParseFloat(e.Labels["duration_seconds"], 64)
			busy, err2 := strconv.ParseFloat(e.Labels["cpu_busy_percent"], 64)
			node, err3 := strconv.ParseFloat(e.Labels["node_busy_percent"], 64)
			other, err4 := strconv.ParseFloat(e.Labels["other_cpus_busy_percent"], 64)
			if e.Labels["other_cpus_busy_percent"] == "" {
				other, err4 = 0, nil // a node of one CPU has no other
			}
			if err1 != nil || err2 != nil || err3 != nil || err4 != nil || dur < 0.2 || busy < 0 || busy > 100 || node < 0 || node > 100 ||
				other < 0 || other > 100 {
				t.Fatalf("event %+v", e)
			}
		}
	})
}
