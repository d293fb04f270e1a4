// Command otlpreceive benchmarks heatscope's OTLP profiles receiver:
// `heatscope receive` runs as a process of its own with GOMAXPROCS=1,
// pinned to one CPU, writing a data directory per node, while this
// program (on the other CPUs) sends it OTLP/HTTP requests as fast as it
// takes them: each request one node's second of samples (-cpus CPUs at
// -hz, realistic stacks from internal/synth with container labels),
// encoded by otlpprofile's mapping ahead of the run, so the sender costs
// little. It prints, per run and as the median over runs, the samples per
// second the receiver stored (from its answers), against the target of
// -nodes x -hz x -cpus, and the receiver's peak RSS; then a flood: -flood
// senders at once posting requests of the size limit, the answers they
// got (429 past the bound on requests read at once) and the peak RSS,
// which stays bounded however many senders there are.
//
// Run it from the repository root:
//
//	go run ./bench/otlpreceive -runs 5 -duration 20s
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heatscope/heatscope/bench/internal/loadavg"
	"github.com/heatscope/heatscope/internal/synth"
	"github.com/heatscope/heatscope/otlpprofile"
	"github.com/heatscope/heatscope/otlpreceive"
	"github.com/heatscope/heatscope/sample"
)

func main() {
	runs := flag.Int("runs", 5, "runs")
	duration := flag.Duration("duration", 20*time.Second, "how long each run sends")
	nodes := flag.Int("nodes", 10, "nodes")
	cpus := flag.Int("cpus", 64, "CPUs per node")
	hz := flag.Int("hz", 99, "samples per second per CPU")
	seconds := flag.Int("seconds", 10, "distinct seconds of samples per node, sent in turn")
	senders := flag.Int("senders", 4, "requests in flight at once")
	flood := flag.Int("flood", 64, "senders at once in the flood")
	cpu := flag.Int("cpu", 1, "the CPU the receiver is pinned to")
	flag.Parse()
	log.SetFlags(0)

	tmp, err := os.MkdirTemp("", "heatscope-otlp-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "heatscope")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/heatscope").CombinedOutput(); err != nil {
		log.Fatalf("build: %v\n%s", err, out)
	}
	reqs := requests(*nodes, *cpus, *hz, *seconds)
	counts := perRequest(reqs)
	perReq := 0
	for _, n := range counts {
		perReq += n
	}
	perReq /= len(counts)
	target := float64(*nodes * *hz * *cpus)
	fmt.Printf("## OTLP receiver: %d nodes x %d CPUs x %d Hz = %.0f samples/s to hold\n\n", *nodes, *cpus, *hz, target)
	fmt.Printf("heatscope receive with GOMAXPROCS=1 pinned to CPU %d; %d senders over OTLP/HTTP (protobuf), each request one node's second (%d samples, %d KiB on average); %s; %s\n\n",
		*cpu, *senders, perReq, avgSize(reqs)>>10, loadavg.Line(), time.Now().UTC().Format(time.RFC3339))
	fmt.Println("samples/s stored is wall-clock: on a busy machine the receiver's CPU is shared; samples per CPU second (its user + system time) is what one whole CPU takes.")
	fmt.Println()
	fmt.Println("| run | samples/s stored | of the target | receiver CPU | samples per CPU second | of the target | requests | refused | peak RSS |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	var rates, perCPU []float64
	for run := 1; run <= *runs; run++ {
		rcv := startReceiver(bin, filepath.Join(tmp, fmt.Sprintf("run%d", run)), *cpu)
		cpuBefore := cpuTime(rcv.cmd.Process.Pid)
		stored, n, refused := send(rcv.url, reqs, counts, *senders, *duration)
		used := cpuTime(rcv.cmd.Process.Pid) - cpuBefore
		rss := rcv.stop()
		rate := float64(stored) / duration.Seconds()
		pc := float64(stored) / max(used.Seconds(), 0.01)
		rates, perCPU = append(rates, rate), append(perCPU, pc)
		fmt.Printf("| %d | %.0f | %.2f | %.1f s of %.0f s | %.0f | %.2f | %d | %d | %d MiB |\n",
			run, rate, rate/target, used.Seconds(), duration.Seconds(), pc, pc/target, n, refused, rss>>20)
	}
	slices.Sort(rates)
	slices.Sort(perCPU)
	med, medCPU := rates[len(rates)/2], perCPU[len(perCPU)/2]
	fmt.Printf("\nmedian %.0f samples/s stored (%.2f times the %.0f of %d nodes x %d CPUs x %d Hz); median %.0f samples per CPU second of the receiver (%.2f times)\n\n",
		med, med/target, target, *nodes, *cpus, *hz, medCPU, medCPU/target)

	fmt.Printf("### Flood: %d senders at once, each request %d MiB (the size limit), for %s\n\n", *flood, otlpreceive.DefaultMaxRequestBytes>>20, *duration/2)
	big := floodRequest(otlpreceive.DefaultMaxRequestBytes)
	rcv := startReceiver(bin, filepath.Join(tmp, "flood"), *cpu)
	codes := floodSend(rcv.url, big, *flood, *duration/2)
	rss := rcv.stop()
	fmt.Printf("answers %v; receiver's peak RSS %d MiB\n", codes, rss>>20)
}

// requests are each node's seconds of samples, encoded.
func requests(nodes, cpus, hz, seconds int) [][]byte {
	var out [][]byte
	start := time.Now().Add(-time.Hour).Truncate(time.Second).UnixNano()
	for n := range nodes {
		node := fmt.Sprintf("bench-node-%02d", n)
		g := synth.New(synth.Config{CPUs: cpus, Hz: hz, Start: start, Seconds: float64(seconds), Seed: uint64(n), Containers: true})
		enc := otlpprofile.NewEncoder("bench", node, sample.PeriodOf(int64(hz)))
		second := start
		flush := func() {
			if enc.Len() == 0 {
				return
			}
			b, err := otlpprofile.MarshalRequest(enc.Profiles())
			if err != nil {
				log.Fatal(err)
			}
			out = append(out, b)
		}
		g.Feed(func(s *sample.Sample) error {
			if s.Time >= second+int64(time.Second) {
				flush()
				second += int64(time.Second)
			}
			s.Node, s.PeriodNs = node, sample.PeriodOf(int64(hz))
			enc.Add(s)
			return nil
		})
		flush()
	}
	return interleave(out, nodes)
}

// interleave orders requests node 0 second 0, node 1 second 0, ...
func interleave(reqs [][]byte, nodes int) [][]byte {
	per := len(reqs) / nodes
	var out [][]byte
	for s := range per {
		for n := range nodes {
			out = append(out, reqs[n*per+s])
		}
	}
	return out
}

func avgSize(reqs [][]byte) int {
	total := 0
	for _, r := range reqs {
		total += len(r)
	}
	return total / len(reqs)
}

// floodRequest is a request of about 90% of limit bytes: 20 000 samples
// of many distinct stacks, its encoding repeated (protobuf concatenates
// repeated fields, so the copies' indices point at the first copy's
// identical entries: still one valid request).
func floodRequest(limit int) []byte {
	g := synth.New(synth.Config{CPUs: 64, Hz: 999, Start: time.Now().Add(-time.Hour).UnixNano(), Seconds: 1, Seed: 7, Containers: true, Stacks: 50000})
	enc := otlpprofile.NewEncoder("bench", "flood", sample.PeriodOf(999))
	g.Feed(func(s *sample.Sample) error {
		if enc.Len() == 20000 {
			return errEnough
		}
		enc.Add(s)
		return nil
	})
	one, err := otlpprofile.MarshalRequest(enc.Profiles())
	if err != nil {
		log.Fatal(err)
	}
	body := one
	for len(body)+len(one) < limit*9/10 {
		body = append(body, one...)
	}
	return body
}

var errEnough = errors.New("enough samples")

type receiver struct {
	cmd *exec.Cmd
	url string
}

func startReceiver(bin, data string, cpu int) *receiver {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "receive", "--data", data, "--grpc-listen", "", "--http-listen", addr)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "HEATSCOPE_LOG_LEVEL=error")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(cmd.Process.Pid, &set); err != nil {
		log.Printf("pin the receiver to CPU %d: %v", cpu, err)
	}
	for range 200 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return &receiver{cmd: cmd, url: "http://" + addr + otlpreceive.HTTPPath}
		}
		time.Sleep(50 * time.Millisecond)
	}
	log.Fatalf("heatscope receive does not answer on %s", addr)
	return nil
}

// stop stops the receiver and returns its peak RSS in bytes.
func (r *receiver) stop() int64 {
	rss := peakRSS(r.cmd.Process.Pid)
	r.cmd.Process.Signal(syscall.SIGTERM)
	r.cmd.Wait()
	return rss
}

// cpuTime is a process's user + system time so far.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command (which may hold spaces) start after ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// peakRSS reads VmHWM of a process.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// send posts the requests in turn from senders goroutines for d, and
// returns the samples the receiver stored, the requests and those
// refused.
func send(url string, reqs [][]byte, per []int, senders int, d time.Duration) (stored int64, requests, refused int64) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var next, nStored, nReq, nRefused atomic.Int64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: senders}}
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(reqs[i%int64(len(reqs))]))
				req.Header.Set("Content-Type", "application/x-protobuf")
				resp, err := client.Do(req)
				if err != nil {
					continue // the run's end cancelled it
				}
				resp.Body.Close()
				nReq.Add(1)
				if resp.StatusCode == http.StatusOK {
					nStored.Add(int64(per[i%int64(len(reqs))]))
				} else {
					nRefused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return nStored.Load(), nReq.Load(), nRefused.Load()
}

// perRequest counts each request's samples with the mapping's decoder.
func perRequest(reqs [][]byte) []int {
	out := make([]int, len(reqs))
	for i, b := range reqs {
		p, err := otlpprofile.UnmarshalRequest(b)
		if err != nil {
			log.Fatal(err)
		}
		rep, err := otlpprofile.Decode(p, otlpprofile.DecodeOptions{}, func(*sample.Sample) error { return nil })
		if err != nil {
			log.Fatal(err)
		}
		out[i] = rep.Samples
	}
	return out
}

// floodSend posts body from n senders at once for d and counts the
// answers by status.
func floodSend(url string, body []byte, n int, d time.Duration) map[int]int {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	codes := map[int]int{}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/x-protobuf")
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return codes
}
