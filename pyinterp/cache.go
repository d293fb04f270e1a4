package pyinterp

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/heatscope/heatscope/lru"
)

// FileID names one version of a file: its device, inode and change time
// (a file rewritten in place is another binary).
type FileID struct {
	Dev, Inode, CtimeNs uint64
}

// MayBeInterpreter reports whether a mapped file's path may hold CPython
// (its base name starts with "python" or "libpython": python3.11,
// libpython3.12.so.1.0; not an extension module's
// zlib.cpython-311-x86_64-linux-gnu.so): the test that keeps every other
// binary from being opened at all. An interpreter linked into a binary of
// another name is not found.
func MayBeInterpreter(path string) bool {
	base := filepath.Base(path)
	return strings.HasPrefix(base, "python") || strings.HasPrefix(base, "libpython")
}

// Cache remembers what each binary is, so that a binary is read once
// however many processes map it; failures are remembered too (a binary
// that is no interpreter, or an unsupported one, is not read again),
// except a path that no longer exists: that says nothing of the binary,
// only that the process whose /proc/PID/root named it has exited (a
// process seen from its exit snapshot), and the next process mapping the
// binary reads it. It is safe for concurrent use.
type Cache struct {
	entries *lru.Cache[FileID, result]
}

type result struct {
	in  *Interpreter
	err error
}

// NewCache returns a cache of at most n binaries' answers.
func NewCache(n int) *Cache {
	return &Cache{entries: lru.New[FileID, result](int64(n), func(result) int64 { return 1 }, nil)}
}

// Lookup returns the interpreter in the file id, reading it from path
// (which must be that file, e.g. /proc/PID/root/usr/bin/python3.11) the
// first time; fresh reports whether this call read it (the caller warns
// once per binary about an error it returns).
func (c *Cache) Lookup(id FileID, path string) (in *Interpreter, fresh bool, err error) {
	if r, ok := c.entries.Get(id); ok {
		return r.in, false, r.err
	}
	in, err = Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, true, err
	}
	c.entries.Add(id, result{in: in, err: err})
	return in, true, err
}

// Len returns how many binaries' answers the cache holds.
func (c *Cache) Len() int { return c.entries.Len() }
