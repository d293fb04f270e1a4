package profiler

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// OnlineCPUs returns the CPUs listed in /sys/devices/system/cpu/online.
func OnlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("read online CPUs: %w", err)
	}
	return ParseCPUList(string(b))
}

// ParseCPUList parses the kernel's CPU list format ("0-3,5,7-8").
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil || first < 0 {
			return nil, fmt.Errorf("parse CPU list %q: bad CPU %q", s, lo)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil || last < first {
				return nil, fmt.Errorf("parse CPU list %q: bad range %q", s, part)
			}
		}
		if last-first > 1<<16 {
			return nil, fmt.Errorf("parse CPU list %q: range %q too large", s, part)
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
