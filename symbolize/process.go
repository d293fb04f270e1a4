package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/heatscope/heatscope/sample"
)

// mapsRefreshInterval bounds how often a process's maps are re-read when
// an address falls outside them (after a dlopen or an exec).
const mapsRefreshInterval = time.Second

// process is what is known of one process: its executable mappings, read
// when the process was first seen, with the binaries loaded so far, and
// its perf map.
type process struct {
	mu  sync.Mutex
	pid uint32
	// maps holds the executable mappings, sorted by start address.
	maps []userMapping
	// readAt is when maps was last read (or tried).
	readAt time.Time
	// perf is the JIT perf map, opened the first time it is needed.
	perf *perfMap
}

// userMapping is an executable mapping with, for a file, its binary,
// loaded the first time an address falls in the mapping.
type userMapping struct {
	mapping
	// loaded is set once the file was read, or tried.
	loaded bool
	// bin is the file's symbol table; nil before it is loaded or when the
	// file could not be read.
	bin *binaryFile
}

// readMaps (re-)reads the process's executable mappings. Mappings
// unchanged since the last read keep their binary. If the maps cannot be
// read, as when the process has exited, the old ones stay. p.mu must be
// held.
func (s *Symbolizer) readMaps(p *process) {
	p.readAt = time.Now()
	s.stats.mapsReads.Add(1)
	maps, err := readMapsFile(filepath.Join(s.opts.ProcRoot, strconv.FormatUint(uint64(p.pid), 10), "maps"))
	if err != nil {
		s.stats.mapsErrors.Add(1)
		s.opts.Logger.Debug("symbolize: read maps", "pid", p.pid, "err", err)
		return
	}
	var exec []userMapping
	for _, m := range maps {
		if !m.exec {
			continue
		}
		um := userMapping{mapping: m}
		if old := p.find(m.start); old != nil && old.mapping == m {
			um = *old
		}
		exec = append(exec, um)
	}
	p.maps = exec
}

func readMapsFile(path string) ([]mapping, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	maps, err := parseMaps(f)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return maps, nil
}

// find returns the executable mapping containing addr, or nil.
func (p *process) find(addr uint64) *userMapping {
	// By index: a userMapping is too large to be copied for each probe.
	i := sort.Search(len(p.maps), func(i int) bool { return p.maps[i].end > addr })
	if i == len(p.maps) || addr < p.maps[i].start {
		return nil
	}
	return &p.maps[i]
}

// resolveUser returns the frame of the user address addr, looking up
// lookup (addr-1 for return addresses), and whether it was named.
// p.mu must be held.
func (s *Symbolizer) resolveUser(p *process, addr, lookup uint64) (sample.Frame, bool) {
	m := p.find(lookup)
	if m == nil && time.Since(p.readAt) >= mapsRefreshInterval {
		s.readMaps(p)
		m = p.find(lookup)
	}
	if m == nil {
		return sample.Frame{Function: unknownName(moduleUnknown, addr), Module: moduleUnknown, Address: addr}, false
	}

	switch m.class() {
	case classAnon:
		if p.perf == nil {
			p.perf = newPerfMap(filepath.Join(s.opts.PerfMapDir, fmt.Sprintf("perf-%d.map", p.pid)))
		}
		if name, ok := p.perf.lookup(lookup); ok {
			return sample.Frame{Function: name, Module: moduleJIT, Address: addr, Kind: sample.KindJIT}, true
		}
		return sample.Frame{Function: unknownName(moduleAnon, addr), Module: moduleAnon, Address: addr}, false
	case classPseudo:
		off := addr - m.start
		return sample.Frame{Function: unknownName(m.path, off), Module: m.path, Address: off, Kind: sample.KindUser}, false
	}

	off := addr - m.start + m.offset
	f := sample.Frame{Module: m.path, Address: off, Kind: sample.KindUser}
	if !m.loaded {
		m.bin, m.loaded = s.binary(p.pid, &m.mapping), true
	}
	if m.bin == nil {
		f.Function = unknownName(m.path, off)
		return f, false
	}
	f.BuildID = m.bin.buildID
	f.Address = m.bin.vaddr(off)
	if name, ok := m.bin.lookup(f.Address - (addr - lookup)); ok {
		f.Function = name
		return f, true
	}
	f.Function = unknownName(m.path, f.Address)
	return f, false
}

// Modules of user frames outside any file.
const (
	moduleUnknown = "[unknown]" // outside every mapping
	moduleAnon    = "[anon]"    // anonymous memory without a perf map entry
	moduleJIT     = "[jit]"     // named by the perf map
)
