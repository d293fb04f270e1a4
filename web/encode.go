package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/heatscope/heatscope/query"
)

// errTooLarge is a response that would pass Options.MaxResponseBytes.
var errTooLarge = errors.New("response too large")

// reply is an endpoint's answer, encoded in full before anything is sent.
type reply struct {
	limit       int
	body        []byte
	contentType string
	// filename, when set, makes the response a download of that name.
	filename string
}

// json encodes v as the body. Values whose size the parameters bound are
// encoded by encoding/json; flame graph trees, whose size only the data
// bounds, use node, diffNode and prediffNode.
func (rep *reply) json(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	if len(b) > rep.limit {
		return errTooLarge
	}
	rep.body, rep.contentType = b, jsonType
	return nil
}

// encoded takes the output of node, diff or prediffNode as the body.
func (rep *reply) encoded(b []byte, err error) error {
	if err != nil {
		return err
	}
	if len(b) > rep.limit {
		return errTooLarge
	}
	rep.body, rep.contentType = b, jsonType
	return nil
}

// binary takes the output of compactNode or compactDiff as the body.
func (rep *reply) binary(b []byte, err error) error {
	if err := rep.encoded(b, err); err != nil {
		return err
	}
	rep.contentType = binaryType
	return nil
}

// Write appends to the body, failing once it would pass the limit.
func (rep *reply) Write(p []byte) (int, error) {
	if len(rep.body)+len(p) > rep.limit {
		return 0, errTooLarge
	}
	rep.body = append(rep.body, p...)
	return len(p), nil
}

// tree appends a tree as encoding/json would encode it, node by node, and
// stops with errTooLarge as soon as out passes limit: a tree of millions of
// nodes never costs more memory than the limit. fields appends a node's own
// fields (without braces), kids lists its children.
func tree[T any](out []byte, n T, limit int, fields func([]byte, T) []byte, kids func(T) []T) ([]byte, error) {
	out = fields(append(out, '{'), n)
	if len(out) > limit {
		return out, errTooLarge
	}
	if children := kids(n); len(children) > 0 {
		out = append(out, `,"children":[`...)
		for i, c := range children {
			if i > 0 {
				out = append(out, ',')
			}
			var err error
			if out, err = tree(out, c, limit, fields, kids); err != nil {
				return out, err
			}
		}
		out = append(out, ']')
	}
	return append(out, '}'), nil
}

// node appends a flame graph tree.
func node(out []byte, n *query.Node, limit int) ([]byte, error) {
	return tree(out, n, limit, func(out []byte, n *query.Node) []byte {
		out = append(out, `"name":`...)
		out = appendString(out, n.Name)
		out = append(out, `,"kind":`...)
		out = appendString(out, n.Kind)
		out = append(out, `,"value":`...)
		out = strconv.AppendInt(out, n.Value, 10)
		out = append(out, `,"self":`...)
		out = strconv.AppendInt(out, n.Self, 10)
		out = append(out, `,"cpu":`...)
		out = appendFloat(out, n.CPU)
		out = append(out, `,"selfCpu":`...)
		out = appendFloat(out, n.SelfCPU)
		if n.FP != 0 {
			out = append(out, `,"fp":`...)
			out = strconv.AppendInt(out, n.FP, 10)
		}
		return out
	}, func(n *query.Node) []*query.Node { return n.Children })
}

// diffNode appends a differential flame graph tree, its CPU times in
// seconds.
func diffNode(out []byte, n *query.DiffNode, limit int) ([]byte, error) {
	return tree(out, n, limit, func(out []byte, n *query.DiffNode) []byte {
		f := diffFields(n)
		return appendDiffFields(out, n.Name, n.Kind, f[:])
	}, func(n *query.DiffNode) []*query.DiffNode { return n.Children })
}

// appendDiffFields appends the own fields of a differential tree's node:
// its name, its kind, then its figures, CPU times in nanoseconds, as
// seconds.
func appendDiffFields(out []byte, name, kind string, fields []intField) []byte {
	out = append(out, `"name":`...)
	out = appendString(out, name)
	out = append(out, `,"kind":`...)
	out = appendString(out, kind)
	for _, f := range fields {
		out = append(append(append(out, ",\""...), f.name...), "\":"...)
		out = appendFloat(out, seconds(f.v))
	}
	return out
}

// intField is a named integer of an answer.
type intField struct {
	name string
	v    int64
}

// diffFields are a differential node's figures, CPU time in nanoseconds,
// in the order of the nested JSON and of the compact columns.
func diffFields(n *query.DiffNode) [6]intField {
	return [6]intField{{"a", n.A}, {"b", n.B}, {"selfA", n.SelfA}, {"selfB", n.SelfB}, {"delta", n.Delta}, {"deltaTotal", n.DeltaTotal}}
}

// diff appends d as the nested JSON of /api/diff: CPU times in seconds
// (unit "cpu-seconds"), sample counts as integers, and the message (why
// a window holds no sample; "" when both hold some).
func diff(out []byte, d *query.Diff, message string, limit int) ([]byte, error) {
	out = append(out, `{"unit":"`+query.UnitCPUSeconds+`","totalA":`...)
	out = appendFloat(out, seconds(d.TotalA))
	out = append(out, `,"totalB":`...)
	out = appendFloat(out, seconds(d.TotalB))
	out = append(out, `,"samplesA":`...)
	out = strconv.AppendInt(out, d.SamplesA, 10)
	out = append(out, `,"samplesB":`...)
	out = strconv.AppendInt(out, d.SamplesB, 10)
	out = appendString(append(out, `,"message":`...), message)
	out = append(out, `,"root":`...)
	if d.Root == nil {
		return append(out, "null}"...), nil
	}
	out, err := diffNode(out, d.Root, limit)
	if err != nil {
		return out, err
	}
	return append(out, '}'), nil
}

// appendString appends s as a JSON string exactly as encoding/json does.
// Plain printable ASCII, the usual function name, is copied as is; the
// rest (escapes, HTML characters, invalid UTF-8) goes to encoding/json.
func appendString(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(out, b...)
		}
	}
	out = append(out, '"')
	out = append(out, s...)
	return append(out, '"')
}

// appendFloat appends f exactly as encoding/json encodes a float64: the
// shortest decimal, without exponent from 1e-6 to 1e21 (CPU times are in
// that range or 0); the rest goes to encoding/json.
func appendFloat(out []byte, f float64) []byte {
	if a := math.Abs(f); a == 0 || a >= 1e-6 && a < 1e21 {
		return strconv.AppendFloat(out, f, 'f', -1, 64)
	}
	b, _ := json.Marshal(f) // finite: CPU times are sums of periods
	return append(out, b...)
}
