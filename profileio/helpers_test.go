package profileio

import (
	"fmt"
	"reflect"

	"github.com/heatscope/heatscope/sample"
)

// diffSamples describes the first difference between two sample lists, or
// returns "" when they are equal (a nil and an empty stack are equal).
func diffSamples(want, got []sample.Sample) string {
	for i := range min(len(want), len(got)) {
		if d := diffSample(want[i], got[i]); d != "" {
			return fmt.Sprintf("sample %d: %s", i, d)
		}
	}
	if len(want) != len(got) {
		return fmt.Sprintf("%d samples, want %d", len(got), len(want))
	}
	return ""
}

func diffSample(want, got sample.Sample) string {
	ws, gs := want.Stack, got.Stack
	want.Stack, got.Stack = nil, nil
	if !reflect.DeepEqual(want, got) {
		return fmt.Sprintf("got %+v, want %+v", got, want)
	}
	if len(ws) == 0 && len(gs) == 0 {
		return ""
	}
	if !reflect.DeepEqual(ws, gs) {
		for j := range min(len(ws), len(gs)) {
			if ws[j] != gs[j] {
				return fmt.Sprintf("frame %d: got %+v, want %+v", j, gs[j], ws[j])
			}
		}
		return fmt.Sprintf("%d frames, want %d", len(gs), len(ws))
	}
	return ""
}
