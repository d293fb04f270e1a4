// Command hotgo is a fixture workload: main.main -> main.hotGoFunction
// burns CPU until killed.
//
// hotGoFunction calls a function once per call so that it keeps a frame:
// the Go compiler omits the frame (and frame pointer) of small leaf
// functions, and frame-pointer unwinding then skips their caller.
package main

var sink uint64

//go:noinline
func seed(buf *[16]uint64) {
	for i := range buf {
		buf[i] = uint64(i)
	}
}

//go:noinline
func hotGoFunction() {
	var buf [16]uint64
	seed(&buf)
	for i := uint64(0); i < 10_000_000; i++ {
		sink += i*i + buf[i&15]
	}
}

func main() {
	for {
		hotGoFunction()
	}
}
