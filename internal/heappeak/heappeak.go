// Package heappeak measures, for tests, the most Go heap a piece of work
// takes at once: the peak of the heap's live objects while it runs, above
// the heap before it.
package heappeak

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"sync"
	"time"
)

// During samples the Go heap's object bytes every millisecond while fn
// runs and returns the highest reading above the one before it. The
// collector runs at GOGC 10 meanwhile, so that the readings follow the
// live heap, not the garbage the default GOGC lets pile up. With
// $HEATSCOPE_MERGE_HEAP set, a heap profile is written there at each new
// peak (2 MB or more above the last), to be read with go tool pprof.
func During(fn func()) (peak uint64) {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	read := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	profile := os.Getenv("HEATSCOPE_MERGE_HEAP")
	base := read()
	profiled := base
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			v := read()
			peak = max(peak, v)
			if profile != "" && v > profiled+(2<<20) {
				profiled = v
				if f, err := os.Create(profile); err == nil {
					pprof.Lookup("heap").WriteTo(f, 0)
					f.Close()
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	fn()
	close(stop)
	wg.Wait()
	peak = max(peak, read())
	if peak < base {
		return 0
	}
	return peak - base
}
