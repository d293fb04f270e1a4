package profiler

import (
	"encoding/binary"
	"testing"
	"time"
	"unsafe"

	"github.com/heatscope/heatscope/bpf"
	"github.com/heatscope/heatscope/pyinterp"
)

func TestRecordHeaderMatchesBPF(t *testing.T) {
	var s bpf.ProfileHsSample
	if got := int(unsafe.Offsetof(s.Frames)); got != recordHeaderSize {
		t.Fatalf("struct hs_sample frames offset = %d, decoder assumes %d", got, recordHeaderSize)
	}
	if got := len(s.Frames); got < 2*MaxFrames+MaxPythonFrames*pyFrameSize/8 {
		t.Fatalf("hs_sample has %d frame slots, want at least %d", got, 2*MaxFrames+MaxPythonFrames*pyFrameSize/8)
	}
	if got := int(unsafe.Offsetof(s.PythonFrames)); got != 64 {
		t.Fatalf("struct hs_sample python_frames at %d, decoder reads it at 64", got)
	}
	if got := int(unsafe.Offsetof(s.PythonFlags)); got != 66 {
		t.Fatalf("struct hs_sample python_flags at %d, decoder reads it at 66", got)
	}
	var f bpf.ProfileHsPyFrame
	if got := int(unsafe.Sizeof(f)); got != pyFrameSize {
		t.Fatalf("struct hs_py_frame is %d bytes, decoder assumes %d", got, pyFrameSize)
	}
	if unsafe.Offsetof(f.Offset) != 8 || unsafe.Offsetof(f.Flags) != 12 {
		t.Fatalf("struct hs_py_frame: offset at %d, flags at %d; decoder reads them at 8 and 12", unsafe.Offsetof(f.Offset), unsafe.Offsetof(f.Flags))
	}
}

// encodeRecord builds a record as the BPF program writes it.
func encodeRecord(r Record) []byte {
	b := make([]byte, recordHeaderSize+8*(len(r.Kernel)+len(r.User))+pyFrameSize*len(r.Python))
	le := binary.LittleEndian
	le.PutUint64(b[0:], r.KernelTime)
	le.PutUint64(b[8:], r.CgroupID)
	le.PutUint32(b[16:], r.PID)
	le.PutUint32(b[20:], r.TID)
	le.PutUint32(b[24:], r.CPU)
	le.PutUint16(b[28:], uint16(len(r.Kernel)))
	le.PutUint16(b[30:], uint16(len(r.User)))
	copy(b[32:48], r.Comm)
	le.PutUint64(b[48:], r.UserDWARF[0])
	le.PutUint64(b[56:], r.UserDWARF[1])
	le.PutUint16(b[64:], uint16(len(r.Python)))
	le.PutUint16(b[66:], uint16(r.PythonWalk))
	off := recordHeaderSize
	for _, a := range append(append([]uint64{}, r.Kernel...), r.User...) {
		le.PutUint64(b[off:], a)
		off += 8
	}
	for _, f := range r.Python {
		le.PutUint64(b[off:], f.Code)
		le.PutUint32(b[off+8:], f.Offset)
		var flags uint32
		if f.Entry {
			flags |= pyFrameEntry
		}
		if f.MayBeIncomplete {
			flags |= pyFrameMayBeIncomplete
		}
		le.PutUint32(b[off+12:], flags)
		off += pyFrameSize
	}
	return b
}

func TestDecode(t *testing.T) {
	in := Record{KernelTime: 123456789, CgroupID: 42, PID: 1000, TID: 1001, CPU: 3, Comm: "kubelet",
		Kernel: []uint64{0xffffffff81000010, 0xffffffff81000020}, User: []uint64{0x401000, 0x401100, 0x401200},
		UserDWARF: [2]uint64{0b10, 0}}
	var out Record
	if err := out.Decode(encodeRecord(in)); err != nil {
		t.Fatal(err)
	}
	if out.KernelTime != in.KernelTime || out.CgroupID != in.CgroupID || out.PID != in.PID ||
		out.TID != in.TID || out.CPU != in.CPU || out.Comm != in.Comm {
		t.Fatalf("decoded %+v, want %+v", out, in)
	}
	if len(out.Kernel) != 2 || out.Kernel[1] != in.Kernel[1] || len(out.User) != 3 || out.User[2] != in.User[2] {
		t.Fatalf("frames: kernel %x user %x", out.Kernel, out.User)
	}
	if out.UnwoundWithTable(1) || !out.UnwoundWithTable(2) || out.UnwoundWithTable(0) {
		t.Fatalf("unwind bits %b: want frame 2 by table, 1 by frame pointer", out.UserDWARF)
	}
	if len(out.Python) != 0 || out.PythonWalk != 0 {
		t.Fatalf("no Python frames written, %d decoded (walk %b)", len(out.Python), out.PythonWalk)
	}
	// The kernel NUL-terminates comm, but a record without the NUL must
	// still decode to the whole 16-byte field and no further.
	in.Comm = "0123456789abcdef"
	if err := out.Decode(encodeRecord(in)); err != nil || out.Comm != in.Comm {
		t.Fatalf("full comm: %q, %v", out.Comm, err)
	}
}

func TestDecodePython(t *testing.T) {
	in := Record{PID: 7, Kernel: []uint64{0xffffffff81000010}, User: []uint64{0x401000, 0x401100},
		Python: []pyinterp.Frame{
			{Code: 0x7f0000001000, Offset: 24},
			{Code: 0x7f0000002000, Offset: 112, Entry: true},
			{Code: 0x7f0000003000, Offset: pyinterp.NoInstr, MayBeIncomplete: true},
			{Code: 0x7f0000004000, Offset: 6, Entry: true, MayBeIncomplete: true},
		},
		PythonWalk: PythonWalked | PythonTruncated}
	var out Record
	if err := out.Decode(encodeRecord(in)); err != nil {
		t.Fatal(err)
	}
	if len(out.User) != 2 || out.User[1] != 0x401100 {
		t.Fatalf("user frames %x", out.User)
	}
	if len(out.Python) != len(in.Python) {
		t.Fatalf("%d Python frames decoded, want %d", len(out.Python), len(in.Python))
	}
	for i := range in.Python {
		if out.Python[i] != in.Python[i] {
			t.Errorf("Python frame %d: %+v, want %+v", i, out.Python[i], in.Python[i])
		}
	}
	if !out.PythonWalk.Has(PythonWalked|PythonTruncated) || out.PythonWalk.Has(PythonReadError) {
		t.Fatalf("walk %b, want walked and truncated", out.PythonWalk)
	}
	// Reused for a record without Python frames: none left over.
	if err := out.Decode(encodeRecord(Record{PID: 8})); err != nil || len(out.Python) != 0 || out.PythonWalk != 0 {
		t.Fatalf("a record without Python frames: %d frames, walk %b, %v", len(out.Python), out.PythonWalk, err)
	}
}

func TestDecodeRejectsBadRecords(t *testing.T) {
	good := encodeRecord(Record{PID: 1, Kernel: []uint64{1}, User: []uint64{2}})
	tooMany := append([]byte(nil), good...)
	binary.LittleEndian.PutUint16(tooMany[28:], MaxFrames+1)
	withPython := encodeRecord(Record{PID: 1, User: []uint64{2}, Python: []pyinterp.Frame{{Code: 0x1000}}})
	tooManyPython := append([]byte(nil), withPython...)
	binary.LittleEndian.PutUint16(tooManyPython[64:], MaxPythonFrames+1)
	for name, b := range map[string][]byte{
		"empty":                  nil,
		"short header":           good[:recordHeaderSize-1],
		"short frames":           good[:len(good)-1],
		"too many frames":        tooMany,
		"short Python frames":    withPython[:len(withPython)-1],
		"too many Python frames": tooManyPython,
	} {
		var r Record
		if err := r.Decode(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(encodeRecord(Record{KernelTime: 1, PID: 7, TID: 8, Comm: "sh", Kernel: []uint64{1, 2}, User: []uint64{3}}))
	f.Add(encodeRecord(Record{}))
	f.Add([]byte{1, 2, 3})
	f.Add(encodeRecord(Record{PID: 9, User: []uint64{3}, PythonWalk: PythonWalked,
		Python: []pyinterp.Frame{{Code: 0x1000, Offset: 8, Entry: true}, {Code: 0x2000, Offset: pyinterp.NoInstr, MayBeIncomplete: true}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Record
		if err := r.Decode(b); err != nil {
			return
		}
		if len(r.Kernel) > MaxFrames || len(r.User) > MaxFrames || len(r.Python) > MaxPythonFrames {
			t.Fatalf("decoded %d+%d+%d frames", len(r.Kernel), len(r.User), len(r.Python))
		}
		if want := recordHeaderSize + 8*(len(r.Kernel)+len(r.User)) + pyFrameSize*len(r.Python); len(b) < want {
			t.Fatalf("decoded %d+%d frames from %d bytes", len(r.Kernel)+len(r.User), len(r.Python), len(b))
		}
		// Each Python frame is the one at its place in the record.
		at := recordHeaderSize + 8*(len(r.Kernel)+len(r.User))
		for i, f := range r.Python {
			o := at + pyFrameSize*i
			if f.Code != binary.LittleEndian.Uint64(b[o:]) || f.Offset != binary.LittleEndian.Uint32(b[o+8:]) ||
				f.Entry != (b[o+12]&pyFrameEntry != 0) || f.MayBeIncomplete != (b[o+12]&pyFrameMayBeIncomplete != 0) {
				t.Fatalf("Python frame %d decoded as %+v from %x", i, f, b[o:o+pyFrameSize])
			}
		}
	})
}

func TestTableBits(t *testing.T) {
	for _, c := range []struct {
		b    [2]uint64
		n    int
		want int
	}{
		{[2]uint64{0b111, 0}, 2, 2}, // the bit past the last frame
		{[2]uint64{0b101, 0}, 3, 2},
		{[2]uint64{^uint64(0), 0b11}, 64, 64},
		{[2]uint64{^uint64(0), 0b111}, 66, 66},
		{[2]uint64{^uint64(0), ^uint64(0)}, 128, 128},
		{[2]uint64{0, 0}, 10, 0},
	} {
		if got := tableBits(c.b, c.n); got != c.want {
			t.Errorf("tableBits(%b, %d) = %d, want %d", c.b, c.n, got, c.want)
		}
	}
}

// TestBuildWorthIt: a table is built once its waiting samples stand for
// 50 times its estimated compile time (a cached table's read counting a
// thirty-second of it), or once it has waited 20 times that while its
// processes used at least 5% of a CPU: libc's 153 KB of .eh_frame after
// about 78 samples at 99 Hz or 0.32 s, from the cache after 3 samples, a
// tiny binary after two. Never for a process sampled once, nor on the
// wait alone for one that hardly runs (the agent itself, at 1-2%).
func TestBuildWorthIt(t *testing.T) {
	u := &unwinder{periodNs: func() int64 { return int64(time.Second) / 99 }}
	now := time.Now()
	for _, tc := range []struct {
		cfi            uint64
		cached         bool
		samples, later uint64
		waited         time.Duration
		want           bool
	}{
		{153 << 10, false, 75, 75, 300 * time.Millisecond, false},
		{153 << 10, false, 80, 0, 0, true},
		{153 << 10, false, 10, 10, 320 * time.Millisecond, true},
		{153 << 10, false, 10, 1, 320 * time.Millisecond, false}, // 3% of a CPU since queued
		{153 << 10, true, 2, 0, 0, false},
		{153 << 10, true, 3, 0, 0, true},
		{800, false, 1, 0, 0, false},
		{800, false, 1, 0, time.Hour, false}, // sampled once
		{800, false, 2, 0, 0, true},
		{800, false, 0, 0, 0, false},
		{3 << 20, false, 1500, 1500, 6 * time.Second, false},
		{3 << 20, false, 1600, 0, 0, true},
		{3 << 20, false, 40, 40, 6400 * time.Millisecond, true},
		{1500 << 10, false, 20, 20, 10 * time.Second, false}, // 2% of a CPU
		{1500 << 10, false, 60, 60, 10 * time.Second, true},  // 6%
	} {
		job := &buildJob{cfi: tc.cfi, cached: tc.cached, waited: tc.samples, later: tc.later, queued: now.Add(-tc.waited)}
		if got := u.worthIt(job, now); got != tc.want {
			t.Errorf("%d bytes of CFI (cached %v) after %d samples, %d of them in the last %v: worth building %v, want %v",
				tc.cfi, tc.cached, tc.samples, tc.later, tc.waited, got, tc.want)
		}
	}
}
