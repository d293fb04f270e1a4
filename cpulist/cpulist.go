// Package cpulist parses the kernel's CPU list format ("0-3,5,7-8", as
// /sys/devices/system/cpu/online writes it), the one parser of it: the
// sampler reads the host's online CPUs with it, the query layer a `cpu=`
// filter. It reads no file, so a query service that parses a filter links
// nothing of the sampler.
package cpulist

import (
	"fmt"
	"strconv"
	"strings"
)

// maxCPUs bounds the CPUs a list names, each counted as often as it is
// named: a few kilobytes of repeated ranges would otherwise ask for
// gigabytes. No kernel runs more (x86-64 builds at most 8192).
const maxCPUs = 1 << 16

// Parse returns the CPUs a list names, in the list's order ("0-1,4" →
// 0, 1, 4); none for an empty list. Surrounding white space (the newline
// a sysfs file ends with) is ignored. A list naming more than 65536 CPUs
// in all is refused.
func Parse(s string) ([]int, error) {
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
		if last-first >= maxCPUs-len(cpus) {
			return nil, fmt.Errorf("parse CPU list %q: more than %d CPUs named", s, maxCPUs)
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
