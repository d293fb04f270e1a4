package query

import (
	"strings"

	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// Frames says how the views name frames that could not be resolved,
// which the symbolizer keeps as "[module+0xoffset]" (sample.UnknownName):
// one name per address splits a stripped binary's time into dozens of
// slivers, so by default they are grouped per module.
type Frames int

const (
	// GroupAddresses names an unresolved frame after its module alone,
	// "[gzip+0x4ce8]" as "[gzip]", as FlameGraph's stackcollapse scripts
	// do: all of a stripped binary's time shows as one frame.
	GroupAddresses Frames = iota
	// KeepAddresses keeps each unresolved frame's own name, one per
	// address (pprof profiles always do).
	KeepAddresses
)

// ParseFrames parses the addresses parameter: "group" (or empty) or
// "show".
func ParseFrames(v string) (Frames, error) {
	switch v {
	case "", "group":
		return GroupAddresses, nil
	case "show":
		return KeepAddresses, nil
	}
	return GroupAddresses, paramErr("addresses", "%q: want group or show", v)
}

// Name is the name a view gives the frame named name.
func (fr Frames) Name(name string) string {
	if fr == KeepAddresses {
		return name
	}
	if module, ok := UnresolvedModule(name); ok {
		return "[" + module + "]"
	}
	return name
}

// FrameName is the name a view gives frame id of t: its function's as
// Name gives it and, for a Python frame, with its file,
// "qualname (file)" (sample.FunctionName), so that two Python functions
// of one qualified name ("<module>", "forward") stay apart while a
// function's lines add up. A Python frame whose code object could not be
// read ("[python+0xADDRESS]") is grouped as an unresolved native one is.
func (fr Frames) FrameName(t *store.Table, id uint32) string {
	f := &t.Frames[id]
	name := fr.Name(t.Strings[f.Function])
	if f.Kind == sample.KindPython {
		return sample.FunctionName(name, t.Strings[f.Module], f.Kind)
	}
	return name
}

// UnresolvedModule returns the module of an unresolved frame's name,
// "gzip" for "[gzip+0x4ce8]"; ok is false for any other name.
func UnresolvedModule(name string) (module string, ok bool) {
	if len(name) < len("[m+0x0]") || name[0] != '[' || name[len(name)-1] != ']' {
		return "", false
	}
	i := strings.LastIndex(name, "+0x")
	if i < 2 || i+3 == len(name)-1 {
		return "", false
	}
	for _, c := range name[i+3 : len(name)-1] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return "", false
		}
	}
	return name[1:i], true
}

// Sample returns s with its frames named as fr says: s itself when no
// name changes, else a copy with its own stack (s is left as it is).
func (fr Frames) Sample(s *sample.Sample) *sample.Sample {
	if fr == KeepAddresses {
		return s
	}
	var out *sample.Sample
	for i := range s.Stack {
		name := fr.Name(s.Stack[i].Function)
		if name == s.Stack[i].Function {
			continue
		}
		if out == nil {
			c := *s
			c.Stack = append([]sample.Frame(nil), s.Stack...)
			out = &c
		}
		out.Stack[i].Function = name
	}
	if out == nil {
		return s
	}
	return out
}
