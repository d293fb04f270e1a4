package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"unsafe"
)

// The write-ahead log keeps the head's samples on disk until they are in a
// block. Segment N holds head generation N: when the head is cut into a
// block the segment is deleted. A segment is a sequence of pages,
//
//	u32 length | u32 CRC-32C of payload | payload
//
// and a payload is a sequence of records: the strings, frames, stacks and
// threads the head interned since the last page, then the samples. Replay
// stops at the first torn or corrupt page, so a crash loses at most the
// samples of the page being written (pages are written at least every
// second).
const (
	walDir     = "wal"
	maxWALPage = 64 << 20
)

// WAL record types.
const (
	recString byte = iota + 1
	recFrame
	recStack
	recThread
	recSamples
	recCgroup
	recPeriod
)

// walWriter appends pages to one segment.
type walWriter struct {
	seq     uint64
	f       *os.File
	pending []byte // records not yet written
	samples []byte // the samples record being built
	nsample int
	last    int64 // time of the previous sample in samples
	size    int64
	// raw writes and syncs pages with raw syscalls (Options.CallerTicks).
	raw bool
	// unsynced is set while pages written are not yet fsynced.
	unsynced bool
}

func walPath(dir string, seq uint64) string {
	return filepath.Join(dir, walDir, fmt.Sprintf("%016d", seq))
}

func createWAL(dir string, seq uint64) (*walWriter, error) {
	if err := os.MkdirAll(filepath.Join(dir, walDir), 0o755); err != nil {
		return nil, fmt.Errorf("create WAL: %w", err)
	}
	f, err := os.OpenFile(walPath(dir, seq), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create WAL segment: %w", err)
	}
	return &walWriter{seq: seq, f: f}, nil
}

// The walWriter hears of new table entries from the head's Builder.
func (w *walWriter) newString(s string) {
	w.pending = append(w.pending, recString)
	w.pending = binary.AppendUvarint(w.pending, uint64(len(s)))
	w.pending = append(w.pending, s...)
}

func (w *walWriter) newFrame(f Frame) {
	w.pending = append(w.pending, recFrame)
	w.pending = binary.AppendUvarint(w.pending, uint64(f.Function))
	w.pending = binary.AppendUvarint(w.pending, uint64(f.Module))
	w.pending = binary.AppendUvarint(w.pending, uint64(f.BuildID))
	w.pending = appendFrameTail(w.pending, &f)
}

func (w *walWriter) newStack(frames []uint32) {
	w.pending = append(w.pending, recStack)
	w.pending = binary.AppendUvarint(w.pending, uint64(len(frames)))
	for _, f := range frames {
		w.pending = binary.AppendUvarint(w.pending, uint64(f))
	}
}

func (w *walWriter) newThread(t Thread) {
	w.pending = append(w.pending, recThread)
	w.pending = binary.AppendUvarint(w.pending, uint64(t.PID))
	w.pending = binary.AppendUvarint(w.pending, uint64(t.TID))
	w.pending = binary.AppendUvarint(w.pending, uint64(t.Comm))
	w.pending = binary.AppendUvarint(w.pending, t.Cgroup)
}

func (w *walWriter) newCgroup(c Cgroup) {
	w.pending = append(w.pending, recCgroup)
	w.pending = binary.AppendUvarint(w.pending, c.ID)
	for _, s := range []uint32{c.Path, c.ContainerID, c.Runtime, c.PodUID, c.QoS, c.Namespace, c.Pod, c.Container} {
		w.pending = binary.AppendUvarint(w.pending, uint64(s))
	}
}

// setPeriod logs the sampling period of the segment's samples, so that a
// replay knows what they weigh (a segment holds one head, and a head one
// period: DB.SetPeriod cuts it).
func (w *walWriter) setPeriod(ns int64) {
	w.pending = append(w.pending, recPeriod)
	w.pending = binary.AppendUvarint(w.pending, uint64(ns))
}

// addSample logs one sample whose ids the head has already interned.
func (w *walWriter) addSample(time int64, cpu, thread, stack uint32) {
	w.samples = binary.AppendVarint(w.samples, time-w.last)
	w.samples = binary.AppendUvarint(w.samples, uint64(cpu))
	w.samples = binary.AppendUvarint(w.samples, uint64(thread))
	w.samples = binary.AppendUvarint(w.samples, uint64(stack))
	w.last = time
	w.nsample++
}

// buffered returns the bytes waiting to be written.
func (w *walWriter) buffered() int { return len(w.pending) + len(w.samples) }

// flush writes what is buffered as one page and, if sync, syncs the
// segment (with the pages written before it). On error the page is dropped
// (the samples stay in the head) and the count of samples it held is
// returned with the error.
func (w *walWriter) flush(sync bool) (dropped int, err error) {
	if w.buffered() == 0 {
		if sync && w.unsynced {
			if err := w.f.Sync(); err != nil {
				return 0, fmt.Errorf("sync WAL segment %d: %w", w.seq, err)
			}
			w.unsynced = false
		}
		return 0, nil
	}
	page := make([]byte, pageHeader, pageHeader+w.buffered()+16)
	page = append(page, w.pending...)
	if w.nsample > 0 {
		page = append(page, recSamples)
		page = binary.AppendUvarint(page, uint64(w.nsample))
		page = append(page, w.samples...)
	}
	sealPage(page)
	n := w.nsample
	w.pending, w.samples, w.nsample, w.last = w.pending[:0], w.samples[:0], 0, 0
	var written int
	if w.raw {
		written, err = writeRaw(w.f, page, sync)
	} else if written, err = w.f.Write(page); err == nil && sync {
		err = w.f.Sync()
	}
	if err != nil {
		// Cut the partial page off so later pages still replay.
		w.f.Truncate(w.size)
		w.f.Seek(w.size, io.SeekStart)
		return n, fmt.Errorf("write WAL segment %d: %w", w.seq, err)
	}
	w.size += int64(written)
	w.unsynced = !sync
	return 0, nil
}

// writeRaw writes b to f, and fsyncs f if sync, with raw syscalls: the calling
// goroutine keeps its P, so the Go runtime's sysmon thread is neither woken
// nor given a P to retake and hand to a new thread while fsync waits for
// the disk (which it did twice a second, about 60 of its wakeups each
// time, on the recorder's one P). Every goroutine waiting for that P waits
// for the fsync too: only for a recorder, whose poll goroutine would wait
// for it anyway (it holds the store's lock meanwhile).
func writeRaw(f *os.File, b []byte, sync bool) (written int, err error) {
	conn, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	cerr := conn.Write(func(fd uintptr) bool {
		for written < len(b) {
			n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[written])), uintptr(len(b)-written))
			if errno == syscall.EINTR {
				continue
			}
			if errno != 0 {
				err = &os.PathError{Op: "write", Path: f.Name(), Err: errno}
				return true
			}
			written += int(n)
		}
		for sync {
			_, _, errno := syscall.RawSyscall(syscall.SYS_FSYNC, fd, 0, 0)
			if errno != syscall.EINTR {
				if errno != 0 {
					err = &os.PathError{Op: "sync", Path: f.Name(), Err: errno}
				}
				return true
			}
		}
		return true
	})
	if err == nil {
		err = cerr
	}
	return written, err
}

func (w *walWriter) close() error {
	_, err := w.flush(true)
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// walSegments lists the segment numbers in dir's WAL, oldest first.
func walSegments(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(filepath.Join(dir, walDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list WAL: %w", err)
	}
	var seqs []uint64
	for _, e := range entries {
		if seq, err := strconv.ParseUint(e.Name(), 10, 64); err == nil {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	return seqs, nil
}

// replayWAL rebuilds a head table from one segment. It returns what it
// could read; err says where and why it stopped early (a torn tail after a
// crash, or corruption), naming the file.
func replayWAL(path string) (*Builder, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("replay WAL %s: %w", path, err)
	}
	defer f.Close()
	b := NewBuilder()
	err = replayPages(bufio.NewReaderSize(f, 1<<20), b)
	if err != nil {
		return b, fmt.Errorf("replay WAL %s: %w", path, err)
	}
	return b, nil
}

func replayPages(r io.Reader, b *Builder) error {
	pages := pageReader{r: r, max: maxWALPage}
	for {
		offset := pages.offset
		payload, err := pages.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := replayRecords(payload, b); err != nil {
			return fmt.Errorf("offset %d: %w", offset, err)
		}
	}
}

// replayRecords applies one page's records to b, checking every id.
func replayRecords(payload []byte, b *Builder) error {
	r := &reader{b: payload}
	t := &b.T
	for len(r.b) > 0 && r.err == nil {
		kind := r.bytes1()
		switch kind {
		case recString:
			b.addString(string(r.bytes("string")))
		case recFrame:
			ns := uint64(len(t.Strings))
			f := Frame{Function: r.u32("function", ns), Module: r.u32("module", ns), BuildID: r.u32("build id", ns)}
			// A WAL has no version: it is read as this version's,
			// whose frames an older one's never contradict.
			r.frameTail(&f, FormatVersion)
			if r.err == nil {
				b.addFrame(f)
			}
		case recStack:
			n := r.count("stack", 1)
			ids := make([]uint32, n)
			for i := range ids {
				ids[i] = r.u32("stack frame", uint64(len(t.Frames)))
			}
			if r.err == nil {
				b.internStack(ids)
			}
		case recThread:
			th := Thread{PID: r.u32("pid", 1<<32), TID: r.u32("tid", 1<<32), Comm: r.u32("comm", uint64(len(t.Strings))), Cgroup: r.uvarint("cgroup")}
			if r.err == nil {
				th.Meta = b.cgroups[th.Cgroup]
				b.internThread(th)
			}
		case recCgroup:
			c := Cgroup{ID: r.uvarint("cgroup id")}
			for _, s := range []*uint32{&c.Path, &c.ContainerID, &c.Runtime, &c.PodUID, &c.QoS, &c.Namespace, &c.Pod, &c.Container} {
				*s = r.u32("cgroup string", uint64(len(t.Strings)))
			}
			if r.err == nil {
				b.addCgroup(c)
			}
		case recPeriod:
			if p := r.uvarint("period"); r.err == nil {
				b.periodNs = int64(min(p, 1<<62))
			}
		case recSamples:
			n := r.count("samples", 4)
			var time int64
			for range n {
				time += r.varint("time")
				cpu := r.u32("cpu", 1<<32)
				thread := r.u32("thread", uint64(len(t.Threads)))
				stack := r.u32("stack", uint64(t.NumStacks()))
				if r.err != nil {
					break
				}
				b.appendRow(time, cpu, thread, stack)
			}
		default:
			r.fail("record type")
		}
	}
	return r.err
}
