package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/heatscope/heatscope/events"
)

// stringList is a flag that may be given more than once.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ", ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// eventFlags are record's flags for kernel log events.
type eventFlags struct {
	kmsg        *string
	patterns    *stringList
	patternFile *string
	defaults    *bool
}

func addEventFlags(fs *flag.FlagSet) eventFlags {
	ef := eventFlags{patterns: &stringList{}}
	ef.kmsg = fs.String("kmsg", events.KmsgPath, "kernel log to read events from ('' for none)")
	fs.Var(ef.patterns, "event-pattern", "keep kernel log lines matching this regular expression as events, as NAME=REGEXP or REGEXP (repeatable)")
	ef.patternFile = fs.String("event-pattern-file", "", "file of more --event-pattern values, one per line (# comments)")
	ef.defaults = fs.Bool("default-event-patterns", true, "also keep the built-in patterns: network device resets and timeouts, OOM kills, lockups, hung tasks, RCU stalls, segfaults")
	return ef
}

// patterns compiles the configured patterns; an invalid one is a usage
// error that quotes it.
func (ef eventFlags) compile() ([]events.Pattern, error) {
	var ps []events.Pattern
	if *ef.defaults {
		ps = events.DefaultPatterns()
	}
	for i, spec := range *ef.patterns {
		p, err := events.ParsePattern(spec, i+1)
		if err != nil {
			return nil, usageError{fmt.Errorf("--event-pattern: %w", err)}
		}
		ps = append(ps, p)
	}
	if *ef.patternFile != "" {
		more, err := events.ReadPatternFile(*ef.patternFile, len(*ef.patterns))
		if err != nil {
			return nil, usageError{fmt.Errorf("--event-pattern-file: %w", err)}
		}
		ps = append(ps, more...)
	}
	return ps, nil
}

// printEventSummary says what the kernel log gave, or why it gave nothing.
func printEventSummary(st events.KmsgStatus, w io.Writer) {
	if st.Records == 0 && st.Reason != "" && st.Reason != "stopped" {
		fmt.Fprintf(w, "kernel log events: off (%s)\n", st.Reason)
		return
	}
	fmt.Fprintf(w, "kernel log events: %d of %d records kept, %d missed\n", st.Matched, st.Records, st.Missed)
}
