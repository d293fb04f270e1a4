package symbolize

import (
	"time"
)

// Mappings from snapshots. The sampler snapshots a process's executable
// mappings as it exits (profiler.Maps), which is all a process that lived
// less than a poll interval leaves behind. A snapshot names a file by
// device, inode and change time, not by path: the path comes from an
// earlier /proc/PID/maps read of another process mapping the same file,
// which binary records in files.

// SnapshotMapping is one executable mapping of a snapshot.
type SnapshotMapping struct {
	Start, End uint64
	// Offset is the file offset mapped at Start.
	Offset uint64
	// Dev (st_dev's encoding), Inode and CtimeNs identify a mapped file;
	// all zero for anonymous memory and the vDSO.
	Dev, Inode uint64
	CtimeNs    int64
	// VDSO marks the kernel's vDSO; a mapping without a file that is not
	// the vDSO is anonymous (JIT) memory.
	VDSO bool
}

// fileKey identifies a file as a snapshot does.
type fileKey struct {
	dev, ino uint64
	ctimeNs  int64
}

// knownFile is a file a /proc/PID/maps read named: its path and the key of
// its symbols in the binary cache.
type knownFile struct {
	path string
	key  binKey
}

// moduleUnnamed is the module of frames in a snapshot's file that no /proc
// read named.
const moduleUnnamed = "[unnamed file]"

// Has reports whether the symbolizer tracks pid (its mappings were read or
// given, or are being read) and, if so, marks it used and notes comm, as
// Observe does: a caller that gets true need not call Observe. comm is the
// process's command name in the sample at hand.
func (s *Symbolizer) Has(pid uint32, comm string) bool {
	s.mu.Lock()
	p, ok := s.procs.get(pid)
	if !ok {
		s.mu.Unlock()
		return false
	}
	p.usedAt = time.Now().UnixNano()
	s.mu.Unlock()
	p.mu.Lock()
	p.noteComm(comm)
	p.mu.Unlock()
	return true
}

// noteComm records comm, the command name of the process's sample at hand.
// A new command name means the process called exec since its mappings were
// read: the next address outside them reads them again at once, rather
// than after mapsRefreshInterval. That is the child of a vfork seen before
// its exec, whose /proc/PID/maps were its parent's: without it, the 20 ms
// process that followed was left unsymbolized. The caller holds p.mu.
func (p *process) noteComm(comm string) {
	if p.comm != comm {
		if p.comm != "" && !p.exited {
			p.readAt = time.Time{} // exec'd: maps may be re-read at once
		}
		p.comm = comm
	}
}

// SetMaps makes maps, a snapshot taken as the process exited, the
// executable mappings of pid, in place of any read before (the pid may
// have been reused, or the process may have called exec since). The
// process's later samples, already in the sampler's ring, are symbolized
// from it.
func (s *Symbolizer) SetMaps(pid uint32, maps []SnapshotMapping) {
	exec := make([]userMapping, 0, len(maps))
	var unknown uint64
	s.mu.Lock()
	for _, sm := range maps {
		m := mapping{start: sm.Start, end: sm.End, offset: sm.Offset, dev: sm.Dev, inode: sm.Inode, ctimeNs: sm.CtimeNs, exec: true}
		switch {
		case sm.Inode != 0:
			if f, ok := s.files.get(fileKey{sm.Dev, sm.Inode, sm.CtimeNs}); ok {
				m.path = f.path
			} else {
				m.path = moduleUnnamed
				unknown++
			}
		case sm.VDSO:
			m.path = "[vdso]"
		}
		exec = append(exec, userMapping{mapping: m})
	}
	p, ok := s.procs.get(pid)
	if !ok {
		p = &process{pid: pid}
		s.procs.add(pid, p)
	}
	p.usedAt = time.Now().UnixNano()
	p.exited = true
	s.mu.Unlock()
	s.stats.snapshots.Add(1)
	s.stats.snapshotUnknownFiles.Add(unknown)

	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range exec {
		if old := p.find(exec[i].start); old != nil && old.start == exec[i].start && old.end == exec[i].end &&
			old.dev == exec[i].dev && old.inode == exec[i].inode && old.offset == exec[i].offset {
			exec[i].loaded, exec[i].bin = old.loaded, old.bin
		}
	}
	p.maps, p.version, p.procRead = exec, s.versions.Add(1), time.Time{}
	// The process is gone: /proc has nothing more to say of it.
	p.readAt = time.Now()
}

// snapshotBinary returns the symbols of a snapshot mapping's file, when a
// /proc read named the file and its symbols are cached; ok is false when
// binary must look further.
func (s *Symbolizer) snapshotBinary(m *mapping) (e *binEntry, ok bool) {
	if m.ctimeNs == 0 {
		return nil, false
	}
	s.mu.Lock()
	f, ok := s.files.get(fileKey{m.dev, m.inode, m.ctimeNs})
	if ok {
		e, ok = s.bins.get(f.key)
	}
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	s.stats.binaryHits.Add(1)
	<-e.done
	return e, true
}
