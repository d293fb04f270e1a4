package web

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"

	"github.com/heatscope/heatscope/query"
)

// The compact encoding of flame graph trees (encoding=compact), which the
// UI reads: a 50 000-stack flame graph is some 300 000 nodes, 21 MB of
// nested JSON whose JSON.parse alone took 90-470 ms in the browser. The
// compact form is a table of distinct strings plus one flat column per
// field, nodes in pre-order, which the browser maps onto typed arrays
// without parsing them. The layout, all integers little-endian:
//
//	bytes 0-3    magic: "HSF3" (flame graph) or "HSD1" (differential)
//	bytes 4-7    uint32 N, the number of nodes
//	bytes 8-11   uint32 J, the length of the JSON header
//	bytes 12-15  zero
//	bytes 16-    the JSON header: {"names":[...],"kinds":[...]} and, for a
//	             differential, "unit":"cpu-nanoseconds", "totalA" and
//	             "totalB" (CPU time) and, from /api/diff, "samplesA" and
//	             "samplesB"; from /api/flamegraph and /api/diff, "message"
//	             (why the answer is empty, "" when it is not); then zero
//	             bytes up to a multiple of 8
//	then the columns of N values each, in this order:
//	  float64: value, self (integers, exact below 2^53), cpu, selfCpu
//	           (seconds), fp (samples, 0 when none or not known) for
//	           "HSF3"; a, b, selfA, selfB, delta,
//	           deltaTotal (integer CPU nanoseconds) for "HSD1"
//	  uint32 name: index into names
//	  uint32 size: the nodes in the node's subtree, itself included, so its
//	               first child is the next node and its next sibling the node
//	               size places on
//	  uint8 kind:  index into kinds
//
// Node 0 is the root; children come in the nested JSON's order. Every
// string is exactly the nested JSON's (encoding/json's escaping), so
// decoding either gives the same tree (a differential's CPU times in
// nanoseconds where the nested JSON has seconds).
const (
	compactFlameMagic = "HSF3" // HSF2 had no fp column, HSF1 no CPU time columns
	compactDiffMagic  = "HSD1"
	compactHeaderLen  = 16
	binaryType        = "application/octet-stream"
)

// compactEncoding reads the encoding parameter: true for "compact", false
// for "json" or none.
func compactEncoding(p *params) (bool, error) {
	switch v := p.get("encoding"); v {
	case "", "json":
		return false, nil
	case "compact":
		return true, nil
	default:
		return false, paramErr("encoding", "%q is not json or compact", query.Clip(v))
	}
}

// columns collects a tree's nodes in pre-order.
type columns struct {
	limit   int
	bytes   int // a lower bound of the encoding's size so far
	strings []string
	ids     map[string]uint32
	kinds   []string
	kindIDs map[string]uint8
	name    []uint32
	size    []uint32
	kind    []uint8
	nums    [][]float64
	row     []float64
}

// compactTree encodes root in the compact layout: fields gives a node's
// name and kind and fills its numbers (one per column), kids lists its
// children, header appends any JSON header fields after names and kinds
// (each starting with a comma). It stops with errTooLarge as soon as the
// encoding would pass limit.
func compactTree[T any](magic string, root T, ncols, limit int, header func([]byte) []byte,
	fields func(n T, nums []float64) (name, kind string), kids func(T) []T) ([]byte, error) {
	c := &columns{limit: limit, ids: map[string]uint32{}, kindIDs: map[string]uint8{},
		nums: make([][]float64, ncols), row: make([]float64, ncols), bytes: compactHeaderLen}
	var add func(n T) error
	add = func(n T) error {
		i := len(c.name)
		name, kind := fields(n, c.row)
		if err := c.add(name, kind); err != nil {
			return err
		}
		for _, child := range kids(n) {
			if err := add(child); err != nil {
				return err
			}
		}
		c.size[i] = uint32(len(c.name) - i)
		return nil
	}
	if err := add(root); err != nil {
		return nil, err
	}
	return c.encode(magic, header)
}

func (c *columns) add(name, kind string) error {
	c.bytes += 8*len(c.nums) + 9
	id, ok := c.ids[name]
	if !ok {
		id = uint32(len(c.strings))
		c.strings = append(c.strings, name)
		c.ids[name] = id
		c.bytes += len(name) + 2 // its quotes; encode counts exactly
	}
	k, ok := c.kindIDs[kind]
	if !ok {
		if len(c.kinds) > math.MaxUint8 {
			return errTooManyKinds
		}
		k = uint8(len(c.kinds))
		c.kinds = append(c.kinds, kind)
		c.kindIDs[kind] = k
		c.bytes += len(kind) + 2
	}
	if c.bytes > c.limit {
		return errTooLarge
	}
	c.name = append(c.name, id)
	c.kind = append(c.kind, k)
	c.size = append(c.size, 0)
	for j, v := range c.row {
		c.nums[j] = append(c.nums[j], v)
	}
	return nil
}

// errTooManyKinds guards the kind column's byte: the query package has
// six kinds.
var errTooManyKinds = errors.New("compact encoding: more than 256 node kinds")

func (c *columns) encode(magic string, header func([]byte) []byte) ([]byte, error) {
	n := len(c.name)
	out := make([]byte, compactHeaderLen, c.bytes+64)
	copy(out, magic)
	binary.LittleEndian.PutUint32(out[4:], uint32(n))
	out = appendStrings(append(out, `{"names":`...), c.strings)
	out = appendStrings(append(out, `,"kinds":`...), c.kinds)
	out = append(header(out), '}')
	binary.LittleEndian.PutUint32(out[8:], uint32(len(out)-compactHeaderLen))
	for len(out)%8 != 0 {
		out = append(out, 0)
	}
	if len(out)+n*(8*len(c.nums)+9) > c.limit {
		return nil, errTooLarge
	}
	for _, col := range c.nums {
		for _, v := range col {
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v))
		}
	}
	for _, v := range c.name {
		out = binary.LittleEndian.AppendUint32(out, v)
	}
	for _, v := range c.size {
		out = binary.LittleEndian.AppendUint32(out, v)
	}
	return append(out, c.kind...), nil
}

func appendStrings(out []byte, list []string) []byte {
	out = append(out, '[')
	for i, s := range list {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendString(out, s)
	}
	return append(out, ']')
}

// messageHeader appends to a compact tree's header the answer's message.
func messageHeader(message string) func([]byte) []byte {
	return func(out []byte) []byte {
		return appendString(append(out, `,"message":`...), message)
	}
}

// compactNode encodes a flame graph tree in the compact layout, with the
// answer's message (why it is empty; "" when it is not).
func compactNode(root *query.Node, message string, limit int) ([]byte, error) {
	return compactTree(compactFlameMagic, root, 5, limit, messageHeader(message), func(n *query.Node, nums []float64) (string, string) {
		nums[0], nums[1], nums[2], nums[3], nums[4] = float64(n.Value), float64(n.Self), n.CPU, n.SelfCPU, float64(n.FP)
		return n.Name, n.Kind
	}, func(n *query.Node) []*query.Node { return n.Children })
}

// compactDiff encodes a differential flame graph in the compact layout,
// its figures CPU time in nanoseconds, with the answer's message (why a
// window is empty; "" when neither is); a diff without a root has no
// nodes.
func compactDiff(d *query.Diff, message string, limit int) ([]byte, error) {
	counts := cpuDiffHeader(intField{"totalA", d.TotalA}, intField{"totalB", d.TotalB},
		intField{"samplesA", d.SamplesA}, intField{"samplesB", d.SamplesB})
	header := func(out []byte) []byte { return messageHeader(message)(counts(out)) }
	if d.Root == nil {
		c := &columns{limit: limit}
		return c.encode(compactDiffMagic, header)
	}
	return compactTree(compactDiffMagic, d.Root, 6, limit, header, func(n *query.DiffNode, nums []float64) (string, string) {
		for i, f := range diffFields(n) {
			nums[i] = float64(f.v)
		}
		return n.Name, n.Kind
	}, func(n *query.DiffNode) []*query.DiffNode { return n.Children })
}

// cpuDiffHeader appends to a compact differential's header its unit,
// "cpu-nanoseconds", and fields.
func cpuDiffHeader(fields ...intField) func([]byte) []byte {
	return func(out []byte) []byte {
		out = append(out, `,"unit":"cpu-nanoseconds"`...)
		for _, f := range fields {
			out = append(append(append(out, ",\""...), f.name...), "\":"...)
			out = strconv.AppendInt(out, f.v, 10)
		}
		return out
	}
}
