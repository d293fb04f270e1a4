package profiler

import (
	"fmt"
	"os"

	"github.com/heatscope/heatscope/cpulist"
)

// OnlineCPUs returns the CPUs listed in /sys/devices/system/cpu/online.
func OnlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("read online CPUs: %w", err)
	}
	return cpulist.Parse(string(b))
}
