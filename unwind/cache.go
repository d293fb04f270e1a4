package unwind

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"
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
type PruneStats struct {
	Files, Bytes atomic.Uint64
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
			c.touch(file)
			return t, true, nil
		}
	}
	t, err = CompileFile(f)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	if file != "" {
		// Best effort: a table not saved is compiled again next time.
		if writeCache(file, t) == nil {
			c.Prune()
		}
	}
	return t, false, nil
}

// touch marks a file as just used, for the least-recently-used order.
func (c Cache) touch(file string) {
	now := time.Now()
	if err := os.Chtimes(file, now, now); err != nil {
		c.log().Warn("unwind cache: cannot mark a table as used", "file", file, "err", err)
	}
}

func (c Cache) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

// Prune removes the least recently used table files until the rest fit
// within MaxBytes, and returns how many files and bytes it removed. It
// does nothing while they fit. Errors are logged, never returned: a file
// that cannot be removed stays, and the next prune tries again.
func (c Cache) Prune() (files int, bytes int64) {
	if c.Dir == "" {
		return 0, 0
	}
	bound := c.MaxBytes
	if bound <= 0 {
		bound = DefaultCacheMaxBytes
	}
	dir := filepath.Join(c.Dir, "unwind")
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			c.log().Warn("unwind cache: cannot list tables to prune", "dir", dir, "err", err)
		}
		return 0, 0
	}
	type cached struct {
		name  string
		size  int64
		mtime time.Time
	}
	var all []cached
	var total int64
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		table := strings.HasSuffix(e.Name(), ".table")
		if !table && !strings.HasPrefix(e.Name(), ".table-") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if !table {
			// A temporary file writeCache left behind when the agent
			// died between writing and renaming it.
			if time.Since(info.ModTime()) > staleTemp {
				c.remove(filepath.Join(dir, e.Name()))
			}
			continue
		}
		all = append(all, cached{e.Name(), info.Size(), info.ModTime()})
		total += info.Size()
	}
	if total <= bound {
		return 0, 0
	}
	// Oldest first; the name orders files of the same time, so that two
	// agents sharing a directory agree.
	slices.SortFunc(all, func(a, b cached) int {
		if d := a.mtime.Compare(b.mtime); d != 0 {
			return d
		}
		return strings.Compare(a.name, b.name)
	})
	for _, f := range all {
		if total <= bound {
			break
		}
		removed, gone := c.remove(filepath.Join(dir, f.name))
		if gone {
			total -= f.size
		}
		if removed {
			files++
			bytes += f.size
		}
	}
	if c.Pruned != nil {
		c.Pruned.Files.Add(uint64(files))
		c.Pruned.Bytes.Add(uint64(bytes))
	}
	if files > 0 {
		c.log().Debug("unwind cache: removed the least recently used tables", "files", files, "bytes", bytes, "bound", bound)
	}
	return files, bytes
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

// staleTemp is the age beyond which a temporary file of writeCache is
// taken for the leftover of an agent that died while writing it.
const staleTemp = time.Hour

// remove removes a cache file: removed says this call removed it, gone
// that it is not there any more (removed by another agent sharing the
// directory). An error is logged.
func (c Cache) remove(file string) (removed, gone bool) {
	err := os.Remove(file)
	switch {
	case err == nil:
		return true, true
	case errors.Is(err, os.ErrNotExist):
		return false, true
	default:
		c.log().Warn("unwind cache: cannot remove a file", "file", file, "err", err)
		return false, false
	}
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
