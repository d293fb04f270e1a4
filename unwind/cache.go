package unwind

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"regexp"
)

// Cache keeps compiled tables on disk between runs, one file per build id,
// like the kernel symbols (symbolize.KernelCache): a binary's CFI cannot
// change while its build id stays the same, so a restarted agent reads a
// table in a fraction of the time compiling it again takes. Binaries
// without a build id are compiled every time.
type Cache struct {
	// Dir holds the table files ("" for no cache).
	Dir string
}

// cacheMagic starts every cache file.
const cacheMagic = "heatscope unwind table 1\n"

// cacheHeader is the size of the header after the magic: rows, CRC-32 of
// the rows, and the Stats (five 32-bit numbers).
const cacheHeader = 4 + 4 + 5*4

// buildIDPattern is what a build id may be to name a file.
var buildIDPattern = regexp.MustCompile(`^[0-9a-f]{8,128}$`)

// Load returns the table of the ELF binary at path: from the cache when it
// holds one for the binary's build id, else compiled and then saved (best
// effort: a cache that cannot be written is no error). It reports whether
// the cache was used.
func (c Cache) Load(path string) (t *Table, hit bool, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, false, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	id := BuildID(f)
	file := c.file(id)
	if file != "" {
		if t, err := readCache(file); err == nil {
			t.BuildID = id
			return t, true, nil
		}
	}
	t, err = CompileFile(f)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	if file != "" {
		_ = writeCache(file, t) // best effort: compiled again next time
	}
	return t, false, nil
}

// Has reports whether the cache holds a table for a build id: loading it
// then costs a file read, not a compilation.
func (c Cache) Has(buildID string) bool {
	file := c.file(buildID)
	if file == "" {
		return false
	}
	_, err := os.Stat(file)
	return err == nil
}

// file names the cache file of a build id, or "" when there is none.
func (c Cache) file(buildID string) string {
	if c.Dir == "" || !buildIDPattern.MatchString(buildID) {
		return ""
	}
	return filepath.Join(c.Dir, "unwind", buildID+".table")
}

// Encode returns t in the cache's file format.
func (t *Table) Encode() []byte {
	le := binary.LittleEndian
	rows := make([]byte, 0, len(t.Rows)*RowSize)
	for _, r := range t.Rows {
		rows = r.AppendBPF(rows)
	}
	b := make([]byte, 0, len(cacheMagic)+cacheHeader+len(rows))
	b = append(b, cacheMagic...)
	b = le.AppendUint32(b, uint32(len(t.Rows)))
	b = le.AppendUint32(b, crc32.ChecksumIEEE(rows))
	for _, v := range []int{t.Stats.EHFrameBytes, t.Stats.DebugFrameBytes, t.Stats.FDEs, t.Stats.Skipped, t.Stats.Unsupported} {
		b = le.AppendUint32(b, uint32(v))
	}
	return append(b, rows...)
}

// DecodeTable parses what Encode wrote. It never panics: a short, corrupt
// or unsorted file is an error.
func DecodeTable(b []byte) (*Table, error) {
	if len(b) < len(cacheMagic)+cacheHeader || string(b[:len(cacheMagic)]) != cacheMagic {
		return nil, errors.New("decode unwind table: not a table file")
	}
	le := binary.LittleEndian
	h := b[len(cacheMagic):]
	n := uint64(le.Uint32(h[0:4]))
	sum := le.Uint32(h[4:8])
	rows := h[cacheHeader:]
	if uint64(len(rows)) != n*RowSize {
		return nil, fmt.Errorf("decode unwind table: %d bytes of rows, want %d for %d rows", len(rows), n*RowSize, n)
	}
	if crc32.ChecksumIEEE(rows) != sum {
		return nil, errors.New("decode unwind table: checksum mismatch")
	}
	t := &Table{Rows: make([]Row, n)}
	st := []*int{&t.Stats.EHFrameBytes, &t.Stats.DebugFrameBytes, &t.Stats.FDEs, &t.Stats.Skipped, &t.Stats.Unsupported}
	for i, p := range st {
		*p = int(le.Uint32(h[8+4*i:]))
	}
	for i := range t.Rows {
		r, err := decodeBPFRow(rows[i*RowSize:])
		if err != nil {
			return nil, fmt.Errorf("decode unwind table: %w", err)
		}
		if i > 0 && r.PC <= t.Rows[i-1].PC {
			return nil, fmt.Errorf("decode unwind table: row %d at %#x not after %#x", i, r.PC, t.Rows[i-1].PC)
		}
		t.Rows[i] = r
	}
	return t, nil
}

func readCache(file string) (*Table, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return DecodeTable(b)
}

// writeCache writes the file whole or not at all (a temporary file renamed).
func writeCache(file string, t *Table) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".table-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(t.Encode())
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}
