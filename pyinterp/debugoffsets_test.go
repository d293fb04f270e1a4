package pyinterp

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
)

// debugOffsets313 returns the start of a 3.13 _Py_DebugOffsets that says
// what the table says.
func debugOffsets313() []byte {
	b := make([]byte, 8*debugWords)
	copy(b, debugCookie)
	put := func(i int, v uint32) { binary.LittleEndian.PutUint64(b[8*i:], uint64(v)) }
	l, _ := LayoutFor(Version{Major: 3, Minor: 13})
	put(dbgVersion, 0x030D00F0)
	for i, v := range map[int]uint32{
		dbgRuntimeInterpretersHead: l.RuntimeInterpretersHead, dbgInterpNext: l.InterpNext,
		dbgInterpThreadsHead: l.InterpThreadsHead, dbgThreadNext: l.ThreadNext,
		dbgThreadCurrentFrame: l.ThreadFrame, dbgThreadNativeID: l.ThreadNativeID,
		dbgFramePrevious: l.FramePrevious, dbgFrameExecutable: l.FrameCode,
		dbgFrameInstrPtr: l.FrameInstr, dbgFrameOwner: l.FrameOwner,
		dbgCodeFilename: l.CodeFilename, dbgCodeName: l.CodeName, dbgCodeQualname: l.CodeQualname,
		dbgCodeLinetable: l.CodeLinetable, dbgCodeFirstLineno: l.CodeFirstLineno,
		dbgCodeAdaptive: l.CodeAdaptive, dbgBytesSize: l.BytesSize, dbgBytesData: l.BytesData,
		dbgUnicodeState: l.UnicodeState, dbgUnicodeLength: l.UnicodeLength,
		dbgUnicodeASCIISize: l.UnicodeASCIIData,
	} {
		put(i, v)
	}
	return b
}

func new313() *Interpreter {
	l, _ := LayoutFor(Version{Major: 3, Minor: 13})
	return &Interpreter{Version: Version{Major: 3, Minor: 13}, Layout: l}
}

func TestDebugOffsets(t *testing.T) {
	in := new313()
	if err := in.applyDebugOffsets(debugOffsets313()); err != nil || len(in.Mismatches) > 0 || !in.DebugOffsets {
		t.Fatalf("the table's own offsets: err %v, mismatches %v", err, in.Mismatches)
	}

	// An offset that differs is used, and named.
	b := debugOffsets313()
	binary.LittleEndian.PutUint64(b[8*dbgThreadNativeID:], 168)
	in = new313()
	if err := in.applyDebugOffsets(b); err != nil {
		t.Fatal(err)
	}
	if in.Layout.ThreadNativeID != 168 || len(in.Mismatches) != 1 || !strings.Contains(in.Mismatches[0], "native_thread_id") {
		t.Fatalf("native_thread_id 168: layout %d, mismatches %v", in.Layout.ThreadNativeID, in.Mismatches)
	}

	for name, mutate := range map[string]func([]byte){
		"no cookie":      func(b []byte) { b[0] = 'y' },
		"other version":  func(b []byte) { binary.LittleEndian.PutUint64(b[8*dbgVersion:], 0x030E00F0) },
		"free-threaded":  func(b []byte) { binary.LittleEndian.PutUint64(b[8*dbgFreeThreaded:], 1) },
		"not an offset":  func(b []byte) { binary.LittleEndian.PutUint64(b[8*dbgFrameOwner:], 1<<40) },
		"cut in the end": nil,
	} {
		b := debugOffsets313()
		if mutate != nil {
			mutate(b)
		} else {
			b = b[:100]
		}
		err := new313().applyDebugOffsets(b)
		if err == nil {
			t.Errorf("%s: no error", name)
		} else if name != "cut in the end" && !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
}

// FuzzDebugOffsets: any bytes give an error or offsets under 1 MiB, never
// a panic.
func FuzzDebugOffsets(f *testing.F) {
	f.Add(debugOffsets313())
	f.Add([]byte(debugCookie))
	if b, err := os.ReadFile("/root/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0"); err == nil && len(b) > 0 {
		f.Add(b[:min(len(b), 8*debugWords)])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		in := new313()
		if err := in.applyDebugOffsets(b); err != nil {
			return
		}
		l := in.Layout
		for _, v := range []uint32{l.RuntimeInterpretersHead, l.InterpThreadsHead, l.ThreadFrame, l.FrameCode, l.CodeAdaptive, l.UnicodeASCIIData} {
			if v > 1<<20 {
				t.Fatalf("offset %d accepted", v)
			}
		}
	})
}
