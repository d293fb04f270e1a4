package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// pidWatch tells when none of the --pid processes is left to sample:
// recording goes on (a pid may not come back, but the user should know it
// records nothing).
type pidWatch struct {
	pids  []uint32
	every time.Duration
	last  time.Time
	gone  bool // all gone at the last check
	log   *slog.Logger
}

// newPIDWatch warns at once about the pids that do not exist, and returns
// a watch whose check warns when the last listed process has gone.
func newPIDWatch(pids []uint32, every time.Duration, log *slog.Logger) *pidWatch {
	w := &pidWatch{pids: pids, every: every, log: log, last: time.Now()}
	var missing []uint32
	for _, p := range pids {
		if !processAlive(p) {
			missing = append(missing, p)
		}
	}
	switch {
	case len(missing) == len(pids):
		w.gone = true
		log.Warn("--pid: none of these processes exists: nothing will be recorded", "pids", fmt.Sprint(missing))
	case len(missing) > 0:
		log.Warn("--pid: no such process: nothing will be recorded from it", "pids", fmt.Sprint(missing))
	}
	return w
}

// check looks again when every has passed: it warns once when every listed
// process has gone, and says so when one is back (a pid reused).
func (w *pidWatch) check(now time.Time) {
	if now.Sub(w.last) < w.every {
		return
	}
	w.last = now
	gone := true
	for _, p := range w.pids {
		if processAlive(p) {
			gone = false
			break
		}
	}
	switch {
	case gone && !w.gone:
		w.log.Warn("--pid: every listed process has exited: nothing is being recorded", "pids", fmt.Sprint(w.pids))
	case !gone && w.gone:
		w.log.Info("--pid: a listed process exists again: recording it", "pids", fmt.Sprint(w.pids))
	}
	w.gone = gone
}

// processAlive reports whether pid is a process that can still run: it
// exists and is not a zombie.
func processAlive(pid uint32) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}
