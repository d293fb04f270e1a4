package events

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Pattern is a named regular expression (RE2) on kernel log text.
type Pattern struct {
	Name string
	Re   *regexp.Regexp
}

// defaultPatterns are the kernel messages worth a marker by default: a
// network device resetting or timing out (the ENA driver's resets first),
// OOM kills, soft and hard lockups, hung tasks, RCU stalls and segfaults.
var defaultPatterns = []struct{ name, re string }{
	{"ena-reset", `(?i)\bena\b.*\b(device|trigger) reset\b`},
	{"netdev-watchdog", `NETDEV WATCHDOG`},
	{"tx-timeout", `transmit queue .* timed out`},
	{"link-down", `(?i)\blink (is )?down\b`},
	{"oom-kill", `(?i)out of memory|oom-kill|invoked oom-killer`},
	{"soft-lockup", `(?i)soft lockup`},
	{"hard-lockup", `(?i)hard lockup`},
	{"hung-task", `blocked for more than \d+ seconds`},
	{"rcu-stall", `(?i)\brcu\b.*detected (expedited )?stalls?\b`},
	{"segfault", `\bsegfault at\b`},
}

// DefaultPatterns returns the built-in patterns.
func DefaultPatterns() []Pattern {
	ps := make([]Pattern, len(defaultPatterns))
	for i, p := range defaultPatterns {
		ps[i] = Pattern{Name: p.name, Re: regexp.MustCompile(p.re)}
	}
	return ps
}

// ParsePattern parses "NAME=REGEXP", or a bare REGEXP (named "custom-N",
// N its position among the configured patterns, from 1). A name is
// letters, digits and -_. The error quotes the pattern.
func ParsePattern(spec string, n int) (Pattern, error) {
	name, re := fmt.Sprintf("custom-%d", n), spec
	if i := strings.IndexByte(spec, '='); i > 0 && patternNameRE.MatchString(spec[:i]) {
		name, re = spec[:i], spec[i+1:]
	}
	if re == "" {
		return Pattern{}, fmt.Errorf("event pattern %q: empty regular expression", clip(spec))
	}
	compiled, err := regexp.Compile(re)
	if err != nil {
		return Pattern{}, fmt.Errorf("event pattern %q: %w", clip(spec), err)
	}
	return Pattern{Name: name, Re: compiled}, nil
}

var patternNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ReadPatternFile reads patterns, one per line as ParsePattern takes
// them; blank lines and lines starting with # are skipped. first is the
// number of patterns configured before the file's (for "custom-N" names).
// The error names the file and line.
func ReadPatternFile(path string, first int) ([]Pattern, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("event pattern file: %w", err)
	}
	defer f.Close()
	var ps []Pattern
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		p, err := ParsePattern(text, first+len(ps)+1)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		ps = append(ps, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("event pattern file %s: %w", path, err)
	}
	return ps, nil
}

// Match returns the first pattern that matches text, or nil.
func Match(ps []Pattern, text string) *Pattern {
	for i := range ps {
		if ps[i].Re.MatchString(text) {
			return &ps[i]
		}
	}
	return nil
}
