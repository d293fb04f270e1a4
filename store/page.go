package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// The WAL's and the event log's segments are sequences of pages, each
//
//	u32 length | u32 CRC-32C of payload | payload
//
// (FORMAT.md): sealPage frames one, pageReader reads them back.

// pageHeader is the bytes before a page's payload.
const pageHeader = 8

// sealPage writes the header of page, whose first pageHeader bytes were
// left for it and the rest is its payload.
func sealPage(page []byte) {
	payload := page[pageHeader:]
	binary.LittleEndian.PutUint32(page, uint32(len(payload)))
	binary.LittleEndian.PutUint32(page[4:], crc32.Checksum(payload, castagnoli))
}

// pageReader reads a segment's pages, checking each.
type pageReader struct {
	r io.Reader
	// max bounds a page's payload: a longer one is corrupt.
	max uint32
	// offset is the end of the last whole, intact page read.
	offset int64
	header [pageHeader]byte
}

// next returns the next page's payload: io.EOF when the segment ends
// after a whole page, an error wrapping errCorrupt at a torn or damaged
// page (one being written, or a crash's), naming its offset.
func (p *pageReader) next() ([]byte, error) {
	if _, err := io.ReadFull(p.r, p.header[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("offset %d: %w: torn page header", p.offset, errCorrupt)
	}
	n := binary.LittleEndian.Uint32(p.header[:])
	if n > p.max {
		return nil, fmt.Errorf("offset %d: %w: page of %d bytes", p.offset, errCorrupt, n)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(p.r, payload); err != nil {
		return nil, fmt.Errorf("offset %d: %w: torn page", p.offset, errCorrupt)
	}
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(p.header[4:]) {
		return nil, fmt.Errorf("offset %d: %w: page CRC mismatch", p.offset, errCorrupt)
	}
	p.offset += pageHeader + int64(n)
	return payload, nil
}
