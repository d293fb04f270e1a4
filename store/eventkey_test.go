package store_test

import (
	"testing"

	"github.com/heatscope/heatscope/store"
)

// TestEventSegmentNames: a segment's file name is its number in 16
// digits, and only such names parse.
func TestEventSegmentNames(t *testing.T) {
	for _, seq := range []uint64{1, 7, 1<<53 + 1} {
		name := store.EventSegmentName(seq)
		if got, ok := store.ParseEventSegmentName(name); !ok || got != seq || len(name) != 16 {
			t.Errorf("segment %d: name %q parses to %d, %t", seq, name, got, ok)
		}
	}
	for _, bad := range []string{"", "1", "000000000000001", "00000000000000001", "000000000000000a", "-000000000000001", "99999999999999999999"[:16] + "x"} {
		if seq, ok := store.ParseEventSegmentName(bad); ok {
			t.Errorf("%q parsed as segment %d", bad, seq)
		}
	}
}
