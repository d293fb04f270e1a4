// Command cpu-zombies reproduces the shape of an incident: a node drops
// off the network now and then ("ena ... Device reset" in the kernel log),
// and the cause is a burst of CPU a moment before, in a kubelet walking
// the stats of tens of thousands of leaked memory cgroups.
//
// It creates many memory cgroups (cgroup v2 when the memory controller is
// enabled at the v2 root, else the v1 memory hierarchy), then runs a
// process named kubelet-sim (itself, executed through a symlink of that
// name, so every thread's comm is kubelet-sim) that every --interval reads
// the stats files of all of them for --burst, and right after every
// --inject-every'th burst writes an ENA-style reset line, marked as
// injected, into /dev/kmsg. Each burst is reported on stdout as one JSON
// line. The cgroups are removed on exit, on SIGINT and SIGTERM too, and
// leftovers of a run that was killed are removed at the next start.
//
// It needs root. See README.md.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	simName   = "kubelet-sim"
	dirPrefix = "heatscope-cpu-zombies-"
	// InjectedPrefix starts every line written into the kernel log.
	injectedPrefix = "heatscope-scenario[injected]:"
)

type config struct {
	cgroups     int
	interval    time.Duration
	burst       time.Duration
	bursts      int
	injectEvery int
	cpu         int
	tag         string
}

func main() {
	var c config
	flag.IntVar(&c.cgroups, "cgroups", 2000, "memory cgroups to create")
	flag.DurationVar(&c.interval, "interval", 4*time.Second, "time from one burst's start to the next")
	flag.DurationVar(&c.burst, "burst", 1500*time.Millisecond, "how long each burst reads stats files (whole passes over all cgroups, at least one)")
	flag.IntVar(&c.bursts, "bursts", 0, "bursts to run, then exit (0: until SIGINT or SIGTERM)")
	flag.IntVar(&c.injectEvery, "inject-every", 2, "write a reset line into /dev/kmsg after every Nth burst (0: never)")
	flag.IntVar(&c.cpu, "cpu", -1, "pin kubelet-sim to this CPU (-1: do not pin)")
	flag.StringVar(&c.tag, "tag", "", "text added to the injected lines, to tell runs apart")
	flag.Parse()
	var err error
	if filepath.Base(os.Args[0]) == simName {
		err = runSim(c, flag.Args())
	} else {
		err = run(c)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpu-zombies:", err)
		os.Exit(1)
	}
}

// hierarchy is where memory cgroups are made and what their stats files are.
type hierarchy struct {
	root    string
	version int
	files   []string
}

// findMemoryHierarchy picks cgroup v2 when its root lists the memory
// controller in cgroup.controllers, else the v1 hierarchy mounted with the
// memory controller.
func findMemoryHierarchy() (hierarchy, error) {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return hierarchy{}, err
	}
	var v1 string
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		switch {
		case f[2] == "cgroup2":
			ctrl, err := os.ReadFile(filepath.Join(f[1], "cgroup.controllers"))
			if err == nil && contains(strings.Fields(string(ctrl)), "memory") {
				return hierarchy{root: f[1], version: 2, files: []string{"memory.stat", "memory.numa_stat"}}, nil
			}
		case f[2] == "cgroup" && contains(strings.Split(f[3], ","), "memory") && v1 == "":
			v1 = f[1]
		}
	}
	if v1 != "" {
		return hierarchy{root: v1, version: 1, files: []string{"memory.stat", "memory.numa_stat"}}, nil
	}
	return hierarchy{}, errors.New("no memory cgroup controller: neither cgroup v2 with memory nor a v1 memory hierarchy is mounted")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// run creates the cgroups, runs kubelet-sim and cleans up.
func run(c config) error {
	if c.cgroups < 1 || c.burst <= 0 || c.interval < c.burst || c.injectEvery < 0 || c.bursts < 0 {
		return fmt.Errorf("want --cgroups ≥ 1, --burst > 0, --interval ≥ --burst, --inject-every ≥ 0, --bursts ≥ 0")
	}
	h, err := findMemoryHierarchy()
	if err != nil {
		return err
	}
	removeLeftovers(h.root)
	parent := filepath.Join(h.root, dirPrefix+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(parent, 0o755); err != nil {
		return fmt.Errorf("create cgroup: %w", err)
	}
	defer removeCgroups(parent)
	if h.version == 2 {
		// Children get the memory controller only when their parent
		// delegates it.
		os.WriteFile(filepath.Join(h.root, "cgroup.subtree_control"), []byte("+memory"), 0)
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
			return fmt.Errorf("enable the memory controller in %s: %w", parent, err)
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	created := time.Now()
	for i := range c.cgroups {
		if err := os.Mkdir(filepath.Join(parent, fmt.Sprintf("z%05d", i)), 0o755); err != nil {
			return fmt.Errorf("create cgroup %d: %w", i, err)
		}
		select {
		case <-sigs:
			return errors.New("interrupted")
		default:
		}
	}
	fmt.Fprintf(os.Stderr, "cpu-zombies: %d memory cgroups (v%d) under %s in %.1fs\n", c.cgroups, h.version, parent, time.Since(created).Seconds())

	// kubelet-sim is this program run through a symlink of that name:
	// the kernel names the process (every thread) after the file run.
	tmp, err := os.MkdirTemp("", "cpu-zombies-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	sim := filepath.Join(tmp, simName)
	if err := os.Symlink(self, sim); err != nil {
		return err
	}
	args := []string{"-interval", c.interval.String(), "-burst", c.burst.String(), "-bursts", strconv.Itoa(c.bursts),
		"-inject-every", strconv.Itoa(c.injectEvery), "-cpu", strconv.Itoa(c.cpu), "-tag", c.tag, "--"}
	for i := range c.cgroups {
		args = append(args, filepath.Join(parent, fmt.Sprintf("z%05d", i)))
	}
	cmd := exec.Command(sim, args...)
	cmd.Stdin = strings.NewReader(strings.Join(h.files, "\n"))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := startPinned(cmd, c.cpu); err != nil {
		return fmt.Errorf("start %s: %w", simName, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-sigs:
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		return nil
	}
}

// startPinned starts cmd with its CPU affinity set to cpu (when ≥ 0): the
// child inherits the mask of the thread that forks it, so every thread of
// its runtime is pinned from the start, as taskset does.
func startPinned(cmd *exec.Cmd, cpu int) error {
	if cpu < 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// removeLeftovers removes the cgroups of earlier runs whose process is gone.
func removeLeftovers(root string) {
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		pid, ok := strings.CutPrefix(e.Name(), dirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue
		}
		removeCgroups(filepath.Join(root, e.Name()))
	}
}

// removeCgroups removes a cgroup's children, then the cgroup.
func removeCgroups(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				fmt.Fprintln(os.Stderr, "cpu-zombies: remove cgroup:", err)
			}
		}
	}
	if err := os.Remove(dir); err != nil {
		fmt.Fprintln(os.Stderr, "cpu-zombies: remove cgroup:", err)
	}
}

// burstReport is one stdout line: times are Unix ns; Injected is 0 when
// no line was written.
type burstReport struct {
	Burst    int    `json:"burst"`
	Start    int64  `json:"start"`
	End      int64  `json:"end"`
	Reads    int    `json:"reads"`
	Injected int64  `json:"injected"`
	Line     string `json:"line,omitempty"`
	CPU      int    `json:"cpu"`
}

// runSim is kubelet-sim: bursts of stats reads over the cgroup
// directories given as arguments, the stats file names read from stdin.
func runSim(c config, dirs []string) error {
	var names []string
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if n := strings.TrimSpace(sc.Text()); n != "" {
			names = append(names, n)
		}
	}
	var files []string
	for _, d := range dirs {
		for _, n := range names {
			files = append(files, filepath.Join(d, n))
		}
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	next := time.Now().Add(c.interval / 4)
	enc := json.NewEncoder(os.Stdout)
	buf := make([]byte, 64<<10)
	for n := 1; c.bursts == 0 || n <= c.bursts; n++ {
		select {
		case <-stop:
			return nil
		case <-time.After(time.Until(next)):
		}
		next = next.Add(c.interval)
		rep := burstReport{Burst: n, Start: time.Now().UnixNano()}
		for pass := 0; pass == 0 || time.Since(time.Unix(0, rep.Start)) < c.burst; pass++ {
			rep.Reads += readAll(files, buf)
		}
		rep.End = time.Now().UnixNano()
		rep.CPU = currentCPU()
		if c.injectEvery > 0 && n%c.injectEvery == 0 {
			rep.Line = fmt.Sprintf("%s ena 0000:00:05.0 eth0: Device reset (burst %d%s)", injectedPrefix, n, tagText(c.tag))
			t, err := injectKmsg(rep.Line)
			if err != nil {
				return err
			}
			rep.Injected = t
		}
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
	return nil
}

// currentCPU is the CPU the calling thread runs on (getcpu(2)).
func currentCPU() int {
	var cpu uint32
	if _, _, errno := unix.Syscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); errno != 0 {
		return -1
	}
	return int(cpu)
}

func tagText(tag string) string {
	if tag == "" {
		return ""
	}
	return ", " + tag
}

// readAll opens, reads and closes every file once, as a kubelet's stats
// collection does; it returns how many it read.
func readAll(files []string, buf []byte) int {
	n := 0
	for _, f := range files {
		fd, err := unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		for {
			m, err := unix.Read(fd, buf)
			if m <= 0 || err != nil {
				break
			}
		}
		unix.Close(fd)
		n++
	}
	return n
}

// injectKmsg writes line into the kernel log at warning level and returns
// the time it was written (Unix ns).
func injectKmsg(line string) (int64, error) {
	f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		return 0, fmt.Errorf("write the kernel log: %w", err)
	}
	defer f.Close()
	t := time.Now().UnixNano()
	// The newline ends the record: without it the kernel holds the line
	// back for a continuation.
	if _, err := f.WriteString("<4>" + line + "\n"); err != nil {
		return 0, fmt.Errorf("write the kernel log: %w", err)
	}
	return t, nil
}
