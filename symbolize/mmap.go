package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"

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

// mapFile maps the whole of f read-only.
func mapFile(f *os.File) (*mappedFile, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	if st.Size() <= 0 || st.Size() > math.MaxInt {
		return nil, fmt.Errorf("map %s: cannot map %d bytes", f.Name(), st.Size())
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	var data []byte
	ctlErr := rc.Control(func(fd uintptr) {
		data, err = unix.Mmap(int(fd), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
	})
	if err = errors.Join(ctlErr, err); err != nil {
		return nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	return &mappedFile{data: data}, nil
}

// unmap unmaps the file, once. A failure is a bug: an invalid mapping.
func (m *mappedFile) unmap() {
	if m.data == nil {
		return
	}
	if err := unix.Munmap(m.data); err != nil {
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

// trimEvery is how many bytes a load reads from its mappings between two
// trims (see pageTrim): about the most of them that are resident at once.
const trimEvery = 1 << 20

// pageTrim bounds the resident pages of the mapped files a load reads. A
// page of a mapping that has been read stays in the process's RSS until
// the mapping goes, so loading a 150 MB binary's symbols (MinIO's: its
// symbol and name tables, its Go function records) added 31 MB of
// file-backed RSS to the agent for as long as the load lasted. The load
// counts what it reads (read); every trimEvery bytes the mappings' pages
// are dropped from the process (madvise MADV_DONTNEED). A private
// read-only file mapping reads a dropped page again from the page cache
// when it is touched again, so nothing read is lost: the names gathered
// so far, which point into the mapping, are still read right when
// buildSymtab copies them. A nil *pageTrim trims nothing.
type pageTrim struct {
	maps []*mappedFile
	read int // bytes read since the last trim
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
				return &pageTrim{maps: []*mappedFile{m}}
			}
		}
	}
	return nil
}

// add makes t trim the mapping f was opened over too (a debug file's).
func (t *pageTrim) add(f *elf.File) {
	if t == nil {
		return
	}
	if o := trimOf(f); o != nil {
		t.maps = append(t.maps, o.maps...)
	}
}

// count counts n bytes read from the mappings, and trims them when
// trimEvery bytes have been read since the last trim.
func (t *pageTrim) count(n int) {
	if t == nil {
		return
	}
	if t.read += n; t.read < trimEvery {
		return
	}
	t.read = 0
	for _, m := range t.maps {
		if m.data == nil {
			continue
		}
		// Advice on a valid mapping does not fail: if it did, the pages
		// would simply stay until the unmap.
		_ = unix.Madvise(m.data, unix.MADV_DONTNEED)
	}
}
