package symbolize

import (
	"encoding/binary"
	"testing"
)

func TestNotes(t *testing.T) {
	// An 8-aligned GNU property note, then an 8-aligned build id note.
	var data []byte
	add := func(name string, typ uint32, desc []byte) {
		hdr := make([]byte, 12)
		binary.LittleEndian.PutUint32(hdr, uint32(len(name)))
		binary.LittleEndian.PutUint32(hdr[4:], uint32(len(desc)))
		binary.LittleEndian.PutUint32(hdr[8:], typ)
		data = append(data, hdr...)
		data = append(data, name...)
		for len(data)%8 != 0 {
			data = append(data, 0)
		}
		data = append(data, desc...)
		for len(data)%8 != 0 {
			data = append(data, 0)
		}
	}
	add("GNU\x00", 5, make([]byte, 12))
	add("GNU\x00", noteGNUBuildID, []byte{0xde, 0xad, 0xbe, 0xef})
	var got []note
	for n := range notes(data, binary.LittleEndian, 8) {
		got = append(got, n)
	}
	if len(got) != 2 || got[1].name != "GNU" || got[1].typ != noteGNUBuildID || string(got[1].desc) != "\xde\xad\xbe\xef" {
		t.Errorf("got %+v", got)
	}
	for range notes(data[:20], binary.LittleEndian, 8) {
		t.Error("a truncated note was returned")
	}
}
