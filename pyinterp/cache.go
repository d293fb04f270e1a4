package pyinterp

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/heatscope/heatscope/lru"
)

// FileID names one version of a file as stat(2) sees it: its device,
// inode, size and modification time (a file rewritten in place is another
// binary). The sampler's unwinder names a mapped file so for its unwind
// table, and the symbolizer for its symbols: both name it alike without a
// stat of their own.
type FileID struct {
	Dev, Inode uint64
	Size       int64
	MtimeNs    int64
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
// however many processes map it and however many readers ask (the
// sampler, to set its processes up; the symbolizer, to name their
// frames: recorder.Open gives both one Cache). Failures are remembered
// too (a binary that is no interpreter, or an unsupported one, is not
// read again), except a path that no longer exists: that says nothing of
// the binary, only that the process whose /proc/PID/root named it has
// exited (a process seen from its exit snapshot), and the next process
// mapping the binary reads it. It is safe for concurrent use: a second
// reader asking for a binary being read waits for that read.
type Cache struct {
	entries *lru.Cache[FileID, result]
	reads   atomic.Uint64

	mu      sync.Mutex
	reading map[FileID]*pendingRead
}

type result struct {
	in  *Interpreter
	err error
}

// pendingRead is a read under way; done is closed when r is set.
type pendingRead struct {
	done chan struct{}
	r    result
}

// NewCache returns a cache of at most n binaries' answers.
func NewCache(n int) *Cache {
	return &Cache{entries: lru.New[FileID, result](int64(n), func(result) int64 { return 1 }, nil), reading: map[FileID]*pendingRead{}}
}

// Lookup returns the interpreter in the file id, reading it from path
// (which must be that file, e.g. /proc/PID/root/usr/bin/python3.11) the
// first time; fresh reports whether this call read it (the caller warns
// once per binary about an error it returns).
func (c *Cache) Lookup(id FileID, path string) (in *Interpreter, fresh bool, err error) {
	c.mu.Lock()
	if r, ok := c.entries.Get(id); ok {
		c.mu.Unlock()
		return r.in, false, r.err
	}
	if p, ok := c.reading[id]; ok {
		c.mu.Unlock()
		<-p.done
		return p.r.in, false, p.r.err
	}
	p := &pendingRead{done: make(chan struct{})}
	c.reading[id] = p
	c.mu.Unlock()

	c.reads.Add(1)
	in, err = Open(path)
	p.r = result{in: in, err: err}
	c.mu.Lock()
	if !errors.Is(err, fs.ErrNotExist) {
		c.entries.Add(id, p.r)
	}
	delete(c.reading, id)
	c.mu.Unlock()
	close(p.done)
	return in, true, err
}

// Len returns how many binaries' answers the cache holds.
func (c *Cache) Len() int { return c.entries.Len() }

// Reads returns how many times the cache read a binary's file.
func (c *Cache) Reads() uint64 { return c.reads.Load() }
