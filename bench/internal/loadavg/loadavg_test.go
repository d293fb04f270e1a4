package loadavg

import (
	"strconv"
	"strings"
	"testing"
)

// TestLoadAverage: the line has /proc/loadavg's five fields, the first a
// number, and OneMinute is a number.
func TestLoadAverage(t *testing.T) {
	f := strings.Fields(Line())
	if len(f) != 5 {
		t.Fatalf("line %q, want 5 fields as /proc/loadavg has", Line())
	}
	if _, err := strconv.ParseFloat(OneMinute(), 64); err != nil {
		t.Errorf("one minute %q: %v", OneMinute(), err)
	}
	if _, err := strconv.ParseFloat(f[0], 64); err != nil {
		t.Errorf("first field %q: %v", f[0], err)
	}
}
