package profileio

import (
	"cmp"
	"slices"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/sample"
)

// FunctionCount is a function's share of a profile's samples.
type FunctionCount struct {
	// Name is the function name.
	Name string
	// Self counts samples where the function is the leaf; Total counts
	// samples where it is anywhere on the stack (once per sample).
	Self, Total int64
	// SelfNs and TotalNs are the same samples' CPU time in nanoseconds
	// (the profile's cpu/nanoseconds value: each sample weighs its own
	// sampling period); 0 in a profile without that value.
	SelfNs, TotalNs int64
}

// TopFunctions counts each function's self and total samples (the
// samples/count value, else the first) and CPU time (the cpu/nanoseconds
// value) in p, sorted by self CPU time, highest first, then by self
// count, then by name: across a change of the sampling rate the counts
// weigh a fast-sampled function over one that ran longer. Functions are
// counted under name(their name) (nil: as they are), so that unresolved
// frames can be counted per module, each sample once; a Python function
// (in the PythonMapping mapping) is named with its file
// (sample.FunctionName) before name sees it.
func TopFunctions(p *profile.Profile, name func(string) string) []FunctionCount {
	if name == nil {
		name = func(s string) string { return s }
	}
	count, cpu := 0, -1
	for i, st := range p.SampleType {
		switch {
		case st.Type == "samples" && st.Unit == "count":
			count = i
		case st.Type == "cpu" && st.Unit == "nanoseconds":
			cpu = i
		}
	}
	byName := map[string]*FunctionCount{}
	get := func(name string) *FunctionCount {
		fc, ok := byName[name]
		if !ok {
			fc = &FunctionCount{Name: name}
			byName[name] = fc
		}
		return fc
	}
	seen := map[string]bool{}
	for _, s := range p.Sample {
		if len(s.Value) <= count {
			continue
		}
		n, ns := s.Value[count], int64(0)
		if cpu >= 0 && cpu < len(s.Value) {
			ns = s.Value[cpu]
		}
		clear(seen)
		for i, loc := range s.Location {
			for j, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				fn := line.Function.Name
				if loc.Mapping != nil && loc.Mapping.File == PythonMapping {
					fn = sample.FunctionName(fn, line.Function.Filename, sample.KindPython)
				}
				fc := get(name(fn))
				if i == 0 && j == 0 {
					fc.Self += n
					fc.SelfNs += ns
				}
				if !seen[fc.Name] {
					seen[fc.Name] = true
					fc.Total += n
					fc.TotalNs += ns
				}
			}
		}
	}
	out := make([]FunctionCount, 0, len(byName))
	for _, fc := range byName {
		out = append(out, *fc)
	}
	slices.SortFunc(out, func(a, b FunctionCount) int {
		return cmp.Or(cmp.Compare(b.SelfNs, a.SelfNs), cmp.Compare(b.Self, a.Self), cmp.Compare(a.Name, b.Name))
	})
	return out
}
