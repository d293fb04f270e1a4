package profileio

import (
	"cmp"
	"slices"

	"github.com/google/pprof/profile"
)

// FunctionCount is a function's share of a profile's samples.
type FunctionCount struct {
	// Name is the function name.
	Name string
	// Self counts samples where the function is the leaf; Total counts
	// samples where it is anywhere on the stack (once per sample).
	Self, Total int64
}

// TopFunctions counts each function's self and total samples (the first
// sample value) in p, sorted by self count, highest first, then by name.
func TopFunctions(p *profile.Profile) []FunctionCount {
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
		if len(s.Value) == 0 {
			continue
		}
		n := s.Value[0]
		clear(seen)
		for i, loc := range s.Location {
			for j, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				name := line.Function.Name
				if i == 0 && j == 0 {
					get(name).Self += n
				}
				if !seen[name] {
					seen[name] = true
					get(name).Total += n
				}
			}
		}
	}
	out := make([]FunctionCount, 0, len(byName))
	for _, fc := range byName {
		out = append(out, *fc)
	}
	slices.SortFunc(out, func(a, b FunctionCount) int {
		return cmp.Or(cmp.Compare(b.Self, a.Self), cmp.Compare(a.Name, b.Name))
	})
	return out
}
