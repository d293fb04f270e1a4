// Command otlp benchmarks record --otlp-endpoint: what sending the
// samples as OTLP profiles while recording adds to the agent's CPU, and
// the agent's memory while the endpoint is down.
//
// CPU: in each run two recorders sample the same busy machine at the
// same time, at -hz, with the overhead guard off (a fixed rate on both):
// one with --otlp-endpoint (an OTLP/gRPC endpoint in this process, the
// collector's own pprofileotlp service, which decodes and counts what it
// takes, gzip or not), one without. Their CPU (user + system, from
// rusage) is compared run by run, and the median of the ratios printed: a
// same-run ratio holds however loaded the machine is. Each agent's Go
// allocation and garbage collections over the run (its /metrics, read 2 s
// before it ends) say what the CPU ratio cannot at a high load: what the
// export makes the collector do.
//
// Memory: a recorder with --otlp-endpoint at a port nobody listens on,
// beside one without, for -down; both RSS every 10 s, with the exporter's
// queue and drops from the first one's /metrics.
//
// With -before BIN (a heatscope built from an earlier commit) a third
// recorder runs at once with the other two, exporting with that binary:
// a change's cost or saving is then a same-run ratio too.
//
// With -workload-only every recorder samples only the two busy programs
// (record --pid), which run at nice -15: on a busy machine each agent
// then does what it does on a quiet one (the same two processes at the
// full rate), not the machine's new processes, whose symbols and tables
// cost each agent 2-7% of a CPU at a load of 15-35 and bury the export's
// share.
//
// Run it as root from the repository root:
//
//	go run ./bench/otlp -runs 5 -duration 30s -down 10m
//	git worktree add /tmp/before HEAD~1 && (cd /tmp/before && go build -o /tmp/heatscope-before ./cmd/heatscope)
//	go run ./bench/otlp -runs 5 -duration 30s -down 0 -before /tmp/heatscope-before
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the export's requests are gzip-compressed by default

	"github.com/heatscope/heatscope/bench/internal/loadavg"
	"github.com/heatscope/heatscope/bench/internal/profrun"
	"github.com/heatscope/heatscope/otlpprofile"
	"github.com/heatscope/heatscope/sample"
)

func main() {
	runs := flag.Int("runs", 5, "CPU runs (0: none, the memory run alone)")
	duration := flag.Duration("duration", 30*time.Second, "length of each CPU run")
	hz := flag.Int("hz", 99, "sampling frequency")
	down := flag.Duration("down", 10*time.Minute, "how long the memory run keeps the endpoint down (0: no memory run)")
	queue := flag.String("queue", "4MiB", "--otlp-queue-size of the memory run")
	interval := flag.Duration("interval", 0, "--otlp-interval of the CPU runs (0: record's default)")
	before := flag.String("before", "", "a heatscope binary built from an earlier commit: a third recorder with --otlp-endpoint, run at once with the other two")
	workloadOnly := flag.Bool("workload-only", false, "every recorder samples only the busy programs (record --pid), run at nice -15")
	flag.Parse()
	log.SetFlags(0)

	tmp, err := os.MkdirTemp("", "otlp-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "heatscope")
	build(exec.Command("go", "build", "-o", bin, "./cmd/heatscope"))
	hotc := filepath.Join(tmp, "hotc")
	build(exec.Command("gcc", "-O0", "-fno-omit-frame-pointer", "-o", hotc, "cmd/heatscope/testdata/hotc.c"))
	hotgo := filepath.Join(tmp, "hotgo")
	build(exec.Command("go", "build", "-o", hotgo, "./cmd/heatscope/testdata/hotgo"))
	var pids []string
	for _, w := range []string{hotc, hotgo} {
		cmd := exec.Command(w)
		if err := cmd.Start(); err != nil {
			log.Fatal(err)
		}
		defer cmd.Process.Kill()
		pids = append(pids, strconv.Itoa(cmd.Process.Pid))
		if *workloadOnly {
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, -15); err != nil {
				log.Fatalf("nice -15 %s: %v", w, err)
			}
		}
	}
	if *workloadOnly {
		recordFlags = []string{"--pid", strings.Join(pids, ",")}
	}

	fmt.Printf("# record --otlp-endpoint: the agent's cost\n\n%s\n\n", loadavg.Line())
	if *workloadOnly {
		fmt.Printf("Every recorder samples only the busy programs (%s), at nice -15.\n\n", strings.Join(recordFlags, " "))
	}
	r := &receiver{}
	addr := serve(r)
	if *runs > 0 {
		cpuRuns(bin, *before, tmp, addr, r, *runs, *duration, *hz, *interval)
	}
	if *down > 0 {
		memoryRun(bin, tmp, *down, *hz, *queue)
	}
}

func build(cmd *exec.Cmd) {
	if out, err := cmd.CombinedOutput(); err != nil {
		log.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}

// receiver is the OTLP endpoint: the collector's gRPC service, decoding
// and counting what it takes.
type receiver struct {
	pprofileotlp.UnimplementedGRPCServer
	samples atomic.Int64
}

func (r *receiver) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	_, err := otlpprofile.Decode(req.Profiles(), otlpprofile.DecodeOptions{}, func(*sample.Sample) error {
		r.samples.Add(1)
		return nil
	})
	return pprofileotlp.NewExportResponse(), err
}

func serve(r *receiver) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(s, r)
	go s.Serve(l)
	return l.Addr().String()
}

// recordFlags are given to every recorder (-workload-only's --pid).
var recordFlags []string

// record starts heatscope record for d into its own data and cache
// directories, with the guard off, recordFlags and extra flags.
func record(bin, dir string, d time.Duration, hz int, extra ...string) (*exec.Cmd, *strings.Builder) {
	args := []string{"record", "--duration", d.String(), "--frequency", strconv.Itoa(hz), "--max-cpu", "0",
		"--data", filepath.Join(dir, "data"), "--cache-dir", filepath.Join(dir, "cache"), "--listen", "", "--progress", "0"}
	args = append(args, recordFlags...)
	cmd := exec.Command(bin, append(args, extra...)...)
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	return cmd, stderr
}

// agent is one recorder of the CPU runs: its binary and flags.
type agent struct {
	name, bin string
	flags     []string
}

// cpuRuns prints each run's CPU without the export and with it (with
// the before binary's export too, when there is one), the agents' Go
// allocation and collections, and the median ratios.
func cpuRuns(bin, before, tmp, addr string, r *receiver, runs int, d time.Duration, hz int, interval time.Duration) {
	otlpFlags := []string{"--otlp-endpoint", addr, "--otlp-insecure"}
	if interval > 0 {
		otlpFlags = append(otlpFlags, "--otlp-interval", interval.String())
	}
	agents := []agent{{"without", bin, nil}, {"with --otlp-endpoint", bin, otlpFlags}}
	if before != "" {
		agents = append(agents, agent{"before's, with --otlp-endpoint", before, otlpFlags})
	}
	dirs := make([]string, len(agents))
	for i := range agents {
		dirs[i] = filepath.Join(tmp, fmt.Sprintf("agent%d", i))
		// A short first run of each fills its cache directory (kernel
		// symbols), as an always-on agent's is.
		os.RemoveAll(dirs[i])
		cmd, stderr := record(agents[i].bin, dirs[i], 3*time.Second, hz, agents[i].flags...)
		if err := cmd.Wait(); err != nil {
			log.Fatalf("warm-up: %v\n%s", err, stderr)
		}
	}
	fmt.Printf("## CPU: %d runs of %v at %d Hz, the guard off, the recorders at once; %s\n\n", runs, d, hz, strings.Join(otlpFlags[2:], " "))
	if before != "" {
		fmt.Printf("The before binary: %s.\n\n", before)
	}
	fmt.Print("Each agent's CPU (user + system, rusage), its share of one CPU; its Go allocation (MB) and collections over the run (from /metrics, 2 s before its end).\n\n")
	head := "| run |"
	for _, a := range agents {
		head += " " + a.name + " |"
	}
	head += " ratio with / without |"
	if before != "" {
		head += " before's ratio | with / before's |"
	}
	fmt.Println(head + " samples recorded (with) | samples the endpoint took (every exporter's) | load |")
	fmt.Println(strings.Repeat("|---", strings.Count(head, "|")+2) + "|")
	var ratios, beforeRatios, vsBefore, shares []float64
	for run := 1; run <= runs; run++ {
		took0 := r.samples.Load()
		usage := make([]profrun.Usage, len(agents))
		summary := make([]string, len(agents))
		mem := make([]map[string]float64, len(agents))
		var wg sync.WaitGroup
		order := make([]int, len(agents))
		for i := range order {
			order[i] = (i + run) % len(agents) // none always starts first
		}
		for _, i := range order {
			os.RemoveAll(filepath.Join(dirs[i], "data"))
			port, err := profrun.FreePort()
			if err != nil {
				log.Fatal(err)
			}
			cmd, stderr := record(agents[i].bin, dirs[i], d, hz, append([]string{"--listen", "127.0.0.1:" + port}, agents[i].flags...)...)
			wg.Add(2)
			go func() {
				defer wg.Done()
				if err := cmd.Wait(); err != nil {
					log.Fatalf("record: %v\n%s", err, stderr)
				}
				usage[i] = profrun.UsageOf(cmd.ProcessState)
				summary[i] = stderr.String()
			}()
			go func() {
				defer wg.Done()
				time.Sleep(d - 2*time.Second)
				m, err := profrun.ReadMetrics("http://127.0.0.1:" + port + "/metrics")
				if err != nil {
					log.Printf("agent %d's /metrics: %v", i, err)
				}
				mem[i] = m
			}()
		}
		wg.Wait()
		m := recordedRe.FindStringSubmatch(summary[1])
		if m == nil {
			log.Fatalf("no samples count in record's summary:\n%s", summary[1])
		}
		took := r.samples.Load() - took0
		cpu := func(i int) float64 { return usage[i].CPU.Seconds() }
		ratio := cpu(1) / cpu(0)
		ratios = append(ratios, ratio)
		shares = append(shares, 100*(cpu(1)-cpu(0))/d.Seconds())
		line := fmt.Sprintf("| %d |", run)
		for i := range agents {
			line += fmt.Sprintf(" %.3f s (%.2f%%), %.1f MB, %.0f GC |", cpu(i), 100*cpu(i)/d.Seconds(),
				mem[i]["go_memstats_alloc_bytes_total"]/1e6, mem[i]["go_gc_duration_seconds"])
		}
		line += fmt.Sprintf(" %.3f |", ratio)
		if before != "" {
			beforeRatios = append(beforeRatios, cpu(2)/cpu(0))
			vsBefore = append(vsBefore, cpu(1)/cpu(2))
			line += fmt.Sprintf(" %.3f | %.3f |", cpu(2)/cpu(0), cpu(1)/cpu(2))
		}
		fmt.Printf("%s %s | %d | %s |\n", line, m[1], took, loadavg.OneMinute())
	}
	slices.Sort(ratios)
	slices.Sort(shares)
	fmt.Printf("\nmedian ratio (with / without): %.3f (range %.3f to %.3f); median difference %.3f%% of a CPU\n",
		profrun.Median(ratios), ratios[0], ratios[len(ratios)-1], profrun.Median(shares))
	if before != "" {
		slices.Sort(beforeRatios)
		slices.Sort(vsBefore)
		fmt.Printf("before's median ratio (with / without): %.3f (range %.3f to %.3f); with / before's: %.3f (range %.3f to %.3f)\n",
			profrun.Median(beforeRatios), beforeRatios[0], beforeRatios[len(beforeRatios)-1],
			profrun.Median(vsBefore), vsBefore[0], vsBefore[len(vsBefore)-1])
	}
	fmt.Println()
}

// memoryRun prints both recorders' RSS every 10 s while the endpoint is
// down, and the exporter's queue and drops.
func memoryRun(bin, tmp string, d time.Duration, hz int, queue string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	deadAddr := l.Addr().String()
	l.Close() // nobody listens: connections are refused
	port, err := profrun.FreePort()
	if err != nil {
		log.Fatal(err)
	}
	dirs := [2]string{filepath.Join(tmp, "plain-down"), filepath.Join(tmp, "otlp-down")}
	plain, plainErr := record(bin, dirs[0], d, hz)
	down, downErr := record(bin, dirs[1], d, hz, "--otlp-endpoint", deadAddr, "--otlp-insecure", "--otlp-queue-size", queue,
		"--listen", "127.0.0.1:"+port)
	metrics := "http://127.0.0.1:" + port + "/metrics"
	if err := profrun.WaitHTTP(metrics, 30*time.Second); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("## Memory with the endpoint down: %v at %d Hz, --otlp-queue-size %s, beside a recorder without export\n\n", d, hz, queue)
	fmt.Println("| time | RSS without | RSS with the endpoint down | queue (protobuf bytes) | queued samples | dropped (queue full) | failed requests |")
	fmt.Println("|---|---|---|---|---|---|---|")
	var maxDiff int64
	start := time.Now()
	for t := time.NewTicker(10 * time.Second); time.Since(start) < d-5*time.Second; <-t.C {
		a, b := rss(plain.Process.Pid), rss(down.Process.Pid)
		m, err := profrun.ReadMetrics(metrics)
		if err != nil {
			log.Fatal(err)
		}
		if time.Since(start) > d/2 {
			maxDiff = max(maxDiff, b-a)
		}
		fmt.Printf("| %v | %.1f MiB | %.1f MiB | %.0f | %.0f | %.0f | %.0f |\n", time.Since(start).Round(time.Second), mib(a), mib(b),
			m["heatscope_otlp_queue_bytes"], m["heatscope_otlp_queue_samples"], m["heatscope_otlp_dropped_samples_total{reason=queue_full}"],
			m["heatscope_otlp_failed_requests_total"])
	}
	for _, c := range []struct {
		cmd    *exec.Cmd
		stderr *strings.Builder
	}{{plain, plainErr}, {down, downErr}} {
		if err := c.cmd.Wait(); err != nil {
			log.Fatalf("record: %v\n%s", err, c.stderr)
		}
	}
	fmt.Printf("\nlargest RSS over the plain recorder's in the second half: %.1f MiB; peak RSS (rusage) without %.1f MiB, with %.1f MiB\n",
		mib(maxDiff), mib(profrun.UsageOf(plain.ProcessState).MaxRSS), mib(profrun.UsageOf(down.ProcessState).MaxRSS))
	for _, line := range strings.Split(downErr.String(), "\n") {
		if strings.HasPrefix(line, "otlp ") {
			fmt.Println(line)
		}
	}
}

// recordedRe finds the samples record's summary says it recorded.
var recordedRe = regexp.MustCompile(`recorded [0-9.]+s: (\d+) samples`)

// rss reads a process's resident set size, in bytes.
func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb << 10
		}
	}
	log.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
