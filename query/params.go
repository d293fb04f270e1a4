package query

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heatscope/heatscope/cpulist"
	"github.com/heatscope/heatscope/store"
)

// ParamError is a bad value for a named parameter (a flag or a URL query
// parameter: both use the same names).
type ParamError struct {
	Param string
	Err   error
}

func (e *ParamError) Error() string { return fmt.Sprintf("%s: %v", e.Param, e.Err) }
func (e *ParamError) Unwrap() error { return e.Err }

func paramErr(param string, format string, args ...any) error {
	return &ParamError{Param: param, Err: fmt.Errorf(format, args...)}
}

// MaxTime is the latest time ParseTime takes, in Unix nanoseconds (2^62,
// in the year 2116); the earliest is 0 (1970). Within them no range or
// step arithmetic (widths, alignment, step counts) overflows int64.
const MaxTime = int64(1) << 62

// timeRange says what ParseTime takes, for its range errors.
const timeRange = "want a time from 1970 to 2116 (Unix seconds 0 to 4611686018)"

// ParseTime parses a time given as RFC 3339 ("2026-11-21T14:03:07.42Z",
// the seconds may be left out: "2026-11-21T14:03Z"), Unix seconds with
// decimals ("1795237387.42"), or a duration before now ("-5m", "-1h30m").
// It returns Unix nanoseconds, from 0 to MaxTime. A date and time without
// a time zone, or a time of day without a date, is an error that says how
// to write it.
func ParseTime(param, s string, now time.Time) (int64, error) {
	s = strings.TrimSpace(s)
	var ns int64
	switch {
	case s == "":
		return 0, paramErr(param, "empty time")
	case strings.HasPrefix(s, "-") && !isNumber(s):
		d, err := time.ParseDuration(s[1:])
		if err != nil {
			return 0, paramErr(param, "%q is not a duration ago like -5m", Clip(s))
		}
		ns = now.Add(-d).UnixNano()
	case isNumber(s):
		var err error
		if ns, err = parseSeconds(param, s); err != nil {
			return 0, err
		}
		if ns < 0 {
			return 0, paramErr(param, "%q is before 1970: %s (%ss is a duration ago)", Clip(s), timeRange, Clip(s))
		}
	default:
		t, err := parseClock(param, s, now)
		if err != nil {
			return 0, err
		}
		if t.Year() < 1969 || t.Year() > 2117 { // beyond int64 nanoseconds, or nearly
			return 0, paramErr(param, "%q is out of range: %s", Clip(s), timeRange)
		}
		ns = t.UnixNano()
	}
	if ns < 0 || ns > MaxTime {
		return 0, paramErr(param, "%q is out of range: %s", Clip(s), timeRange)
	}
	return ns, nil
}

// parseClock parses an RFC 3339 time, its seconds optional. Without a
// time zone, or without a date, the error says how to write it, with an
// example built from s (and today's date in UTC for a time of day).
func parseClock(param, s string, now time.Time) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04Z07:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	dateTime := strings.Replace(s, " ", "T", 1)
	for _, layout := range []string{"2006-01-02T15:04:05.999999999", "2006-01-02T15:04"} {
		if t, err := time.Parse(layout, dateTime); err == nil {
			return time.Time{}, paramErr(param, "%q has no time zone: add Z for UTC or an offset like +02:00 (%s)", Clip(s), t.Format(time.RFC3339Nano))
		}
	}
	for _, layout := range []string{"15:04:05.999999999", "15:04"} {
		if t, err := time.Parse(layout, s); err == nil {
			day := now.UTC()
			t = time.Date(day.Year(), day.Month(), day.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
			return time.Time{}, paramErr(param, "%q is a time of day: give its date and time zone, e.g. %s for today in UTC, or an offset like +02:00 in place of Z", Clip(s), t.Format(time.RFC3339Nano))
		}
	}
	return time.Time{}, paramErr(param, "%q is not RFC 3339, Unix seconds or a duration ago like -5m", Clip(s))
}

// ParseDuration parses a length of time: a Go duration ("2s", "500ms")
// or a number of seconds ("2.5"), from lo to hi ns. Errors are
// *ParamError naming param.
func ParseDuration(param, v string, lo, hi int64) (int64, error) {
	outOfRange := func() error {
		return paramErr(param, "%q is out of range: want %v to %v", Clip(v), time.Duration(lo), time.Duration(hi))
	}
	var ns int64
	if d, err := time.ParseDuration(v); err == nil {
		ns = int64(d)
	} else if s, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(s) && !math.IsInf(s, 0) {
		if math.Abs(s) >= 9e9 { // beyond int64 nanoseconds (about 292 years)
			return 0, outOfRange()
		}
		ns = int64(math.Round(s * 1e9))
	} else if errors.Is(err, strconv.ErrRange) || validDurationSyntax(v) {
		return 0, outOfRange() // a number beyond float64, or a Go duration beyond int64 ns
	} else {
		return 0, paramErr(param, "%q is not a duration like 2s or a number of seconds", Clip(v))
	}
	if ns < lo || ns > hi {
		return 0, outOfRange()
	}
	return ns, nil
}

var digits = regexp.MustCompile(`[0-9]+`)

// validDurationSyntax reports whether v, which time.ParseDuration
// refused, is written as a Go duration: then only its size was wrong.
func validDurationSyntax(v string) bool {
	_, err := time.ParseDuration(digits.ReplaceAllString(v, "1"))
	return err == nil
}

// Clip shortens a value echoed in an error to at most 64 bytes, cut at a
// character boundary so that a multi-byte UTF-8 character stays whole.
func Clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	n := 64
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// parseSeconds turns decimal seconds into nanoseconds exactly (no float
// rounding: "1795237387.420001" keeps its microsecond).
func parseSeconds(param, s string) (int64, error) {
	neg := strings.HasPrefix(s, "-")
	whole, frac, _ := strings.Cut(strings.TrimPrefix(s, "-"), ".")
	if whole == "" {
		whole = "0"
	}
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, paramErr(param, "%q is not Unix seconds like 1795237387.42", Clip(s)) // "1e9", "Inf"
	}
	if err != nil || sec > math.MaxInt64/int64(time.Second)-1 {
		return 0, paramErr(param, "%q is out of range: %s", Clip(s), timeRange)
	}
	if len(frac) > 9 {
		frac = frac[:9]
	}
	ns := int64(0)
	if frac != "" {
		if ns, err = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64); err != nil {
			return 0, paramErr(param, "%q is not Unix seconds like 1795237387.42", Clip(s))
		}
	}
	v := sec*1e9 + ns
	if neg {
		v = -v
	}
	return v, nil
}

// MaxCPU is the highest CPU number a filter accepts (the kernel's limit is
// 8191 on x86-64; the filter keeps a mask as long as the highest CPU).
const MaxCPU = 65535

// FilterParams are the names of the filter parameters, the same as flags
// and as URL query parameters.
var FilterParams = []string{"source", "node", "label", "comm", "pid", "tid", "cpu", "cgroup", "container", "pod", "namespace", "qos", "frame", "stack", "idle"}

// ParseFilter builds a filter from parameters looked up by name (missing
// ones are ""). node is a comma separated list of node names, or a regular
// expression when it starts with "~"; label is a comma separated list of
// node labels, key=value, all of which a node must have. comm is an exact command name, or a regular expression when
// it starts with "~" ("~^kube"); pid, tid, cpu and cgroup are comma
// separated lists (cpu also takes ranges, "0-3,8"; cgroup also takes
// cgroup v2 paths, see parseCgroupPath, matched against the paths the
// recording host kept, never looked up here); container (names or ids, ids maybe
// shortened), pod (names or UIDs), namespace and qos (guaranteed,
// burstable, besteffort) are comma separated lists matched against the
// samples' container metadata; frame is a regular expression matched
// against function names; stack is all, kernel or user; idle is exclude
// (the default) or include.
func ParseFilter(get func(name string) string) (store.Filter, error) {
	var f store.Filter
	if v := get("source"); v != "" {
		f.Sources = strings.Split(v, ",")
	}
	if v := get("node"); strings.HasPrefix(v, "~") {
		re, err := regexp.Compile(v[1:])
		if err != nil {
			return f, paramErr("node", "bad regular expression: %v", err)
		}
		f.NodeRegex = re
	} else {
		var err error
		if f.Nodes, err = parseNames("node", v); err != nil {
			return f, err
		}
	}
	var err error
	if f.NodeLabels, err = parseLabels(get("label")); err != nil {
		return f, err
	}
	if v := get("comm"); strings.HasPrefix(v, "~") {
		re, err := regexp.Compile(v[1:])
		if err != nil {
			return f, paramErr("comm", "bad regular expression: %v", err)
		}
		f.CommRegex = re
	} else {
		f.Comm = v
	}
	if f.PIDs, err = parseIDs("pid", get("pid")); err != nil {
		return f, err
	}
	if f.TIDs, err = parseIDs("tid", get("tid")); err != nil {
		return f, err
	}
	if v := get("cpu"); v != "" {
		cpus, err := cpulist.Parse(v)
		if err != nil {
			return f, paramErr("cpu", "%q is not a CPU list like 0-3,8", v)
		}
		if len(cpus) > 0 && slices.Max(cpus) > MaxCPU {
			return f, paramErr("cpu", "CPU %d is above %d", slices.Max(cpus), MaxCPU)
		}
		for _, c := range cpus {
			f.CPUs = append(f.CPUs, uint32(c))
		}
	}
	if v := get("cgroup"); v != "" {
		for _, c := range strings.Split(v, ",") {
			if id, err := strconv.ParseUint(c, 10, 64); err == nil {
				f.Cgroups = append(f.Cgroups, id)
				continue
			}
			paths, err := parseCgroupPath(c)
			if err != nil {
				return f, err
			}
			f.CgroupPaths = append(f.CgroupPaths, paths...)
		}
	}
	for _, l := range []struct {
		param string
		to    *[]string
	}{{"container", &f.Containers}, {"pod", &f.Pods}, {"namespace", &f.Namespaces}, {"qos", &f.QoS}} {
		if *l.to, err = parseNames(l.param, get(l.param)); err != nil {
			return f, err
		}
	}
	for _, q := range f.QoS {
		if !slices.Contains([]string{"guaranteed", "burstable", "besteffort"}, q) {
			return f, paramErr("qos", "%q: want guaranteed, burstable or besteffort", q)
		}
	}
	if v := get("frame"); v != "" {
		// Always a regular expression; a leading ~, as comm and node
		// write one, is taken as such (no function name starts with ~).
		re, err := regexp.Compile(strings.TrimPrefix(v, "~"))
		if err != nil {
			return f, paramErr("frame", "bad regular expression: %v", err)
		}
		f.Frame = re
	}
	switch v := get("stack"); v {
	case "", "all":
	case "kernel":
		f.Stack = store.KernelFrames
	case "user":
		f.Stack = store.UserFrames
	default:
		return f, paramErr("stack", "%q: want all, kernel or user", v)
	}
	switch v := get("idle"); v {
	case "", "exclude":
	case "include":
		f.IncludeIdle = true
	default:
		return f, paramErr("idle", "%q: want exclude or include", v)
	}
	return f, nil
}

// maxCgroupPath bounds a cgroup path in a filter (PATH_MAX).
const maxCgroupPath = 4096

// cgroupMounts are where cgroup v2 is mounted: /sys/fs/cgroup, or on
// hybrid (v1 + v2) hosts /sys/fs/cgroup/unified.
var cgroupMounts = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}

// parseCgroupPath turns a cgroup path given to a filter into the paths
// below the cgroup v2 mount that a recorder keeps for a sample's cgroup
// ("/system.slice/kubelet.service", as /proc/PID/cgroup shows it). A
// relative path is below the mount; an absolute one is too, unless it lies
// under /sys/fs/cgroup, where it is taken below that mount (below
// /sys/fs/cgroup/unified it may be either host's: both paths are kept).
// It reads no file system: the path names a cgroup of the host that
// recorded, which the host that queries may not have.
func parseCgroupPath(c string) ([]string, error) {
	switch {
	case c == "":
		return nil, paramErr("cgroup", "an empty cgroup in the list")
	case len(c) > maxCgroupPath:
		return nil, paramErr("cgroup", "a path of %d bytes, at most %d", len(c), maxCgroupPath)
	case !utf8.ValidString(c) || strings.IndexFunc(c, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0:
		return nil, paramErr("cgroup", "%q: a cgroup path holds printable characters only", Clip(c))
	case slices.Contains(strings.Split(c, "/"), ".."):
		return nil, paramErr("cgroup", "%q: a cgroup path must not contain ..", Clip(c))
	}
	p := filepath.Clean("/" + c)
	var below []string
	for _, m := range cgroupMounts {
		if rest, ok := strings.CutPrefix(p, m); ok && (rest == "" || rest[0] == '/') {
			below = append(below, filepath.Clean("/"+rest))
		}
	}
	if len(below) == 0 {
		return []string{p}, nil
	}
	return below, nil
}

// maxNameLen is the longest Kubernetes name (a DNS subdomain).
const maxNameLen = 253

// parseNames splits a comma separated list of Kubernetes names, UIDs or
// container ids: letters, digits, '-', '.' and '_', at most maxNameLen
// characters each.
func parseNames(param, v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	names := strings.Split(v, ",")
	for _, n := range names {
		if n == "" {
			return nil, paramErr(param, "an empty name in %q", v)
		}
		if len(n) > maxNameLen {
			return nil, paramErr(param, "a name of %d characters, at most %d", len(n), maxNameLen)
		}
		for _, c := range n {
			// '@' joins a node and an instance: a second recorder of one
			// node name, shown apart (store.InstanceNodeName).
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '@' && (param == "node" || param == "source")) {
				return nil, paramErr(param, "%q: names hold only letters, digits, '-', '.' and '_' (and a node's or source's '@')", n)
			}
		}
	}
	return names, nil
}

// maxLabelValue bounds a node label's value.
const maxLabelValue = 256

// parseLabels parses a comma separated list of node labels, key=value:
// keys as names (letters, digits, '-', '.', '_', and '/' for a prefix as
// in topology.kubernetes.io/zone), values printable, without commas.
func parseLabels(v string) ([]store.Label, error) {
	if v == "" {
		return nil, nil
	}
	var labels []store.Label
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, paramErr("label", "%q is not key=value", kv)
		}
		if len(k) > maxNameLen || strings.IndexFunc(k, func(c rune) bool {
			return !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '/')
		}) >= 0 {
			return nil, paramErr("label", "key %q: keys hold at most %d letters, digits, '-', '.', '_' and '/'", k, maxNameLen)
		}
		if len(val) > maxLabelValue || strings.IndexFunc(val, func(c rune) bool { return c < ' ' || c == 0x7f }) >= 0 {
			return nil, paramErr("label", "value of %q: at most %d printable characters", k, maxLabelValue)
		}
		labels = append(labels, store.Label{Key: k, Value: val})
	}
	return labels, nil
}

func parseIDs(param, v string) ([]uint32, error) {
	if v == "" {
		return nil, nil
	}
	var ids []uint32
	for _, s := range strings.Split(v, ",") {
		id, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
		if err != nil {
			return nil, paramErr(param, "%q is not a number", s)
		}
		ids = append(ids, uint32(id))
	}
	return ids, nil
}
