package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// peak is a new high of the agent's RSS and what held it: the mappings
// with the most resident memory at that moment.
type peak struct {
	at             time.Duration // since the recorder started
	rssMB          float64
	anonMB, fileMB float64
	top            []string // "MB name", the largest first
}

// watchPeaks reads the agent's RSS every second from the first minute on
// and, each time it passes its highest reading by more than a megabyte,
// reads /proc/PID/smaps to say which mappings held it: a peak seen only in
// VmHWM after the run cannot be explained. It returns the peaks when ctx
// is done.
func watchPeaks(ctx context.Context, pid int, started time.Time) []peak {
	var peaks []peak
	high := 0.0
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return peaks
		case <-t.C:
		}
		at := time.Since(started)
		if at < time.Minute {
			continue
		}
		rss, anon, file, err := rssOf(pid)
		if err != nil || rss <= high+1 {
			continue
		}
		high = rss
		top, err := topMappings(pid, 4)
		if err != nil {
			continue
		}
		peaks = append(peaks, peak{at: at, rssMB: rss, anonMB: anon, fileMB: file, top: top})
		log.Printf("t=%.0fs new RSS high %.1fMB (anon %.1f, file %.1f): %s", at.Seconds(), rss, anon, file, strings.Join(top, "; "))
	}
}

// rssOf reads the process's RSS and its anonymous and file-backed parts,
// in MB.
func rssOf(pid int) (rss, anon, file float64, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		for _, f := range []struct {
			prefix string
			mb     *float64
		}{{"VmRSS:", &rss}, {"RssAnon:", &anon}, {"RssFile:", &file}} {
			if v, ok := strings.CutPrefix(line, f.prefix); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				*f.mb = kb / 1024
			}
		}
	}
	return rss, anon, file, nil
}

// topMappings returns the n mappings of the process with the most resident
// memory, as "MB name" (anonymous ones named by their address range).
func topMappings(pid, n int) ([]string, error) {
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, err
	}
	type mapping struct {
		name  string
		rssKB float64
	}
	var all []mapping
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			name := fields[0]
			if len(fields) >= 6 {
				name = strings.Join(fields[5:], " ")
			}
			all = append(all, mapping{name: name})
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); ok && len(all) > 0 {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			all[len(all)-1].rssKB = kb
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b mapping) int { return int(b.rssKB - a.rssKB) })
	var top []string
	for _, m := range all[:min(n, len(all))] {
		top = append(top, fmt.Sprintf("%.1f MB %s", m.rssKB/1024, m.name))
	}
	return top, nil
}
