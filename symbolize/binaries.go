package symbolize

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heatscope/heatscope/internal/rawsys"
)

// binKey identifies a binary in the cache: by build id, so that the same
// binary seen through different paths, containers or inodes is loaded
// once, or by the file's identity when it has no build id.
type binKey struct {
	buildID     string
	dev, ino    uint64
	size, mtime int64
}

// binEntry is a cached binary. The first process to need it loads it and
// closes done; the others wait on done. Processes' mappings hold the
// entry, not the binary: evicting the entry drops the binary, so the
// symbol tables in memory are those of the cache, within MaxBinaries and
// MaxBinaryBytes, however many processes are cached.
type binEntry struct {
	done chan struct{}
	// bin is nil when the file could not be read, and once the entry was
	// evicted.
	bin atomic.Pointer[binaryFile]
	// evicted is set when the entry left the cache: a mapping that holds
	// it looks the binary up again.
	evicted atomic.Bool
	// bytes is bin's, once counted in Symbolizer.binBytes; guarded by
	// the Symbolizer's mu.
	bytes int64
}

// binary returns the entry's symbol table once loaded, nil when the file
// could not be read, and stale when the entry was evicted (its binary must
// be looked up again).
func (e *binEntry) binary() (bin *binaryFile, stale bool) {
	<-e.done
	if bin = e.bin.Load(); bin == nil && e.evicted.Load() {
		return nil, true
	}
	return bin, false
}

// evict drops the entry's binary, once it left the cache. The
// Symbolizer's mu must be held.
func (s *Symbolizer) evict(e *binEntry) {
	s.binBytes -= e.bytes
	e.bytes = 0
	e.evicted.Store(true)
	e.bin.Store(nil)
}

// fileID identifies a file's content as stat(2) sees it: device, inode,
// size, modification and change times. Rewriting the file, or a new file
// that reuses the inode, changes its ctime.
type fileID struct {
	dev, ino           uint64
	size, mtime, ctime int64
}

func statID(st *syscall.Stat_t) fileID {
	return fileID{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// binary returns the cache entry of the file mapped by m in process pid,
// found in the cache or loaded now, or nil when the file cannot be read. It is
// called the first time an address falls in the mapping, possibly after
// the process exited.
//
// A file already read is recognised by a stat(2) of its path (see
// fileID): under process churn every new process maps the same few
// binaries, and opening each to read its ELF headers and build id cost
// more than the rest of the process's first sample.
func (s *Symbolizer) binary(pid uint32, m *mapping) *binEntry {
	if e, ok := s.snapshotBinary(m); ok {
		return e
	}
	if m.path == moduleUnnamed {
		return nil
	}
	if id, err := s.statMapped(pid, m); err == nil {
		s.mu.Lock()
		key, ok := s.ids.get(id)
		var e *binEntry
		if ok {
			e, ok = s.bins.get(key)
			s.files.add(fileKey{m.dev, m.inode, id.ctime}, knownFile{path: m.path, key: key})
		}
		s.mu.Unlock()
		if ok {
			s.stats.binaryHits.Add(1)
			<-e.done
			return e
		}
	}
	span := s.stats.symbolsCPU.Start()
	defer span.Stop()
	fail := func(err error) *binEntry {
		s.stats.binaryErrors.Add(1)
		s.opts.Logger.Debug("symbolize: read binary", "pid", pid, "path", m.path, "err", err)
		return nil
	}
	f, id, err := s.openMapped(pid, m)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	ef, closeELF, err := openELF(f)
	if err != nil {
		return fail(err)
	}
	defer closeELF()
	key := binKey{buildID: readBuildID(ef)}
	if key.buildID == "" {
		key = binKey{dev: id.dev, ino: id.ino, size: id.size, mtime: id.mtime}
	}

	s.mu.Lock()
	s.ids.add(id, key)
	s.files.add(fileKey{m.dev, m.inode, id.ctime}, knownFile{path: m.path, key: key})
	e, ok := s.bins.get(key)
	if !ok {
		e = &binEntry{done: make(chan struct{})}
		s.bins.add(key, e)
	}
	s.mu.Unlock()
	if ok {
		s.stats.binaryHits.Add(1)
		<-e.done
		return e
	}
	s.stats.binaryMisses.Add(1)
	if key.buildID != "" {
		if bin, ok := s.cachedSymbols(key.buildID); ok {
			s.stats.binaryDiskHits.Add(1)
			s.account(key, e, bin)
			close(e.done)
			return e
		}
	}
	started := time.Now()
	bin, err := loadBinary(ef, key.buildID, s.opts.DebugDir)
	if err != nil {
		fail(err)
	} else {
		s.opts.Logger.Debug("symbolize: loaded a binary's symbols", "pid", pid, "path", m.path, "build_id", key.buildID, "bytes", bin.bytes(), "took", time.Since(started))
		if key.buildID != "" {
			s.saveSymbols(bin)
		}
	}
	s.account(key, e, bin)
	close(e.done)
	return e
}

// account stores bin, just loaded (nil if it could not be), in its entry,
// counts it in the cache's bytes and evicts the least recently used
// binaries while they exceed MaxBinaryBytes, but not the binary just
// loaded.
func (s *Symbolizer) account(key binKey, e *binEntry, bin *binaryFile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cached, ok := s.bins.peek(key); !ok || cached != e || bin == nil {
		return // failed, or evicted while it loaded (and so stays nil)
	}
	e.bin.Store(bin)
	e.bytes = bin.bytes()
	s.binBytes += e.bytes
	for s.binBytes > s.opts.MaxBinaryBytes && s.bins.len() > 1 {
		if oldest, ok := s.bins.oldest(); ok && oldest == e {
			break
		}
		s.bins.evictOldest()
	}
}

// mappedPath is a path to try for the file of a mapping.
type mappedPath struct {
	path string
	// sameFile is set for a path that may name another file than the
	// mapped one: it must have the mapping's device and inode.
	sameFile bool
}

// mappedPaths returns where the regular file behind a file-backed mapping
// may be found, in order: through ProcRoot/PID/root so that a container's
// files are found in its mount namespace, then by the plain path if it is
// the same file (device and inode), which is how the files of a process
// that has exited are found, then through ProcRoot/PID/map_files, the only
// way to a deleted file.
func (s *Symbolizer) mappedPaths(pid uint32, m *mapping) []mappedPath {
	proc := filepath.Join(s.opts.ProcRoot, strconv.FormatUint(uint64(pid), 10))
	mapFile := mappedPath{path: filepath.Join(proc, "map_files", fmt.Sprintf("%x-%x", m.start, m.end))}
	if m.deleted {
		return []mappedPath{mapFile}
	}
	return []mappedPath{{path: filepath.Join(proc, "root", m.path)}, {path: m.path, sameFile: true}, mapFile}
}

// statMapped returns the identity of the file behind a file-backed
// mapping, from the first of its paths that names it. The plain path is
// tried first: when it has the mapping's device and inode it is the mapped
// file, and it is found without a walk through /proc (BenchmarkNewProcess,
// medians of 6 interleaved runs: 49 to 44 µs per new process).
func (s *Symbolizer) statMapped(pid uint32, m *mapping) (fileID, error) {
	paths := s.mappedPaths(pid, m)
	if len(paths) == 3 {
		paths[0], paths[1] = paths[1], paths[0]
	}
	var errs []error
	for _, p := range paths {
		var st syscall.Stat_t
		if err := rawsys.Stat(p.path, &st); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := checkMapped(&st, p.sameFile, m); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.path, err))
			continue
		}
		return statID(&st), nil
	}
	return fileID{}, fmt.Errorf("stat %s of pid %d: %w", m.path, pid, errors.Join(errs...))
}

// openMapped opens the regular file behind a file-backed mapping, from the
// first of its paths that names it, and returns its identity.
func (s *Symbolizer) openMapped(pid uint32, m *mapping) (*os.File, fileID, error) {
	var errs []error
	for _, p := range s.mappedPaths(pid, m) {
		f, err := os.Open(p.path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var st syscall.Stat_t
		err = syscall.Fstat(int(f.Fd()), &st)
		if err == nil {
			err = checkMapped(&st, p.sameFile, m)
		}
		if err != nil {
			f.Close()
			errs = append(errs, fmt.Errorf("%s: %w", p.path, err))
			continue
		}
		return f, statID(&st), nil
	}
	return nil, fileID{}, fmt.Errorf("open %s of pid %d: %w", m.path, pid, errors.Join(errs...))
}

// checkMapped checks that st is a regular file (mapping a device is legal)
// and, when sameFile is set, that it has the mapping's device and inode: a
// plain path read outside the process's mount namespace, or after the file
// was replaced, may name another file.
func checkMapped(st *syscall.Stat_t, sameFile bool, m *mapping) error {
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return errors.New("not a regular file")
	}
	if sameFile && (st.Dev != m.dev || st.Ino != m.inode) {
		return fmt.Errorf("device %#x inode %d, the mapping's are %#x and %d", st.Dev, st.Ino, m.dev, m.inode)
	}
	return nil
}
