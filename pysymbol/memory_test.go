package pysymbol

import (
	"bytes"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestReadObjectsAtTheEndOfAMapping reads, from this process's memory,
// three objects in one call where the speculative read of the first runs
// past the end of its mapping into a page that cannot be read: every
// object's head is still read, and what follows the cut is read again.
func TestReadObjectsAtTheEndOfAMapping(t *testing.T) {
	page := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Mprotect(mem[page:], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	for i := range page {
		mem[i] = byte(i % 251)
	}
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	const head, more = 48, 192
	objAt := func(off int) *object {
		b := make([]byte, head+more)
		return &object{addr: base + uint64(off), head: b[: head : head+more], more: b[head:]}
	}
	last := page - head - 8 // its head fits; what would follow does not
	objs := []*object{objAt(last), objAt(64), objAt(1024)}
	if err := readObjects(uint32(os.Getpid()), objs); err != nil {
		t.Fatal(err)
	}
	for i, o := range objs {
		off := int(o.addr - base)
		want := min(head+more, page-off)
		if o.n != want || !bytes.Equal(o.head[:o.n], mem[off:off+want]) {
			t.Errorf("object %d at %d: %d bytes read, want %d of the mapping", i, off, o.n, want)
		}
	}
	// A head that cannot be read is an error.
	if err := readObjects(uint32(os.Getpid()), []*object{objAt(64), objAt(page - 8)}); err == nil {
		t.Error("a head across the end of the mapping read without an error")
	}
}
