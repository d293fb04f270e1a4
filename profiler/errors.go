package profiler

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Linux capability numbers (include/uapi/linux/capability.h).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// ErrNoBTF is returned when the kernel exposes no BTF type information, which
// the CO-RE sampler needs.
var ErrNoBTF = errors.New("kernel BTF not available: heatscope needs Linux >= 5.8 built with CONFIG_DEBUG_INFO_BTF=y " +
	"(/sys/kernel/btf/vmlinux), or a BTF file for this kernel given with --btf")

// ErrPerfUnavailable is returned when the kernel offers no cpu-clock perf
// events (no CONFIG_PERF_EVENTS, or a sandbox that hides them).
var ErrPerfUnavailable = errors.New("perf events are unavailable on this system")

// effectiveCapabilities returns the CapEff mask of this process.
func effectiveCapabilities() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("read capabilities: no CapEff line in /proc/self/status")
}

// missingCapabilities names the capabilities the sampler needs and this
// process lacks. CAP_SYS_ADMIN stands in for CAP_BPF and CAP_PERFMON.
func missingCapabilities() []string {
	caps, err := effectiveCapabilities()
	if err != nil {
		return []string{"CAP_BPF", "CAP_PERFMON"}
	}
	has := func(c uint) bool { return caps&(1<<c) != 0 }
	if has(capSysAdmin) {
		return nil
	}
	var missing []string
	if !has(capBPF) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capPerfmon) {
		missing = append(missing, "CAP_PERFMON")
	}
	return missing
}

// permissionError explains an EPERM or EACCES from a BPF or perf syscall
// by naming the capabilities the process lacks.
func permissionError(op string, err error) error {
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%s: %w", op, err)
	}
	missing := missingCapabilities()
	lacks := "it has CAP_SYS_ADMIN, so a security module or sandbox forbids it"
	if len(missing) > 0 {
		lacks = "this process lacks " + strings.Join(missing, " and ")
	}
	paranoid := "unknown"
	if b, rerr := os.ReadFile("/proc/sys/kernel/perf_event_paranoid"); rerr == nil {
		paranoid = strings.TrimSpace(string(b))
	}
	return fmt.Errorf("%s: %w: sampling needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); %s "+
		"(kernel.perf_event_paranoid=%s); run as root or grant them, e.g. "+
		"setcap cap_bpf,cap_perfmon,cap_syslog,cap_sys_ptrace+ep heatscope", op, err, lacks, paranoid)
}

// perfOpenError explains a failed perf_event_open.
func perfOpenError(cpu int, err error) error {
	op := fmt.Sprintf("open cpu-clock perf event on CPU %d", cpu)
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return permissionError(op, err)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENODEV), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("%s: %w: %w", op, ErrPerfUnavailable, err)
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
}
