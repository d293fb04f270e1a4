package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mappedFile is a file mapped read-only, as the io.ReaderAt of an
// elf.File: the sections of that file are read as slices of the mapping
// (see sectionData) rather than copied onto the heap, so that loading a
// big binary's symbol table makes little garbage. Nothing read from the
// mapping may be kept once it is unmapped: loadBinary copies the names it
// keeps into the table's own string.
type mappedFile struct {
	data []byte
}

// openELF opens the ELF file f, mapped read-only when it can be (else read
// through f, its sections copied). close unmaps it: f itself may be
// closed before.
func openELF(f *os.File) (ef *elf.File, close func(), err error) {
	m, mapErr := mapFile(f)
	if mapErr != nil {
		ef, err = elf.NewFile(f)
		return ef, func() {}, err
	}
	if err = catchFaults(func() (err error) { ef, err = elf.NewFile(m); return err }); err != nil {
		m.unmap()
		return nil, nil, err
	}
	return ef, m.unmap, nil
}

// largeFolio is the largest page-cache folio (2 MiB, a PMD's span on
// x86-64 and arm64 with 4 KiB pages) a file's pages may be held in.
const largeFolio = 2 << 20

// mapFile maps the whole of f read-only, a page past a multiple of
// largeFolio: a fault maps the pages around it that are in the page cache,
// and Linux 6.18 maps a whole large folio when it fits in one page table.
// A binary freshly written (by a build, or go install) is held in 2 MiB
// folios, so where mmap puts a mapping by default (aligned to 2 MiB) one
// byte read mapped 2 MiB into the process, and loading MinIO's symbols
// held 14 MiB. Shifted by a page, no such folio fits in one page table,
// and a fault maps its fault-around window (64 KiB) only.
func mapFile(f *os.File) (*mappedFile, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	page := uintptr(os.Getpagesize())
	if st.Size() <= 0 || uint64(st.Size()) > uint64(math.MaxInt-largeFolio)-uint64(page) {
		return nil, fmt.Errorf("map %s: cannot map %d bytes", f.Name(), st.Size())
	}
	size := uintptr(st.Size())
	span := (size+page-1)&^(page-1) + largeFolio
	// Reserve room for the shifted mapping, then map the file over it.
	room, err := unix.MmapPtr(-1, 0, nil, span, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("map %s: reserve %d bytes: %w", f.Name(), span, err)
	}
	// The shift from room to a page past a multiple of largeFolio.
	shift := (largeFolio-uintptr(room)%largeFolio)%largeFolio + page
	rc, err := f.SyscallConn()
	if err != nil {
		_ = unix.MunmapPtr(room, span)
		return nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	var mapped unsafe.Pointer
	ctlErr := rc.Control(func(fd uintptr) {
		mapped, err = unix.MmapPtr(int(fd), 0, unsafe.Add(room, shift), size, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_FIXED)
	})
	if err = errors.Join(ctlErr, err); err != nil {
		_ = unix.MunmapPtr(room, span)
		return nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	// Give back the room on either side.
	_ = unix.MunmapPtr(room, shift)
	if end := shift + (size+page-1)&^(page-1); end < span {
		_ = unix.MunmapPtr(unsafe.Add(room, end), span-end)
	}
	return &mappedFile{data: unsafe.Slice((*byte)(mapped), size)}, nil
}

// unmap unmaps the file, once. A failure is a bug: an invalid mapping.
func (m *mappedFile) unmap() {
	if m.data == nil {
		return
	}
	if err := unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(m.data)), uintptr(len(m.data))); err != nil {
		panic(fmt.Sprintf("symbolize: unmap %d bytes at %p: %v", len(m.data), m.data, err))
	}
	m.data = nil
}

// ReadAt copies the file's bytes at off to p, as pread(2) would. Reading
// a page of a file truncated since it was mapped faults: every read of a
// mapped file runs inside catchFaults, once for all its reads rather than
// once a read, which turns the fault into an error. These are all of
// them: elf.NewFile in openELF, readBuildID, and loadBinary (the symbol
// tables, .gopclntab and the debug file, which it opens with openELF).
func (m *mappedFile) ReadAt(p []byte, off int64) (int, error) {
	return inMemory(m.data).ReadAt(p, off)
}

// sectionData returns the bytes of the section s: a slice of the mapping
// when its file was opened over a mappedFile and the section is stored
// uncompressed, else a copy on the heap (elf.Section.Data, which also
// decompresses SHF_COMPRESSED sections). A slice of the mapping is only
// valid until the file is unmapped.
func sectionData(s *elf.Section) ([]byte, error) {
	if data, ok := mappedSection(s); ok {
		return data, nil
	}
	return s.Data()
}

// mappedSection returns the bytes of the section s in the mapping its file
// was opened over, if it was and s is stored uncompressed within it. An
// uncompressed section's ReaderAt is an io.SectionReader over the file's.
func mappedSection(s *elf.Section) ([]byte, bool) {
	sr, ok := s.ReaderAt.(*io.SectionReader)
	if !ok || s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_COMPRESSED != 0 {
		return nil, false
	}
	r, off, n := sr.Outer()
	m, ok := r.(*mappedFile)
	if !ok || off < 0 || n < 0 || off > int64(len(m.data)) || n > int64(len(m.data))-off {
		return nil, false
	}
	return m.data[off : off+n : off+n], true
}

// inMemory is a section's bytes as an io.ReaderAt: readGoFuncs slices it
// rather than copying what it reads.
type inMemory []byte

// ReadAt copies the bytes at off to p.
func (b inMemory) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at %d: negative offset", off)
	}
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// catchFaults runs read, which may read mapped files, and returns its
// error, or an error if it faulted on an address: a mapped page beyond the
// end of a file truncated since it was mapped (a binary rewritten in place
// by a build) raises SIGBUS, which would otherwise crash the program (see
// debug.SetPanicOnFault). Other panics go on.
func catchFaults(read func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		fault, ok := r.(interface{ Addr() uintptr })
		if !ok {
			panic(r)
		}
		err = fmt.Errorf("fault at %#x reading a mapped file (truncated since it was mapped?): %v", fault.Addr(), r)
	}()
	return read()
}

// trimEvery is how many bytes of its mappings a load may map into the
// process between two trims (see pageTrim): about the most of them that
// are resident at once.
const trimEvery = 1 << 20

// readPerTrim is the least a load reads between two trims. A table read
// at random (a shared library's .dynstr: the names of its .dynsym, which
// is in hash order) maps a new window at almost every read: trimmed every
// trimEvery bytes mapped, libLLVM's 3 MB of names were faulted in again
// and again, 26 times the faults and 8 times the time of a load. Such a
// table stays mapped until its reads have paid for a trim: the bound is
// then the table, as it must be to read it at random without refaulting.
const readPerTrim = trimEvery / 4

// faultAround is how much of a mapping one read may map into the process:
// a page fault on a file mapping also maps the pages around it that are in
// the page cache, within an aligned window of fault_around_bytes (64 KiB
// by default; see mapFile for large folios).
const faultAround = 64 << 10

// pageTrim bounds the resident pages of the mapped files a load reads. A
// page of a mapping that has been read stays in the process's RSS until
// the mapping goes, so loading a 150 MB binary's symbols (MinIO's: its
// symbol and name tables, its Go function records) added 31 MB of
// file-backed RSS to the agent for as long as the load lasted. The load
// tells it where it reads (touch), and it counts what that maps: a whole
// fault-around window for each window read since the last trim, since one
// byte read maps its neighbours too: a count of the bytes read missed the
// pages of sparse reads (a few bytes of each Go function record, names
// scattered over a table). When trimEvery bytes are mapped (and
// readPerTrim read), the mappings' pages are dropped from the process
// (madvise MADV_DONTNEED). A
// private read-only file mapping reads a dropped page again from the page
// cache when it is touched again, so nothing read is lost: the names
// gathered so far, which point into the mapping, are still read right
// when buildSymtab copies them. A nil *pageTrim trims nothing.
type pageTrim struct {
	maps []*mappedFile
	seen [][]uint64 // per mapping, a bit for each window read since the last trim
	// mapped is the bytes of the windows read since the last trim, and
	// read the bytes read from them.
	mapped, read int
}

// trimOf returns a pageTrim for the mapping the file f was opened over, or
// nil if it was read another way.
func trimOf(f *elf.File) *pageTrim {
	for _, s := range f.Sections {
		sr, ok := s.ReaderAt.(*io.SectionReader)
		if !ok {
			continue
		}
		if r, _, _ := sr.Outer(); r != nil {
			if m, ok := r.(*mappedFile); ok {
				t := &pageTrim{}
				t.watch(m)
				return t
			}
		}
	}
	return nil
}

// watch makes t count and trim the mapping m.
func (t *pageTrim) watch(m *mappedFile) {
	start := uintptr(unsafe.Pointer(unsafe.SliceData(m.data)))
	windows := (start+uintptr(len(m.data))-1)/faultAround - start/faultAround + 1
	t.maps = append(t.maps, m)
	t.seen = append(t.seen, make([]uint64, (windows+63)/64))
}

// add makes t trim the mapping f was opened over too (a debug file's).
func (t *pageTrim) add(f *elf.File) {
	if t == nil {
		return
	}
	if o := trimOf(f); o != nil {
		t.watch(o.maps[0])
	}
}

// touch counts a read of n bytes at p (a read outside the mappings maps
// nothing), and trims the mappings when trimEvery bytes of them were
// mapped since the last trim, and at least readPerTrim bytes read.
func (t *pageTrim) touch(p unsafe.Pointer, n int) {
	if t == nil || n <= 0 {
		return
	}
	addr := uintptr(p)
	for i, m := range t.maps {
		start := uintptr(unsafe.Pointer(unsafe.SliceData(m.data)))
		if m.data == nil || addr < start || addr-start >= uintptr(len(m.data)) {
			continue
		}
		first := addr/faultAround - start/faultAround
		last := min(addr+uintptr(n)-1, start+uintptr(len(m.data))-1)/faultAround - start/faultAround
		t.read += n
		seen := t.seen[i]
		for w := first; w <= last; w++ {
			if bit := uint64(1) << (w % 64); seen[w/64]&bit == 0 {
				seen[w/64] |= bit
				t.mapped += faultAround
			}
		}
		break
	}
	if t.mapped >= trimEvery && t.read >= readPerTrim {
		t.trim()
	}
}

// trim drops the mappings' pages from the process, and counts again.
func (t *pageTrim) trim() {
	for i, m := range t.maps {
		if m.data == nil {
			continue
		}
		// Advice on a valid mapping does not fail: if it did, the pages
		// would simply stay until the unmap.
		_ = unix.Madvise(m.data, unix.MADV_DONTNEED)
		clear(t.seen[i])
	}
	t.mapped, t.read = 0, 0
}

// touchString counts a read of the string s (see touch).
func (t *pageTrim) touchString(s string) {
	t.touch(unsafe.Pointer(unsafe.StringData(s)), len(s))
}
