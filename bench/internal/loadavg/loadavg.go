// Package loadavg reads the machine's load average, which the benchmarks
// print beside their figures: the machine is shared, and figures mean
// little without it.
package loadavg

import (
	"os"
	"strings"
)

// Line is /proc/loadavg's line: the load averages over 1, 5 and 15
// minutes, the runnable and all tasks, and the newest pid; "unknown"
// with the reason when it cannot be read.
func Line() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}

// OneMinute is the load average over the last minute, the first figure
// of Line; "?" when /proc/loadavg cannot be read.
func OneMinute() string {
	f := strings.Fields(Line())
	if len(f) == 0 || f[0] == "unknown" {
		return "?"
	}
	return f[0]
}
