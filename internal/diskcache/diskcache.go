// Package diskcache keeps files named by a key (a build id) in one
// directory within a byte bound: each written whole or not at all (a
// temporary file renamed), the least recently used removed first (by
// modification time; a file read is touched). The agent's caches of
// things that cannot change while a binary's build id stays the same
// (unwind tables, symbol tables) are such directories; what is in a file
// is the caller's format.
package diskcache

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Dir is one cache directory. Its zero value (no Path) caches nothing.
type Dir struct {
	// Path is the directory ("" for no cache).
	Path string
	// Ext ends every file's name (".table"); only such files are counted
	// and pruned, so that other files in Path are left alone.
	Ext string
	// MaxBytes bounds the files (at most 0: no bound).
	MaxBytes int64
	// What names the cache in log lines ("unwind cache").
	What string
	// Log receives the errors of pruning and touching files, which are
	// never fatal (nil: slog.Default()).
	Log *slog.Logger
	// Pruned, when set, counts the files removed to stay within MaxBytes.
	Pruned *PruneStats
}

// PruneStats counts the cache files removed to stay within the bound, and
// their bytes. Safe for concurrent use.
type PruneStats struct {
	Files, Bytes atomic.Uint64
}

// keyPattern is what a key may be to name a file: a build id in hex.
var keyPattern = regexp.MustCompile(`^[0-9a-f]{8,128}$`)

// File names the file of key, or "" when there is no cache or key cannot
// name a file.
func (d Dir) File(key string) string {
	if d.Path == "" || !keyPattern.MatchString(key) {
		return ""
	}
	return filepath.Join(d.Path, key+d.Ext)
}

// Has reports whether the cache holds a file for key.
func (d Dir) Has(key string) bool {
	file := d.File(key)
	if file == "" {
		return false
	}
	_, err := os.Stat(file)
	return err == nil
}

// Read returns the content of key's file and marks it as just used.
func (d Dir) Read(key string) ([]byte, error) {
	file := d.File(key)
	if file == "" {
		return nil, os.ErrNotExist
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if err := os.Chtimes(file, now, now); err != nil {
		d.log().Warn(d.What+": cannot mark a file as used", "file", file, "err", err)
	}
	return b, nil
}

// Write writes key's file whole or not at all, then prunes the cache to
// its bound. With no cache, or a key that cannot name a file, it writes
// nothing and says so.
func (d Dir) Write(key string, data []byte) error {
	file := d.File(key)
	if file == "" {
		return errors.New(d.What + ": no file for key " + key)
	}
	if err := os.MkdirAll(d.Path, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(d.Path, d.tempPrefix()+"*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	d.Prune()
	return nil
}

// tempPrefix starts the names of Write's temporary files: ".table-" for
// Ext ".table".
func (d Dir) tempPrefix() string { return "." + strings.TrimPrefix(d.Ext, ".") + "-" }

func (d Dir) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.Default()
}

// staleTemp is the age beyond which a temporary file of Write is taken
// for the leftover of an agent that died while writing it.
const staleTemp = time.Hour

// Prune removes the least recently used files until the rest fit within
// MaxBytes, and returns how many files and bytes it removed. It does
// nothing while they fit. Errors are logged, never returned: a file that
// cannot be removed stays, and the next prune tries again.
func (d Dir) Prune() (files int, bytes int64) {
	if d.Path == "" || d.MaxBytes <= 0 {
		return 0, 0
	}
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			d.log().Warn(d.What+": cannot list files to prune", "dir", d.Path, "err", err)
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
		mine := strings.HasSuffix(e.Name(), d.Ext) && !strings.HasPrefix(e.Name(), ".")
		if !mine && !strings.HasPrefix(e.Name(), d.tempPrefix()) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if !mine {
			// A temporary file Write left behind when the agent died
			// between writing and renaming it.
			if time.Since(info.ModTime()) > staleTemp {
				d.remove(filepath.Join(d.Path, e.Name()))
			}
			continue
		}
		all = append(all, cached{e.Name(), info.Size(), info.ModTime()})
		total += info.Size()
	}
	if total <= d.MaxBytes {
		return 0, 0
	}
	// Oldest first; the name orders files of the same time, so that two
	// agents sharing a directory agree.
	slices.SortFunc(all, func(a, b cached) int {
		if c := a.mtime.Compare(b.mtime); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	for _, f := range all {
		if total <= d.MaxBytes {
			break
		}
		removed, gone := d.remove(filepath.Join(d.Path, f.name))
		if gone {
			total -= f.size
		}
		if removed {
			files++
			bytes += f.size
		}
	}
	if d.Pruned != nil {
		d.Pruned.Files.Add(uint64(files))
		d.Pruned.Bytes.Add(uint64(bytes))
	}
	if files > 0 {
		d.log().Debug(d.What+": removed the least recently used files", "files", files, "bytes", bytes, "bound", d.MaxBytes)
	}
	return files, bytes
}

// remove removes a cache file: removed says this call removed it, gone
// that it is not there any more (removed by another agent sharing the
// directory). An error is logged.
func (d Dir) remove(file string) (removed, gone bool) {
	err := os.Remove(file)
	switch {
	case err == nil:
		return true, true
	case errors.Is(err, os.ErrNotExist):
		return false, true
	default:
		d.log().Warn(d.What+": cannot remove a file", "file", file, "err", err)
		return false, false
	}
}
