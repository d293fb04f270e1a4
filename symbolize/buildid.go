package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"io"
	"iter"
	"strings"
)

// Note types of the build ids.
const (
	noteGNUBuildID = 3 // NT_GNU_BUILD_ID, owner "GNU"
	noteGoBuildID  = 4 // owner "Go"
)

// readBuildID returns the file's GNU build id in hex or, when it has none
// (Go binaries linked with -B none or by older toolchains), the Go build id
// as it is written ("actionID/contentID"), or "" when it has neither.
// Notes are read from the SHT_NOTE sections, or from the PT_NOTE segments
// when the section headers are gone. A file mapped and truncated since
// (a fault reading it) has none.
func readBuildID(f *elf.File) (id string) {
	if catchFaults(func() error { id = buildIDNotes(f); return nil }) != nil {
		return ""
	}
	return id
}

// buildIDNotes is readBuildID, reading f without catching faults.
func buildIDNotes(f *elf.File) string {
	var readers []noteSource
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOTE {
			readers = append(readers, noteSource{s.Open(), s.Addralign})
		}
	}
	if len(readers) == 0 {
		for _, p := range f.Progs {
			if p.Type == elf.PT_NOTE {
				readers = append(readers, noteSource{p.Open(), p.Align})
			}
		}
	}
	goID := ""
	for _, src := range readers {
		data, err := io.ReadAll(io.LimitReader(src.r, 1<<16))
		if err != nil {
			continue
		}
		for n := range notes(data, f.ByteOrder, src.align) {
			switch {
			case n.typ == noteGNUBuildID && n.name == "GNU":
				return hex.EncodeToString(n.desc)
			case n.typ == noteGoBuildID && n.name == "Go" && goID == "":
				goID = string(bytes.TrimRight(n.desc, "\x00"))
			}
		}
	}
	return goID
}

type noteSource struct {
	r     io.ReadSeeker
	align uint64
}

type note struct {
	name string
	typ  uint32
	desc []byte
}

// notes iterates over the ELF notes in data: 4-byte name size, descriptor
// size and type, then the name and the descriptor, each starting at an
// offset that is a multiple of the alignment (4, or 8 for 8-aligned note
// sections such as GNU properties).
func notes(data []byte, order binary.ByteOrder, align uint64) iter.Seq[note] {
	pad := uint64(4)
	if align == 8 {
		pad = 8
	}
	up := func(n uint64) uint64 { return (n + pad - 1) &^ (pad - 1) }
	return func(yield func(note) bool) {
		size := uint64(len(data))
		for pos := uint64(0); pos+12 <= size; {
			namesz, descsz := uint64(order.Uint32(data[pos:])), uint64(order.Uint32(data[pos+4:]))
			typ := order.Uint32(data[pos+8:])
			descPos := up(pos + 12 + namesz)
			if namesz > size || descsz > size || descPos+descsz > size {
				return
			}
			n := note{name: strings.TrimRight(string(data[pos+12:pos+12+namesz]), "\x00"), typ: typ, desc: data[descPos : descPos+descsz]}
			if !yield(n) {
				return
			}
			pos = up(descPos + descsz)
		}
	}
}
