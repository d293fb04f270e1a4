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

// maxRange bounds one range's CPUs, so that a list cannot ask for an
// unbounded slice.
const maxRange = 1 << 16

// Parse returns the CPUs a list names, in the list's order ("0-1,4" →
// 0, 1, 4); none for an empty list. Surrounding white space (the newline
// a sysfs file ends with) is ignored.
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
		if last-first > maxRange {
			return nil, fmt.Errorf("parse CPU list %q: range %q too large", s, part)
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
