package pysymbol

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/heatscope/heatscope/internal/pyfixture"
)

// TestLineAgainstCPython decodes the location tables of some 600 code
// objects of the standard library, compiled by each interpreter, and
// checks every instruction's line against what the interpreter itself says
// (code.co_lines()).
func TestLineAgainstCPython(t *testing.T) {
	for _, py := range pyfixture.Interpreters {
		t.Run(py.Name, func(t *testing.T) {
			pyfixture.Need(t, py)
			out, err := exec.Command(py.Path, "testdata/linetables.py").Output()
			if err != nil {
				t.Fatalf("%s testdata/linetables.py: %v", py.Path, err)
			}
			codes, instrs := 0, 0
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(nil, 1<<24)
			for sc.Scan() {
				var c struct {
					Name  string
					First int
					Table string
					Lines [][3]*int
				}
				if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
					t.Fatal(err)
				}
				table, err := hex.DecodeString(c.Table)
				if err != nil {
					t.Fatal(err)
				}
				codes++
				for _, r := range c.Lines {
					for b := *r[0]; b < *r[1]; b += 2 {
						instrs++
						got, ok := Line(table, c.First, b/2)
						switch {
						case r[2] == nil && ok:
							t.Errorf("%s at byte %d: line %d, CPython says none", c.Name, b, got)
						case r[2] != nil && (!ok || got != *r[2]):
							t.Errorf("%s at byte %d: line %d (ok %v), CPython says %d", c.Name, b, got, ok, *r[2])
						}
					}
				}
				// Past the end: no line.
				if end := c.Lines[len(c.Lines)-1][1]; end != nil {
					if got, ok := Line(table, c.First, *end/2); ok {
						t.Errorf("%s past its end (byte %d): line %d", c.Name, *end, got)
					}
				}
			}
			if codes < 500 {
				t.Fatalf("only %d code objects read", codes)
			}
			t.Logf("%d code objects, %d instructions", codes, instrs)
		})
	}
}

func TestLineEdges(t *testing.T) {
	// def f(a):\n x = a+1\n return x*2, at line 2 (3.11 to 3.13 alike).
	table, _ := hex.DecodeString("8000d80809882189038041d80b0c88518933804a")
	for _, c := range []struct {
		instr, line int
		ok          bool
	}{
		{-1, 2, true}, // not started: the first line
		{0, 2, true},
		{1, 3, true},
		{5, 3, true},
		{6, 4, true},
		{10, 4, true},
		{11, 0, false}, // past the end
	} {
		if line, ok := Line(table, 2, c.instr); line != c.line || ok != c.ok {
			t.Errorf("instr %d: line %d ok %v, want %d %v", c.instr, line, ok, c.line, c.ok)
		}
	}
	for _, bad := range []struct {
		name  string
		table []byte
	}{
		{"empty", nil},
		{"no top bit", []byte{0x00, 0x01}},
		{"long form cut", []byte{0xf0}},
		{"varint never ends", []byte{0xe8, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f}},
		{"no location", []byte{0xf8}},
		{"line below zero", []byte{0xe8, 0x05}}, // delta -2 from 1
	} {
		if line, ok := Line(bad.table, 1, 0); ok {
			t.Errorf("%s: line %d, want none", bad.name, line)
		}
	}
}

func FuzzLine(f *testing.F) {
	seed, _ := hex.DecodeString("8000d80809882189038041d80b0c88518933804a")
	f.Add(seed, 2, 3)
	f.Add([]byte{0xf0, 0x40, 0x40, 0x01}, 10, 0)
	f.Fuzz(func(t *testing.T, table []byte, first, instr int) {
		line, ok := Line(table, first, instr)
		if ok && instr >= 0 && line < 0 {
			t.Fatalf("line %d reported", line)
		}
		if instr >= 0 && instr >= 8*len(table) && ok {
			t.Fatalf("instr %d beyond what %d bytes can cover", instr, len(table))
		}
	})
}
