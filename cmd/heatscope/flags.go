package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// parseDays parses a duration that may also be given in days ("7d").
func parseDays(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a duration like 7d or 36h", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration like 7d or 36h", s)
	}
	return d, nil
}

// parseSize parses a byte size: a number with an optional unit, decimal
// (KB, MB, GB, TB) or binary (KiB, MiB, GiB, TiB).
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, mult := strings.TrimSpace(s), 1.0
	for _, u := range units {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a size like 10GB or 512MiB", s)
	}
	return int64(v * mult), nil
}

// filterFlags registers the filter flags, named as the filter parameters.
func filterFlags(fs *flag.FlagSet) map[string]*string {
	help := map[string]string{
		"source":    "only these sources (comma-separated names)",
		"node":      "only these nodes (comma-separated names); ~REGEX for a regular expression",
		"label":     "only nodes with all these labels: key=value, comma-separated",
		"comm":      "only this command; ~REGEX for a regular expression",
		"pid":       "only these processes (comma-separated)",
		"tid":       "only these threads (comma-separated)",
		"cpu":       "only these CPUs, e.g. 0-3,8",
		"cgroup":    "only these cgroups: ids or cgroup v2 paths",
		"container": "only these containers: names or (short) ids, comma-separated",
		"pod":       "only these Kubernetes pods: names or UIDs, comma-separated",
		"namespace": "only pods in these Kubernetes namespaces (comma-separated)",
		"qos":       "only pods of these QoS classes: guaranteed, burstable, besteffort",
		"frame":     "only samples with a function matching this regular expression",
		"stack":     "frames to keep: all, kernel or user",
		"idle":      "CPU idle samples: exclude or include",
	}
	vals := map[string]*string{}
	for _, name := range query.FilterParams {
		vals[name] = fs.String(name, "", help[name])
	}
	return vals
}

func parseFilterFlags(vals map[string]*string) (store.Filter, error) {
	f, err := query.ParseFilter(func(name string) string { return *vals[name] })
	if err != nil {
		return f, usageError{fmt.Errorf("--%w", err)}
	}
	return f, nil
}
