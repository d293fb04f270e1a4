// Package pysymbol names the Python frames the sampler reads: given a
// process, the address of a code object and the offset of the instruction
// a frame runs in it (pyinterp.Frame), it reads the code object from the process's memory (process_vm_readv)
// with the offsets package pyinterp gives for the interpreter's version,
// and returns its qualified name (co_qualname), file (co_filename), first
// line (co_firstlineno) and the line being run, from its location table
// (co_linetable, see Line).
//
// Code objects are cached by process and address in one bounded LRU
// (package lru), weighed by their bytes: a function sampled again costs a
// map lookup and a walk of its location table. A process's entries stay
// until Forget drops them, which the symbolizer does once the process has
// exited and its last samples were symbolized, so that a process that
// exits keeps its names for the samples already taken. What a process's
// memory holds is untrusted: lengths are bounded and objects that do not
// look like what the layout says are refused (errGarbage), never followed.
package pysymbol

import (
	"errors"
	"sync/atomic"

	"github.com/heatscope/heatscope/lru"
	"github.com/heatscope/heatscope/pyinterp"
)

// Process is one Python process as the resolver reads it.
type Process struct {
	// PID is its process id, and StartTime when it started (the
	// start-time field of /proc/PID/stat, in clock ticks since boot; see
	// StartTime): together, the process's identity, which a reused pid
	// does not share.
	PID       uint32
	StartTime uint64
	// Image tells the program images a process runs apart: a caller
	// changes it when the process's mappings change (an exec keeps the
	// pid and start time), so that a code object of a new image is not
	// taken for one of the old image at the same address; the
	// symbolizer hashes the mappings.
	Image uint64
	// Layout is where its interpreter's version keeps what is read.
	Layout *pyinterp.Layout
}

// key is a cache entry's: the process's identity and image, and the code
// object's address.
type key struct {
	pid   uint32
	start uint64
	image uint64
	code  uint64
}

// Resolver reads and caches code objects. It is safe for concurrent use.
type Resolver struct {
	codes *lru.Cache[key, *Code]
	stats struct {
		hits, misses, errors, exited atomic.Uint64
	}
}

// DefaultMaxBytes bounds the cache when New is given no bound: about
// 40,000 functions of typical names and location tables.
const DefaultMaxBytes = 16 << 20

// New returns a resolver whose cache holds at most maxBytes (0:
// DefaultMaxBytes) of code objects' names and location tables.
func New(maxBytes int64) *Resolver {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return &Resolver{codes: lru.New[key, *Code](maxBytes, (*Code).size, nil)}
}

// Code returns the code object at addr in process p, from the cache or
// read from the process's memory. The error of a failed read wraps
// ErrExited when the process has exited.
func (r *Resolver) Code(p Process, addr uint64) (*Code, error) {
	k := key{p.PID, p.StartTime, p.Image, addr}
	if c, ok := r.codes.Get(k); ok {
		r.stats.hits.Add(1)
		return c, nil
	}
	c, err := readCode(p.PID, p.Layout, addr)
	if err != nil {
		r.stats.errors.Add(1)
		if errors.Is(err, ErrExited) {
			r.stats.exited.Add(1)
		}
		return nil, err
	}
	r.stats.misses.Add(1)
	r.codes.Add(k, c)
	return c, nil
}

// Forget drops the cached code objects of the processes gone says are
// gone (by pid and start time; every image), and returns how many.
func (r *Resolver) Forget(gone func(pid uint32, start uint64) bool) int {
	return r.codes.RemoveFunc(func(k key) bool { return gone(k.pid, k.start) })
}

// Stats are a resolver's counters since New and its cache now.
type Stats struct {
	// Hits counts code objects found in the cache, Misses those read from
	// a process and cached.
	Hits, Misses uint64
	// Errors counts code objects that could not be read (their frames
	// are named by address), Exited those of them whose process had
	// exited.
	Errors, Exited uint64
	// Codes is the number of code objects cached, Bytes about the memory
	// they take.
	Codes int
	Bytes int64
}

// Stats returns the counters and the cache's size.
func (r *Resolver) Stats() Stats {
	return Stats{
		Hits:   r.stats.hits.Load(),
		Misses: r.stats.misses.Load(),
		Errors: r.stats.errors.Load(),
		Exited: r.stats.exited.Load(),
		Codes:  r.codes.Len(),
		Bytes:  r.codes.Weight(),
	}
}
