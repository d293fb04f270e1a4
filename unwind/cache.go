package unwind

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"path/filepath"

	"github.com/heatscope/heatscope/internal/diskcache"
)

// Cache keeps compiled tables on disk between runs, one file per build id,
// like the kernel symbols (symbolize.KernelCache): a binary's CFI cannot
// change while its build id stays the same, so a restarted agent reads a
// table in a fraction of the time compiling it again takes. Binaries
// without a build id are compiled every time.
//
// The files are bounded in bytes (MaxBytes): when a write takes them over
// the bound, and on Prune, the least recently used (by modification time;
// a file read from the cache is touched) are removed until they fit. Only
// Dir/unwind/*.table is counted and pruned; the kernel symbol cache in Dir
// is left alone.
type Cache struct {
	// Dir holds the table files ("" for no cache).
	Dir string
	// MaxBytes bounds the table files on disk (0: DefaultCacheMaxBytes).
	MaxBytes int64
	// Log receives the errors of pruning and touching files, which are
	// never fatal (nil: slog.Default()).
	Log *slog.Logger
	// Pruned, when set, counts the files removed to stay within MaxBytes.
	Pruned *PruneStats
}

// DefaultCacheMaxBytes is the disk bound of a Cache without MaxBytes.
const DefaultCacheMaxBytes = 256 << 20

// PruneStats counts the cache files removed to stay within the bound, and
// their bytes. Safe for concurrent use.
type PruneStats = diskcache.PruneStats

// cacheMagic starts every cache file.
const cacheMagic = "heatscope unwind table 1\n"

// cacheHeader is the size of the header after the magic: rows, CRC-32 of
// the rows, and the Stats (five 32-bit numbers).
const cacheHeader = 4 + 4 + 5*4

// disk is the directory of the table files, Dir/unwind.
func (c Cache) disk() diskcache.Dir {
	d := diskcache.Dir{Ext: ".table", MaxBytes: c.MaxBytes, What: "unwind cache", Log: c.Log, Pruned: c.Pruned}
	if c.Dir != "" {
		d.Path = filepath.Join(c.Dir, "unwind")
	}
	if d.MaxBytes <= 0 {
		d.MaxBytes = DefaultCacheMaxBytes
	}
	return d
}

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
	disk := c.disk()
	if b, err := disk.Read(id); err == nil {
		if t, err := DecodeTable(b); err == nil {
			t.BuildID = id
			return t, true, nil
		}
	}
	t, err = CompileFile(f)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	if disk.File(id) != "" {
		// Best effort: a table not saved is compiled again next time.
		_ = disk.Write(id, t.Encode())
	}
	return t, false, nil
}

// Prune removes the least recently used table files until the rest fit
// within MaxBytes, and returns how many files and bytes it removed. It
// does nothing while they fit. Errors are logged, never returned: a file
// that cannot be removed stays, and the next prune tries again.
func (c Cache) Prune() (files int, bytes int64) { return c.disk().Prune() }

// Has reports whether the cache holds a table for a build id: loading it
// then costs a file read, not a compilation.
func (c Cache) Has(buildID string) bool { return c.disk().Has(buildID) }

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
