package symbolize

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The symbol tables of binaries with a build id are kept on disk
// (Options.SymbolCacheDir), one file per build id: a binary's symbols
// cannot change while its build id stays the same. The in-memory binary
// cache is bounded (--symbol-cache, 8 MiB): on a busy node the binaries
// sampled within a minute take more (a Go toolchain's compile, link and go,
// test binaries, MinIO, a browser's libraries), so the least recently used
// were evicted and loaded again from their ELF files minutes later, each
// load parsing the whole .symtab and .gopclntab again (80-380 ms for the Go
// compiler or go on a loaded machine): 30-40% of the agent's CPU on the
// shared 2-CPU machine. Read back from its file, a table costs a read and
// a copy.

// symbolsMagic starts every symbol table file.
const symbolsMagic = "heatscope symbols 1\n"

// symbolsHeader is the size of the header after the magic: the numbers
// of segments, symbols and name bytes, the flags and a CRC-32C of the
// rest.
const symbolsHeader = 4 + 4 + 4 + 4 + 4

// symbolsFrontCoded is the flag of a table whose names are front-coded.
const symbolsFrontCoded = 1

// segmentBytes and symbolBytes are the encoded sizes of a load segment
// (offset, address, size) and a symbol (address, size, end of its name).
const (
	segmentBytes = 3 * 8
	symbolBytes  = 8 + 4 + 4
)

// encodeSymbols returns b's segments and symbol table in the cache file
// format: the magic, then, little-endian, the header (symbolsHeader), each
// segment, each symbol and the names.
func encodeSymbols(b *binaryFile) []byte {
	le := binary.LittleEndian
	body := make([]byte, 0, len(b.loads)*segmentBytes+len(b.tab.syms)*symbolBytes+len(b.tab.names))
	for _, s := range b.loads {
		body = le.AppendUint64(body, s.off)
		body = le.AppendUint64(body, s.vaddr)
		body = le.AppendUint64(body, s.filesz)
	}
	for _, s := range b.tab.syms {
		body = le.AppendUint64(body, s.addr)
		body = le.AppendUint32(body, s.size)
		body = le.AppendUint32(body, s.nameEnd)
	}
	body = append(body, b.tab.names...)
	var flags uint32
	if b.tab.prefixed {
		flags |= symbolsFrontCoded
	}
	out := make([]byte, 0, len(symbolsMagic)+symbolsHeader+len(body))
	out = append(out, symbolsMagic...)
	out = le.AppendUint32(out, uint32(len(b.loads)))
	out = le.AppendUint32(out, uint32(len(b.tab.syms)))
	out = le.AppendUint32(out, uint32(len(b.tab.names)))
	out = le.AppendUint32(out, flags)
	out = le.AppendUint32(out, crc32.Checksum(body, castagnoli))
	return append(out, body...)
}

// decodeSymbols parses what encodeSymbols wrote, for the binary of
// buildID. It never panics: a short, corrupt or inconsistent file (names
// out of order or out of range, addresses out of order) is an error.
func decodeSymbols(data []byte, buildID string) (*binaryFile, error) {
	if len(data) < len(symbolsMagic)+symbolsHeader || string(data[:len(symbolsMagic)]) != symbolsMagic {
		return nil, errors.New("decode symbols: not a symbol table file")
	}
	le := binary.LittleEndian
	h := data[len(symbolsMagic):]
	nSegs, nSyms, nNames := uint64(le.Uint32(h)), uint64(le.Uint32(h[4:])), uint64(le.Uint32(h[8:]))
	flags, sum := le.Uint32(h[12:]), le.Uint32(h[16:])
	body := h[symbolsHeader:]
	if want := nSegs*segmentBytes + nSyms*symbolBytes + nNames; uint64(len(body)) != want {
		return nil, fmt.Errorf("decode symbols: %d bytes after the header, want %d for %d segments, %d symbols and %d bytes of names",
			len(body), want, nSegs, nSyms, nNames)
	}
	if flags&^symbolsFrontCoded != 0 {
		return nil, fmt.Errorf("decode symbols: unknown flags %#x", flags)
	}
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errors.New("decode symbols: checksum mismatch")
	}
	b := &binaryFile{buildID: buildID, loads: make([]segment, nSegs)}
	for i := range b.loads {
		p := body[i*segmentBytes:]
		b.loads[i] = segment{off: le.Uint64(p), vaddr: le.Uint64(p[8:]), filesz: le.Uint64(p[16:])}
	}
	body = body[nSegs*segmentBytes:]
	b.tab.syms = make([]symbol, nSyms)
	for i := range b.tab.syms {
		p := body[i*symbolBytes:]
		s := symbol{addr: le.Uint64(p), size: le.Uint32(p[8:]), nameEnd: le.Uint32(p[12:])}
		if s.nameEnd > uint32(nNames) {
			return nil, fmt.Errorf("decode symbols: symbol %d's name ends at %d, past the %d bytes of names", i, s.nameEnd, nNames)
		}
		if i > 0 {
			prev := b.tab.syms[i-1]
			if s.nameEnd < prev.nameEnd || s.addr < prev.addr {
				return nil, fmt.Errorf("decode symbols: symbol %d (%#x, name end %d) before symbol %d (%#x, name end %d)",
					i, s.addr, s.nameEnd, i-1, prev.addr, prev.nameEnd)
			}
		}
		b.tab.syms[i] = s
	}
	b.tab.names = string(body[nSyms*symbolBytes:])
	b.tab.prefixed = flags&symbolsFrontCoded != 0
	return b, nil
}

// cachedSymbols returns the symbol table of the binary of buildID from the
// disk cache, if it holds a good one.
func (s *Symbolizer) cachedSymbols(buildID string) (*binaryFile, bool) {
	data, err := s.symbolFiles.Read(buildID)
	if err != nil {
		return nil, false
	}
	b, err := decodeSymbols(data, buildID)
	if err != nil {
		s.opts.Logger.Debug("symbolize: a cached symbol table is unusable; the binary is read again", "build_id", buildID, "err", err)
		return nil, false
	}
	return b, true
}

// minCachedSymbols is the least size (binaryFile.bytes) of a table worth
// a file: a small library's table is read from its ELF file in tens of
// microseconds, less than writing the file costs.
const minCachedSymbols = 32 << 10

// saveSymbols writes a binary's symbol table, just read from its ELF file
// because the disk cache had none or an unusable one, to the disk cache,
// best effort: a table not saved is read from its ELF file again next
// time.
func (s *Symbolizer) saveSymbols(b *binaryFile) {
	if b.bytes() < minCachedSymbols || s.symbolFiles.File(b.buildID) == "" {
		return
	}
	if err := s.symbolFiles.Write(b.buildID, encodeSymbols(b)); err != nil {
		s.opts.Logger.Debug("symbolize: cannot cache a symbol table", "build_id", b.buildID, "err", err)
	}
}
