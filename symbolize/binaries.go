package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
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
// closes done; the others wait on done.
type binEntry struct {
	done chan struct{}
	// bin is nil when the file could not be read.
	bin *binaryFile
}

// binary returns the symbol table of the file mapped by m in process pid,
// from the cache or loaded now, or nil when the file cannot be read. It is
// called the first time an address falls in the mapping, possibly after
// the process exited.
func (s *Symbolizer) binary(pid uint32, m *mapping) *binaryFile {
	fail := func(err error) *binaryFile {
		s.stats.binaryErrors.Add(1)
		s.opts.Logger.Debug("symbolize: read binary", "pid", pid, "path", m.path, "err", err)
		return nil
	}
	f, err := s.openMapped(pid, m)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return fail(err)
	}
	key := binKey{buildID: readBuildID(ef)}
	if key.buildID == "" {
		if key, err = fileKey(f); err != nil {
			return fail(err)
		}
	}

	s.mu.Lock()
	e, ok := s.bins.get(key)
	if !ok {
		e = &binEntry{done: make(chan struct{})}
		s.bins.add(key, e)
	}
	s.mu.Unlock()
	if ok {
		s.stats.binaryHits.Add(1)
		<-e.done
		return e.bin
	}
	s.stats.binaryMisses.Add(1)
	if e.bin, err = loadBinary(ef, key.buildID, s.opts.DebugDir); err != nil {
		fail(err)
	}
	close(e.done)
	return e.bin
}

// openMapped opens the regular file behind a file-backed mapping:
// through ProcRoot/PID/root so that a container's files are found in its
// mount namespace, then by the plain path if it is the same file (device
// and inode), which is how the files of a process that has exited are
// found, then through ProcRoot/PID/map_files, the only way to a deleted
// file.
func (s *Symbolizer) openMapped(pid uint32, m *mapping) (*os.File, error) {
	proc := filepath.Join(s.opts.ProcRoot, strconv.FormatUint(uint64(pid), 10))
	mapFile := filepath.Join(proc, "map_files", fmt.Sprintf("%x-%x", m.start, m.end))
	paths := []string{mapFile}
	if !m.deleted {
		paths = []string{filepath.Join(proc, "root", m.path), m.path, mapFile}
	}
	var errs []error
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := checkMapped(f, path == m.path, m); err != nil {
			f.Close()
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		return f, nil
	}
	return nil, fmt.Errorf("open %s of pid %d: %w", m.path, pid, errors.Join(errs...))
}

// checkMapped checks that f is a regular file (mapping a device is legal)
// and, when sameFile is set, that it has the mapping's device and inode: a
// plain path read outside the process's mount namespace, or after the file
// was replaced, may name another file.
func checkMapped(f *os.File, sameFile bool, m *mapping) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return errors.New("not a regular file")
	}
	if !sameFile {
		return nil
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("no device and inode to compare with the mapping's")
	}
	if sys.Dev != m.dev || sys.Ino != m.inode {
		return fmt.Errorf("device %#x inode %d, the mapping's are %#x and %d", sys.Dev, sys.Ino, m.dev, m.inode)
	}
	return nil
}

// fileKey identifies a file by device, inode, size and modification time.
func fileKey(f *os.File) (binKey, error) {
	st, err := f.Stat()
	if err != nil {
		return binKey{}, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return binKey{}, errors.New("no device and inode")
	}
	return binKey{dev: sys.Dev, ino: sys.Ino, size: st.Size(), mtime: st.ModTime().UnixNano()}, nil
}
