package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// configFlagSet is a small "record" flag set for the config tests.
func configFlagSet() (*flag.FlagSet, *string, *int, *time.Duration, *string, *string) {
	fs := newFlagSet("record", "record", io.Discard)
	config := addConfigFlag(fs)
	freq := fs.Int("frequency", 99, "")
	dur := fs.Duration("duration", 0, "")
	pid := fs.String("pid", "", "")
	listen := fs.String("listen", "127.0.0.1:7070", "")
	return fs, config, freq, dur, pid, listen
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "heatscope.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigFile(t *testing.T) {
	path := writeConfig(t, "record:\n  frequency: 49\n  duration: 30s\n  pid: [12, 34]\n  listen: ''\nserve:\n  listen: 0.0.0.0:1\n  anything: ignored by record\n")
	fs, config, freq, dur, pid, listen := configFlagSet()
	if _, err := parseFlagsWithConfig(fs, config, []string{"--config", path, "--frequency", "199"}); err != nil {
		t.Fatal(err)
	}
	if *freq != 199 || *dur != 30*time.Second || *pid != "12,34" || *listen != "" {
		t.Errorf("frequency %d (want 199: the flag wins), duration %v, pid %q, listen %q", *freq, *dur, *pid, *listen)
	}
	// Without the flag, the file's value.
	fs, config, freq, _, _, _ = configFlagSet()
	if _, err := parseFlagsWithConfig(fs, config, []string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	if *freq != 49 {
		t.Errorf("frequency %d, want the file's 49", *freq)
	}
}

func TestConfigFileErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"record:\n  frequncy: 49\n", "line 2: unknown key record.frequncy"},
		{"recrod:\n  frequency: 49\n", `line 1: unknown key "recrod"`},
		{"record:\n  frequency: fast\n", `line 2: record.frequency "fast": parse error`},
		{"record:\n  frequency: 1\n  frequency: 2\n", "record.frequency given twice"},
		{"record:\n  frequency: {a: 1}\n", "record.frequency: want a value or a list"},
		{"record:\n  config: other.yaml\n", "cannot name another"},
		{"record: [1, 2]\n", "record: want a mapping"},
		{"- record\n", "want a mapping of commands"},
		{"record:\n  frequency: 1\n---\nrecord: {}\n", "more than one YAML document"},
		{"record: {frequency: [1\n", "not YAML"},
	} {
		path := writeConfig(t, c.text)
		fs, config, _, _, _, _ := configFlagSet()
		_, err := parseFlagsWithConfig(fs, config, []string{"--config", path})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%q: error %v, want one naming the file and saying %q", c.text, err, c.want)
		}
	}
	fs, config, freq, _, _, _ := configFlagSet()
	if _, err := parseFlagsWithConfig(fs, config, []string{"--config", writeConfig(t, "# nothing\n")}); err != nil || *freq != 99 {
		t.Errorf("an empty config: %v, frequency %d", err, *freq)
	}
	fs, config, _, _, _, _ = configFlagSet()
	if _, err := parseFlagsWithConfig(fs, config, []string{"--config", "/nonexistent/heatscope.yaml"}); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("a missing config file: %v", err)
	}
}

// TestConfigThroughServe gives serve a config with a bad key and checks
// the exit status and message.
func TestConfigThroughServe(t *testing.T) {
	path := writeConfig(t, "serve:\n  listen: 127.0.0.1:1\n  retention: 7d\n")
	var stderr bytes.Buffer
	if code := run([]string{"serve", "--config", path}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "unknown key serve.retention") {
		t.Errorf("exit %d, %s; want 2 and the unknown key named", code, stderr.String())
	}
}

// TestConfigValueErrorsNameTheFile: a value the file sets that is
// checked after the file is read (a retention, a size, a frequency, an
// address) is an error that names the file and the line that set it, as
// a value the flag itself refuses is; the same value given as a flag is
// not attributed to the file.
func TestConfigValueErrorsNameTheFile(t *testing.T) {
	for _, c := range []struct {
		command, text, want string
	}{
		{"record", "record:\n  frequency: 99\n  retention: 7x\n", `--retention: "7x" is not a duration like 7d or 36h (set by --config %s, line 3: record.retention)`},
		{"record", "record:\n  frequency: 0\n", `--frequency 0: want 1 to `},
		{"record", "record:\n  node-label: [zone]\n", `line 2: record.node-label)`},
		{"serve", "serve:\n  memory-limit: lots\n", `--memory-limit: "lots" is not a size like 10GB or 512MiB (set by --config %s, line 2: serve.memory-limit)`},
		{"serve", "serve:\n  overview-warm-columns: -1\n", `line 2: serve.overview-warm-columns)`},
	} {
		path := writeConfig(t, c.text)
		want := c.want
		if strings.Contains(want, "%s") {
			want = fmt.Sprintf(want, path)
		}
		var stderr bytes.Buffer
		if code := run([]string{c.command, "--config", path}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), want) ||
			!strings.Contains(stderr.String(), path) {
			t.Errorf("%s %q: exit %d, %s; want 2, the file and its line named: %s", c.command, c.text, code, stderr.String(), want)
		}
	}
	// The same bad value as a flag, beside a config file: the flag's error alone.
	path := writeConfig(t, "record:\n  frequency: 99\n")
	var stderr bytes.Buffer
	if code := run([]string{"record", "--config", path, "--retention", "7x"}, io.Discard, &stderr); code != 2 || strings.Contains(stderr.String(), path) {
		t.Errorf("--retention 7x given as a flag: exit %d, %s; want 2 and the file not named", code, stderr.String())
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		"record:\n  frequency: 99\n  pid: [1, 2]\nserve:\n  listen: 127.0.0.1:7070\n",
		"record: {max-cpu: 0.5}\n", "", "- a\n", "record: &a {x: *a}\n", "record:\n  k: !!binary aGk=\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		values, err := parseConfig(b, "record")
		if err != nil {
			return
		}
		for _, v := range values {
			if v.name == "" && v.line == 0 {
				t.Errorf("value without a name or line: %+v", v)
			}
		}
	})
}

// TestConfigEventPatterns gives the kernel log patterns as a YAML list:
// each item is one pattern, commas and all, and an invalid one is an
// error naming it.
func TestConfigEventPatterns(t *testing.T) {
	fs := newFlagSet("record", "record", io.Discard)
	config := addConfigFlag(fs)
	ef := addEventFlags(fs)
	path := writeConfig(t, "record:\n  event-pattern:\n    - 'retries=retry {2,5} times'\n    - 'nvme timeout'\n  default-event-patterns: false\n")
	if _, err := parseFlagsWithConfig(fs, config, []string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	patterns, err := ef.compile()
	if err != nil {
		t.Fatal(err)
	}
	if len(patterns) != 2 || patterns[0].Name != "retries" || !patterns[0].Re.MatchString("retry   times") ||
		!patterns[1].Re.MatchString("nvme timeout on queue 3") {
		t.Fatalf("patterns from the config: %+v, want the two listed", patterns)
	}

	fs = newFlagSet("record", "record", io.Discard)
	config = addConfigFlag(fs)
	ef = addEventFlags(fs)
	path = writeConfig(t, "record:\n  event-pattern: ['bad=(unclosed']\n")
	if _, err := parseFlagsWithConfig(fs, config, []string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	if _, err := ef.compile(); err == nil || !strings.Contains(err.Error(), "(unclosed") {
		t.Errorf("an invalid pattern from the config: %v, want an error naming it", err)
	}
}
