package query

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/heatscope/heatscope/store"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 21, 14, 3, 7, 420_000_000, time.UTC)
	for in, want := range map[string]int64{
		"1795237387.420001":              1795237387_420001000,
		"1795237387":                     1795237387_000000000,
		"0.5":                            500_000_000,
		"2026-11-21T14:03:07.42Z":        now.UnixNano(),
		"2026-11-21T15:03:07.42+01:00":   now.UnixNano(),
		"-5m":                            now.Add(-5 * time.Minute).UnixNano(),
		"-1h30m":                         now.Add(-90 * time.Minute).UnixNano(),
		"1795237387.4200011119999999999": 1795237387_420001111,
		"2026-11-21T14:03Z":              now.Truncate(time.Minute).UnixNano(),
		"2026-11-21T15:03+01:00":         now.Truncate(time.Minute).UnixNano(),
		"0":                              0,
		"4611686018":                     4611686018_000000000,
	} {
		got, err := ParseTime("from", in, now)
		if err != nil || got != want {
			t.Errorf("ParseTime(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "yesterday", "-5 minutes", "2026-13-01", "99999999999999999999", "2300-01-01T00:00:00Z", "1e9", "NaN"} {
		_, err := ParseTime("to", bad, now)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != "to" {
			t.Errorf("ParseTime(%q) = %v, want an error naming to", bad, err)
		}
	}
}

// TestParseTimeSaysHowToWriteIt: a time without a time zone, or without
// a date, is refused with the time written as it is taken; a time beyond
// what the store holds names the range taken, however it was written.
func TestParseTimeSaysHowToWriteIt(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 30, 0, 0, time.UTC)
	for in, msg := range map[string]string{
		"2026-11-28T10:04":       `"2026-11-28T10:04" has no time zone: add Z for UTC or an offset like +02:00 (2026-11-28T10:04:00Z)`,
		"2026-11-28 10:04":       `has no time zone: add Z for UTC or an offset like +02:00 (2026-11-28T10:04:00Z)`,
		"2026-11-28T10:04:05.5":  `(2026-11-28T10:04:05.5Z)`,
		"10:04":                  `"10:04" is a time of day: give its date and time zone, e.g. 2026-11-28T10:04:00Z for today in UTC`,
		"10:04:07":               `e.g. 2026-11-28T10:04:07Z`,
		"9999999999":             `"9999999999" is out of range: want a time from 1970 to 2116 (Unix seconds 0 to 4611686018)`,
		"4611686019":             `is out of range: want a time from 1970 to 2116`,
		"99999999999999999999":   `is out of range: want a time from 1970 to 2116`,
		"2200-01-01T00:00:00Z":   `is out of range: want a time from 1970 to 2116`,
		"1969-12-31T23:59:59Z":   `is out of range: want a time from 1970 to 2116`,
		"-1000000h":              `is out of range: want a time from 1970 to 2116`,
		"-5":                     `"-5" is before 1970: want a time from 1970 to 2116 (Unix seconds 0 to 4611686018) (-5s is a duration ago)`,
		"1e9":                    `"1e9" is not Unix seconds like 1795237387.42`,
		strings.Repeat("9", 100): `is out of range`,
	} {
		_, err := ParseTime("to", in, now)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != "to" || !strings.Contains(err.Error(), msg) || len(err.Error()) > 200 {
			t.Errorf("ParseTime(%q) = %v, want an error naming to that says %q", in, err, msg)
		}
	}
}

// TestParseDuration: Go durations and seconds within the bounds; the
// rest errors naming the parameter, saying which of the two it is.
func TestParseDuration(t *testing.T) {
	const lo, hi = int64(time.Millisecond), int64(time.Hour)
	for in, want := range map[string]int64{"2s": 2e9, "500ms": 5e8, "2.5": 2.5e9, "0.001": 1e6, "1h": int64(time.Hour), "3600": int64(time.Hour)} {
		if got, err := ParseDuration("window", in, lo, hi); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{
		"":                      "is not a duration",
		"abc":                   "is not a duration",
		"NaN":                   "is not a duration",
		"Inf":                   "is not a duration",
		"1.5.5s":                "is not a duration",
		"1e300":                 "is out of range: want 1ms to 1h0m0s",
		"1e10":                  "is out of range: want 1ms to 1h0m0s",
		"1e400":                 "is out of range: want 1ms to 1h0m0s",
		"99999999999h":          "is out of range: want 1ms to 1h0m0s",
		"-1":                    "is out of range: want 1ms to 1h0m0s",
		"1h0m1s":                "is out of range",
		"0.0001":                "is out of range",
		strings.Repeat("9", 99): "is out of range",
	} {
		_, err := ParseDuration("window", in, lo, hi)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != "window" || !strings.Contains(err.Error(), msg) || len(err.Error()) > 140 {
			t.Errorf("ParseDuration(%q) = %v, want an error naming window that says %q, the value clipped", in, err, msg)
		}
	}
}

// TestClip checks that a clipped value keeps at most 64 bytes and never
// cuts a multi-byte character in half.
func TestClip(t *testing.T) {
	ascii := strings.Repeat("a", 100)
	if got := Clip(ascii); got != ascii[:64]+"..." {
		t.Errorf("Clip(100 a's) = %q, want the first 64 and ...", got)
	}
	if got := Clip("short é"); got != "short é" {
		t.Errorf("Clip(%q) = %q, want it unchanged", "short é", got)
	}
	for pad := 60; pad <= 64; pad++ {
		in := strings.Repeat("a", pad) + strings.Repeat("€", 10) // € is 3 bytes
		got := Clip(in)
		head, ok := strings.CutSuffix(got, "...")
		if !ok || !utf8.ValidString(got) || len(head) > 64 || len(head) < 62 || !strings.HasPrefix(in, head) {
			t.Errorf("Clip(%d a's and 10 €) = %q, want a valid UTF-8 prefix of 62 to 64 bytes and ...", pad, got)
		}
	}
}

func TestParseFilter(t *testing.T) {
	params := map[string]string{"comm": "~^kube", "pid": "1,2", "cpu": "0-2,5", "frame": "mem_cgroup", "stack": "kernel", "idle": "include", "source": "a,b"}
	f, err := ParseFilter(func(n string) string { return params[n] })
	if err != nil {
		t.Fatal(err)
	}
	if f.CommRegex == nil || !f.CommRegex.MatchString("kubelet") || len(f.PIDs) != 2 || len(f.CPUs) != 4 ||
		f.Frame == nil || f.Stack != store.KernelFrames || !f.IncludeIdle || len(f.Sources) != 2 {
		t.Fatalf("filter %+v", f)
	}
	labels := map[string]string{"container": "cart,9f3ac9d2a4b1", "pod": "cart-7d9f,5f1b3a9e-2c4d-4e6f-8a0b-1c2d3e4f5a6b",
		"namespace": "shop", "qos": "burstable,besteffort"}
	f, err = ParseFilter(func(n string) string { return labels[n] })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.Containers, []string{"cart", "9f3ac9d2a4b1"}) || !slices.Equal(f.Pods, []string{"cart-7d9f", "5f1b3a9e-2c4d-4e6f-8a0b-1c2d3e4f5a6b"}) ||
		!slices.Equal(f.Namespaces, []string{"shop"}) || !slices.Equal(f.QoS, []string{"burstable", "besteffort"}) {
		t.Fatalf("container filter %+v", f)
	}
	for _, tc := range []struct{ param, bad string }{
		{"comm", "~("}, {"pid", "x"}, {"tid", "-1"}, {"cpu", "3-1"}, {"cpu", "4000000000"}, {"cpu", strings.Repeat("0-65535,", 500) + "0"}, {"frame", "["},
		{"stack", "both"}, {"idle", "yes"}, {"cgroup", "../etc"}, {"cgroup", "/sys/fs/cgroup/a/../../etc"}, {"cgroup", "5,,6"},
		{"cgroup", "a\x01b"}, {"cgroup", "\xff"}, {"cgroup", "/" + strings.Repeat("c", 4096)},
		{"container", "a,,b"}, {"container", "<script>"}, {"pod", "a b"}, {"pod", strings.Repeat("p", 254)},
		{"namespace", "kube-system,"}, {"namespace", "ns/x"}, {"qos", "gold"}, {"qos", "burstable,Burstable"},
	} {
		param, bad := tc.param, tc.bad
		_, err := ParseFilter(func(n string) string {
			if n == param {
				return bad
			}
			return ""
		})
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != param {
			t.Errorf("%s=%q: %v, want an error naming %s", param, bad, err, param)
		}
	}
}

// TestParseCgroupFilter: cgroup ids and paths parse without a look at
// this host's file system. A path names a cgroup of the host that
// recorded, kept below its cgroup v2 mount: a relative path and one under
// /sys/fs/cgroup are taken below the mount, and one under
// /sys/fs/cgroup/unified as either host's. None of these cgroups exists
// here: parsing used to stat them and fail.
func TestParseCgroupFilter(t *testing.T) {
	for _, tc := range []struct {
		in    string
		ids   []uint64
		paths []string
	}{
		{"12345", []uint64{12345}, nil},
		{"/kubepods.slice/no-such-pod.slice", nil, []string{"/kubepods.slice/no-such-pod.slice"}},
		{"system.slice/no-such.service", nil, []string{"/system.slice/no-such.service"}},
		{"/sys/fs/cgroup/system.slice/no-such.service/", nil, []string{"/system.slice/no-such.service"}},
		{"/sys/fs/cgroup", nil, []string{"/"}},
		{"/sys/fs/cgroupx/a", nil, []string{"/sys/fs/cgroupx/a"}},
		{"/sys/fs/cgroup/unified/no-such.scope", nil, []string{"/unified/no-such.scope", "/no-such.scope"}},
		{"7,/a//b/./c,8", []uint64{7, 8}, []string{"/a/b/c"}},
	} {
		f, err := ParseFilter(func(n string) string {
			if n == "cgroup" {
				return tc.in
			}
			return ""
		})
		if err != nil {
			t.Errorf("cgroup=%q: %v", tc.in, err)
			continue
		}
		if !slices.Equal(f.Cgroups, tc.ids) || !slices.Equal(f.CgroupPaths, tc.paths) {
			t.Errorf("cgroup=%q: ids %v, paths %q; want %v, %q", tc.in, f.Cgroups, f.CgroupPaths, tc.ids, tc.paths)
		}
	}
}

// TestParseTimeWithoutZone checks that an RFC 3339 time without its zone
// is refused with the reason and the fix.
func TestParseTimeWithoutZone(t *testing.T) {
	for _, s := range []string{"2026-11-21T14:03:00", "2026-11-21T14:03:00.25", "2026-11-21 14:03:00"} {
		_, err := ParseTime("from", s, time.Now())
		if err == nil || !strings.Contains(err.Error(), "no time zone") || !strings.Contains(err.Error(), "add Z") {
			t.Errorf("ParseTime(%q): %v, want an error saying the zone is missing", s, err)
		}
	}
	if _, err := ParseTime("from", "2026-11-21T14:03:00Z", time.Now()); err != nil {
		t.Errorf("with Z: %v", err)
	}
}

// FuzzParseCgroupFilter parses any cgroup filter: an error naming the
// parameter, or ids and paths below a cgroup v2 mount, absolute and clean,
// none climbing out of it.
// Seeds: testdata/fuzz/FuzzParseCgroupFilter.
func FuzzParseCgroupFilter(f *testing.F) {
	for _, s := range []string{"1,2", "system.slice/a.service", "/sys/fs/cgroup/unified/x", "/sys/fs/cgroup", "a/../b", ",", "/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		fl, err := ParseFilter(func(n string) string {
			if n == "cgroup" {
				return v
			}
			return ""
		})
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Param != "cgroup" {
				t.Fatalf("cgroup=%q: %v, want an error naming cgroup", v, err)
			}
			return
		}
		if v != "" && len(fl.Cgroups)+len(fl.CgroupPaths) == 0 {
			t.Fatalf("cgroup=%q: no id and no path", v)
		}
		for _, p := range fl.CgroupPaths {
			if !strings.HasPrefix(p, "/") || filepath.Clean(p) != p || slices.Contains(strings.Split(p, "/"), "..") {
				t.Fatalf("cgroup=%q: path %q is not absolute and clean", v, p)
			}
		}
	})
}

// FuzzParseTime parses any time: an error naming the parameter, that
// echoes the value clipped, or a time from 1970 to MaxTime.
// Seeds: testdata/fuzz/FuzzParseTime.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"1795237387.42", "-5m", "2026-11-21T14:03:07.42Z", "2026-11-21T14:03Z", "2026-11-21 14:03", "10:04", "9999999999", "-5", "NaN"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 28, 10, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		ns, err := ParseTime("from", v, now)
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Param != "from" || len(err.Error()) > 400 {
				t.Fatalf("%q: %v, want a short error naming from", v, err)
			}
			return
		}
		if ns < 0 || ns > MaxTime {
			t.Fatalf("%q: %d, outside 0 to MaxTime", v, ns)
		}
	})
}

// TestParseFilterFrameTilde: frame is a regular expression, and a leading
// ~, written as for comm and node, marks it as one rather than being
// matched literally (`--frame '~^Model'` matched nothing).
func TestParseFilterFrameTilde(t *testing.T) {
	for _, v := range []string{"~^Model\\.", "^Model\\."} {
		f, err := ParseFilter(func(n string) string {
			if n == "frame" {
				return v
			}
			return ""
		})
		if err != nil {
			t.Fatalf("frame=%s: %v", v, err)
		}
		if !f.Frame.MatchString("Model.forward") || f.Frame.MatchString("Trainer.step") {
			t.Errorf("frame=%s: %v matches wrongly", v, f.Frame)
		}
	}
}
