package events

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// KmsgRecord is one record of /dev/kmsg (the kernel's
// Documentation/ABI/testing/dev-kmsg):
//
//	prio,seq,usec,flags[,more fields];text\n
//	 KEY=value\n          continuation lines: the record's dictionary
//
// One read(2) returns one whole record.
type KmsgRecord struct {
	// Facility and Level come from prio (facility<<3 | level).
	Facility uint32
	Level    Severity
	// Seq is the record's sequence number; a gap means records were
	// overwritten before they were read.
	Seq uint64
	// Monotonic is the kernel's timestamp in ns since boot (the kernel
	// gives microseconds).
	Monotonic int64
	// Flag is '-' for a whole record; older kernels (before 5.10) mark the
	// first fragment of a line printed in pieces 'c' and the fragments that
	// continue it '+'.
	Flag byte
	// Text is the message as the kernel escaped it (non-printable bytes
	// as \xNN).
	Text string
	// Dict holds the continuation lines' KEY=value pairs (SUBSYSTEM,
	// DEVICE), nil without any.
	Dict map[string]string
}

// errKmsg marks a malformed record.
var errKmsg = errors.New("malformed kmsg record")

// ParseKmsg parses one /dev/kmsg record. The error names what is wrong.
func ParseKmsg(b []byte) (KmsgRecord, error) {
	var r KmsgRecord
	line, rest, _ := bytes.Cut(b, []byte{'\n'})
	header, text, ok := bytes.Cut(line, []byte{';'})
	if !ok {
		return r, fmt.Errorf("%w: no ';' after the header", errKmsg)
	}
	fields := bytes.Split(header, []byte{','})
	if len(fields) < 4 {
		return r, fmt.Errorf("%w: header has %d fields, want prio,seq,usec,flags", errKmsg, len(fields))
	}
	prio, err := strconv.ParseUint(string(fields[0]), 10, 32)
	if err != nil {
		return r, fmt.Errorf("%w: prio %q", errKmsg, clip(string(fields[0])))
	}
	r.Facility, r.Level = uint32(prio>>3), Severity(prio&7)
	if r.Seq, err = strconv.ParseUint(string(fields[1]), 10, 64); err != nil {
		return r, fmt.Errorf("%w: seq %q", errKmsg, clip(string(fields[1])))
	}
	usec, err := strconv.ParseUint(string(fields[2]), 10, 64)
	if err != nil || usec > 1<<53 {
		return r, fmt.Errorf("%w: usec %q", errKmsg, clip(string(fields[2])))
	}
	r.Monotonic = int64(usec) * 1000
	if len(fields[3]) != 1 {
		return r, fmt.Errorf("%w: flags %q", errKmsg, clip(string(fields[3])))
	}
	r.Flag = fields[3][0]
	r.Text = cleanText(text, MaxTextLen)
	for len(rest) > 0 {
		var l []byte
		l, rest, _ = bytes.Cut(rest, []byte{'\n'})
		kv, ok := bytes.CutPrefix(l, []byte{' '})
		if !ok {
			continue // not a continuation line
		}
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if !ok || len(k) == 0 {
			continue
		}
		if r.Dict == nil {
			r.Dict = map[string]string{}
		}
		r.Dict[cleanText(k, MaxLabelKeyLen)] = cleanText(v, MaxLabelValLen)
	}
	return r, nil
}

// cleanText makes b fit an event field: valid UTF-8, control characters
// (which the kernel escapes anyway) replaced by '?', at most maxLen bytes
// cut at a character boundary.
func cleanText(b []byte, maxLen int) string {
	s := strings.ToValidUTF8(string(b), "?")
	s = strings.Map(func(r rune) rune {
		if r < ' ' && r != '\t' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
	if len(s) <= maxLen {
		return s
	}
	cut := maxLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
