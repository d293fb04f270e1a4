package web

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/query"
)

// compactData is a decoded compact tree.
type compactData struct {
	magic  string
	header struct {
		Names []string `json:"names"`
		Kinds []string `json:"kinds"`
		// a differential's: its unit, CPU totals and sample counts
		Unit     *string `json:"unit"`
		TotalA   *int64  `json:"totalA"`
		TotalB   *int64  `json:"totalB"`
		SamplesA *int64  `json:"samplesA"`
		SamplesB *int64  `json:"samplesB"`
		// why the answer is empty ("" when it is not)
		Message *string `json:"message"`
	}
	nums       [][]float64
	name, size []uint32
	kind       []uint8
}

// decodeCompact reads the layout compact.go documents, checking every
// length, index and subtree size.
func decodeCompact(b []byte) (*compactData, error) {
	if len(b) < compactHeaderLen {
		return nil, fmt.Errorf("%d bytes, shorter than the header", len(b))
	}
	d := &compactData{magic: string(b[:4])}
	ncols := map[string]int{compactFlameMagic: 5, compactDiffMagic: 6}[d.magic]
	// A flame graph's CPU times (columns 2 and 3) are seconds; the rest
	// are counts.
	isInt := func(j int) bool { return d.magic == compactDiffMagic || j != 2 && j != 3 }
	if ncols == 0 {
		return nil, fmt.Errorf("magic %q", d.magic)
	}
	n := int(binary.LittleEndian.Uint32(b[4:]))
	j := int(binary.LittleEndian.Uint32(b[8:]))
	if binary.LittleEndian.Uint32(b[12:]) != 0 {
		return nil, errors.New("bytes 12-15 are not zero")
	}
	off := compactHeaderLen + j
	if off > len(b) {
		return nil, fmt.Errorf("JSON header of %d bytes in %d", j, len(b))
	}
	dec := json.NewDecoder(bytes.NewReader(b[compactHeaderLen:off]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d.header); err != nil {
		return nil, fmt.Errorf("JSON header: %w", err)
	}
	if dec.More() {
		return nil, errors.New("JSON header: more after the object")
	}
	if (d.magic == compactDiffMagic) != (d.header.TotalA != nil && d.header.TotalB != nil) {
		return nil, fmt.Errorf("%s with totals %v %v", d.magic, d.header.TotalA, d.header.TotalB)
	}
	if (d.magic == compactDiffMagic) != (d.header.Unit != nil && *d.header.Unit == "cpu-nanoseconds") {
		return nil, fmt.Errorf("%s with unit %v", d.magic, d.header.Unit)
	}
	for ; off%8 != 0; off++ {
		if off >= len(b) || b[off] != 0 {
			return nil, fmt.Errorf("padding at %d", off)
		}
	}
	if want := off + n*(8*ncols+9); len(b) != want {
		return nil, fmt.Errorf("%d bytes, want %d for %d nodes", len(b), want, n)
	}
	for j := range ncols {
		col := make([]float64, n)
		for i := range col {
			v := math.Float64frombits(binary.LittleEndian.Uint64(b[off:]))
			if isInt(j) && (v != math.Trunc(v) || math.Abs(v) >= 1<<53) {
				return nil, fmt.Errorf("number %v is no exact integer", v)
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 && !isInt(j) {
				return nil, fmt.Errorf("CPU time %v", v)
			}
			col[i], off = v, off+8
		}
		d.nums = append(d.nums, col)
	}
	for _, col := range []*[]uint32{&d.name, &d.size} {
		for range n {
			*col = append(*col, binary.LittleEndian.Uint32(b[off:]))
			off += 4
		}
	}
	d.kind = b[off:]
	for i := range n {
		if int(d.name[i]) >= len(d.header.Names) || int(d.kind[i]) >= len(d.header.Kinds) {
			return nil, fmt.Errorf("node %d: name %d or kind %d out of range", i, d.name[i], d.kind[i])
		}
	}
	if n > 0 && d.size[0] != uint32(n) {
		return nil, fmt.Errorf("the root's subtree is %d nodes of %d", d.size[0], n)
	}
	return d, nil
}

// children lists node i's children, checking that their subtrees tile
// i's exactly.
func (d *compactData) children(i int) ([]int, error) {
	var out []int
	end := i + int(d.size[i])
	c := i + 1
	for c < end {
		if d.size[c] == 0 || c+int(d.size[c]) > end {
			return nil, fmt.Errorf("node %d: subtree of %d nodes overruns its parent %d's", c, d.size[c], i)
		}
		out = append(out, c)
		c += int(d.size[c])
	}
	return out, nil
}

// tree builds the nested flame graph of an "HSF3" encoding.
func (d *compactData) tree(i int) (*query.Node, error) {
	n := &query.Node{Name: d.header.Names[d.name[i]], Kind: d.header.Kinds[d.kind[i]], Value: int64(d.nums[0][i]), Self: int64(d.nums[1][i]),
		CPU: d.nums[2][i], SelfCPU: d.nums[3][i], FP: int64(d.nums[4][i])}
	kids, err := d.children(i)
	for _, c := range kids {
		child, err := d.tree(c)
		if err != nil {
			return nil, err
		}
		n.Children = append(n.Children, child)
	}
	return n, err
}

// diff builds the differential flame graph of an "HSD1" encoding.
func (d *compactData) diff() (*query.Diff, error) {
	out := &query.Diff{TotalA: *d.header.TotalA, TotalB: *d.header.TotalB}
	if d.header.SamplesA != nil && d.header.SamplesB != nil {
		out.SamplesA, out.SamplesB = *d.header.SamplesA, *d.header.SamplesB
	}
	var build func(i int) (*query.DiffNode, error)
	build = func(i int) (*query.DiffNode, error) {
		n := &query.DiffNode{Name: d.header.Names[d.name[i]], Kind: d.header.Kinds[d.kind[i]], A: int64(d.nums[0][i]), B: int64(d.nums[1][i]),
			SelfA: int64(d.nums[2][i]), SelfB: int64(d.nums[3][i]), Delta: int64(d.nums[4][i]), DeltaTotal: int64(d.nums[5][i])}
		kids, err := d.children(i)
		for _, c := range kids {
			child, err := build(c)
			if err != nil {
				return nil, err
			}
			n.Children = append(n.Children, child)
		}
		return n, err
	}
	if len(d.name) == 0 {
		return out, nil
	}
	root, err := build(0)
	out.Root = root
	return out, err
}

// sameJSON says whether two JSON texts hold the same values, numbers
// compared as written. (encoding/json writes an invalid UTF-8 byte as
// \ufffd, and the rune it decodes to as itself.)
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	for _, x := range []struct {
		text []byte
		v    *any
	}{{a, &va}, {b, &vb}} {
		dec := json.NewDecoder(bytes.NewReader(x.text))
		dec.UseNumber()
		if err := dec.Decode(x.v); err != nil {
			t.Fatalf("invalid JSON %.200s: %v", x.text, err)
		}
	}
	return reflect.DeepEqual(va, vb)
}

// diffJSON is /api/diff's nested JSON, for encoding/json: CPU times in
// seconds.
type diffJSON struct {
	Unit     string        `json:"unit"`
	TotalA   float64       `json:"totalA"`
	TotalB   float64       `json:"totalB"`
	SamplesA int64         `json:"samplesA"`
	SamplesB int64         `json:"samplesB"`
	Message  string        `json:"message"`
	Root     *diffNodeJSON `json:"root"`
}

// flameJSON is /api/flamegraph's nested answer: the root's object, its
// message the last field.
type flameJSON struct {
	*query.Node
	Message string `json:"message"`
}

type diffNodeJSON struct {
	Name       string          `json:"name"`
	Kind       string          `json:"kind"`
	A          float64         `json:"a"`
	B          float64         `json:"b"`
	SelfA      float64         `json:"selfA"`
	SelfB      float64         `json:"selfB"`
	Delta      float64         `json:"delta"`
	DeltaTotal float64         `json:"deltaTotal"`
	Children   []*diffNodeJSON `json:"children,omitempty"`
}

// nestedDiff is d as /api/diff's nested JSON should hold it, built
// independently of encode.go.
func nestedDiff(d *query.Diff) *diffJSON {
	s := func(ns int64) float64 { return float64(ns) / 1e9 }
	var node func(n *query.DiffNode) *diffNodeJSON
	node = func(n *query.DiffNode) *diffNodeJSON {
		out := &diffNodeJSON{Name: n.Name, Kind: n.Kind, A: s(n.A), B: s(n.B), SelfA: s(n.SelfA), SelfB: s(n.SelfB), Delta: s(n.Delta), DeltaTotal: s(n.DeltaTotal)}
		for _, c := range n.Children {
			out.Children = append(out.Children, node(c))
		}
		return out
	}
	out := &diffJSON{Unit: "cpu-seconds", TotalA: s(d.TotalA), TotalB: s(d.TotalB), SamplesA: d.SamplesA, SamplesB: d.SamplesB}
	if d.Root != nil {
		out.Root = node(d.Root)
	}
	return out
}

// nested decodes a compact answer and encodes it as encoding/json does
// (a differential as /api/diff's nested JSON).
func nested(t *testing.T, what string, body []byte) []byte {
	t.Helper()
	d, err := decodeCompact(body)
	if err != nil {
		t.Fatalf("%s: decode the compact encoding: %v", what, err)
	}
	var v any
	switch d.magic {
	case compactFlameMagic:
		if len(d.name) == 0 {
			t.Fatalf("%s: a flame graph without a root", what)
		}
		var root *query.Node
		root, err = d.tree(0)
		v = flameJSON{Node: root, Message: *d.header.Message}
	default:
		var df *query.Diff
		df, err = d.diff()
		if err == nil {
			nd := nestedDiff(df)
			nd.Message = *d.header.Message
			v = nd
		}
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCompactEncodingMatchesNested asks /api/flamegraph and /api/diff for
// both encodings with every filter: the compact answer, decoded, must be
// the nested answer, and smaller.
func TestCompactEncodingMatchesNested(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	for _, tc := range filterCases {
		for _, target := range []string{withQuery("/api/flamegraph", queryA, tc.query),
			withQuery("/api/diff", queryA, "from2=1795237382.5&to2=1795237389.75", tc.query)} {
			resp, want := fx.get(t, target)
			mustOK(t, target, resp, want)
			resp, again := fx.get(t, target+"&encoding=json")
			mustOK(t, target, resp, again)
			if !bytes.Equal(again, want) {
				t.Fatalf("%s: encoding=json differs from the default", target)
			}
			resp, body := fx.get(t, target+"&encoding=compact")
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != binaryType {
				t.Fatalf("%s compact: %d %s: %q", target, resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			if got := nested(t, target, body); !sameJSON(t, got, want) {
				t.Fatalf("%s: the compact encoding decodes to\n%.300s\nwant\n%.300s", target, got, want)
			}
			if len(body) >= len(want) && len(want) > 1000 {
				t.Errorf("%s: compact %d bytes, nested %d", target, len(body), len(want))
			}
		}
	}
}

// TestCompactEncodingNames checks strings that need escaping, kinds beyond
// the usual, negative numbers and a diff without a root.
func TestCompactEncodingNames(t *testing.T) {
	names := []string{"plain", "", "with \"quotes\" and \\", "<html>&amp;", "naïve ünïcode", "\x00\x1f\x7f", "bad \xff utf-8",
		"line\u2028sep\u2029", "tab\tnewline\n", "\ufeffbom first"}
	root := &query.Node{Name: "\ufeffroot", Kind: "root", Value: 99, Self: 1}
	d := &query.Diff{TotalA: 7, TotalB: -3, SamplesA: 5, SamplesB: 9, Root: &query.DiffNode{Name: "root", Kind: "root", A: 1, B: 2, SelfA: 3, SelfB: 4, Delta: -5, DeltaTotal: 6}}
	for i, name := range names {
		root.Children = append(root.Children, &query.Node{Name: name, Kind: name, Value: int64(i) - 3, Self: int64(i) << 40,
			Children: []*query.Node{{Name: name + "x", Kind: "user"}, {Name: name, Kind: "kernel"}}})
		d.Root.Children = append(d.Root.Children, &query.DiffNode{Name: name, Kind: "k" + name, A: int64(i), Delta: -int64(i)})
	}
	for _, tc := range []struct {
		what    string
		v       any
		compact func(int) ([]byte, error)
	}{
		{"tree", flameJSON{Node: root}, func(limit int) ([]byte, error) { return compactNode(root, "", limit) }},
		{"diff", nestedDiff(d), func(limit int) ([]byte, error) { return compactDiff(d, "", limit) }},
		{"empty diff", nestedDiff(&query.Diff{}), func(limit int) ([]byte, error) { return compactDiff(&query.Diff{}, "", limit) }},
	} {
		body, err := tc.compact(1 << 20)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		want, _ := json.Marshal(tc.v)
		if got := nested(t, tc.what, body); !sameJSON(t, got, want) {
			t.Fatalf("%s:\n got %s\nwant %s", tc.what, got, want)
		}
		// Every limit below the size fails, none above.
		for limit := range len(body) + 2 {
			out, err := tc.compact(limit)
			if limit < len(body) && (err != errTooLarge || out != nil) || limit >= len(body) && !bytes.Equal(out, body) {
				t.Fatalf("%s: limit %d of %d: %d bytes, %v", tc.what, limit, len(body), len(out), err)
			}
		}
	}
}

func TestCompactEncodingErrors(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	for _, target := range []string{"/api/flamegraph?" + queryA + "&encoding=binary", "/api/diff?" + queryA + "&from2=1795237382.5&to2=1795237389.75&encoding=Compact",
		"/api/flamegraph?" + queryA + "&encoding=compact&encoding=json", "/api/top?" + queryA + "&encoding=compact"} {
		resp, body := fx.get(t, target)
		wantParamError(t, target, resp, body, "encoding")
	}
	resp, body := fx.get(t, "/api/flamegraph?"+queryA+"&encoding="+strings.Repeat("x", 500))
	wantParamError(t, "long encoding", resp, body, "encoding")
	if len(body) > 300 {
		t.Errorf("long encoding: the error echoes it all: %s", body)
	}

	small := newFixture(t, fx.db, Options{MaxResponseBytes: 300})
	for _, target := range []string{"/api/flamegraph?" + queryA + "&encoding=compact", "/api/diff?" + queryA + "&from2=1795237382.5&to2=1795237389.75&encoding=compact"} {
		resp, body := small.get(t, target)
		var e errorBody
		if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, "response too large") {
			t.Errorf("%s: %d %s", target, resp.StatusCode, body)
		}
	}
}

// FuzzCompactEncoding builds trees from arbitrary bytes and checks that
// their compact encoding decodes to the same tree.
func FuzzCompactEncoding(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01a\x01b\x00\x02\xff\x01c"))
	f.Add([]byte("\x01\xff\xfe\x01<\x01\"\x00\x00\x01\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		root := &query.Node{Name: "root", Kind: "root"}
		stack := []*query.Node{root}
		for i := 0; i < len(data); i++ {
			top := stack[len(stack)-1]
			switch op := data[i] % 4; {
			case op == 0 && len(stack) > 1: // up
				stack = stack[:len(stack)-1]
			case op == 1 && i+1 < len(data): // a child named by the next byte
				i++
				c := &query.Node{Name: string(data[i : i+1]), Kind: []string{"user", "kernel", "jit"}[int(data[i])%3]}
				top.Children = append(top.Children, c)
				stack = append(stack, c)
			default: // numbers, negative ones too
				top.Value += int64(int8(data[i])) << (data[i] % 40)
				top.Self -= int64(data[i])
				top.FP += int64(data[i] % 3) // reached by frame pointers, or not
			}
		}
		body, err := compactNode(root, "", 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(flameJSON{Node: root})
		if got := nested(t, "fuzzed tree", body); !sameJSON(t, got, want) {
			t.Fatalf("got %s\nwant %s", got, want)
		}
	})
}
