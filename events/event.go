// Package events holds heatscope's system events: marks on the time axis
// (a network device reset in the kernel log, a deploy posted by
// automation) that users line up with the CPU samples around them.
//
// An Event is a wall-clock time, a source, a severity, a text and labels.
// The kernel log source (KmsgSource) reads /dev/kmsg, converts each
// record's monotonic timestamp to wall time and keeps the records whose
// text matches one of a list of Patterns; DefaultPatterns covers network
// device resets and timeouts, OOM kills, lockups, hung tasks, RCU stalls
// and segfaults. The store keeps events beside the samples (store.DB's
// AppendEvent and Events), and the HTTP API adds POST /api/events.
//
// Every field of an event may come from outside (a kernel message quoting
// a process name, an HTTP client): Validate bounds them, and the UI shows
// them as text only.
package events

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Event is one system event.
type Event struct {
	// Time is when it happened, Unix nanoseconds.
	Time int64
	// Source says where it came from: "kmsg" for the kernel log, a name
	// chosen by the poster for POST /api/events ("api" by default).
	Source string
	// Severity is one of the syslog levels.
	Severity Severity
	// Text is the message, one line.
	Text string
	// Labels are extra key-value pairs (for kernel messages: the pattern
	// that matched, the kmsg sequence number, the device).
	Labels map[string]string
}

// Severity is a syslog level; the zero value is Emerg, as in syslog.
type Severity uint8

// The syslog levels, most severe first (the kernel log's numbering).
const (
	Emerg Severity = iota
	Alert
	Crit
	Err
	Warning
	Notice
	Info
	Debug
)

var severityNames = [...]string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"}

// String returns the level's syslog name ("err", "warning", ...).
func (s Severity) String() string {
	if int(s) < len(severityNames) {
		return severityNames[s]
	}
	return fmt.Sprintf("severity(%d)", uint8(s))
}

// ParseSeverity parses a syslog level name; "error" and "critical" are
// accepted for "err" and "crit".
func ParseSeverity(name string) (Severity, error) {
	switch strings.ToLower(name) {
	case "error":
		return Err, nil
	case "critical":
		return Crit, nil
	case "warn":
		return Warning, nil
	}
	for i, n := range severityNames {
		if strings.EqualFold(name, n) {
			return Severity(i), nil
		}
	}
	return 0, fmt.Errorf("%q is not a severity: want one of %s", clip(name), strings.Join(severityNames[:], ", "))
}

// Limits on an event's fields.
const (
	MaxSourceLen   = 64
	MaxTextLen     = 4096
	MaxLabels      = 32
	MaxLabelKeyLen = 64
	MaxLabelValLen = 256
)

// FieldError is an invalid field of an event.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]+$`)

// Validate checks an event's fields: a time after 1970, a source of 1 to
// 64 letters, digits and _.:/-, a known severity, a text of 1 to 4096
// bytes of UTF-8 without control characters other than tab, and at most
// 32 labels whose keys are names as sources are and whose values are at
// most 256 bytes of such text. The error is a *FieldError naming the
// field.
func (e *Event) Validate() error {
	if e.Time <= 0 {
		return fieldErr("time", "must be after 1970")
	}
	if e.Source == "" || len(e.Source) > MaxSourceLen || !nameRE.MatchString(e.Source) {
		return fieldErr("source", "%q: want 1 to %d letters, digits or _.:/-", clip(e.Source), MaxSourceLen)
	}
	if e.Severity > Debug {
		return fieldErr("severity", "%d is not a syslog level (0 to 7)", e.Severity)
	}
	if err := checkText(e.Text, MaxTextLen); err != nil {
		return &FieldError{Field: "text", Err: err}
	}
	if len(e.Labels) > MaxLabels {
		return fieldErr("labels", "%d labels, at most %d", len(e.Labels), MaxLabels)
	}
	for k, v := range e.Labels {
		if len(k) > MaxLabelKeyLen || !nameRE.MatchString(k) {
			return fieldErr("labels", "key %q: want 1 to %d letters, digits or _.:/-", clip(k), MaxLabelKeyLen)
		}
		if v == "" {
			continue
		}
		if err := checkText(v, MaxLabelValLen); err != nil {
			return fieldErr("labels", "value of %q: %v", k, err)
		}
	}
	return nil
}

func checkText(s string, maxLen int) error {
	switch {
	case s == "":
		return fmt.Errorf("empty")
	case len(s) > maxLen:
		return fmt.Errorf("%d bytes, at most %d", len(s), maxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("not valid UTF-8")
	}
	for _, r := range s {
		if r < ' ' && r != '\t' || r == 0x7f {
			return fmt.Errorf("control character %U", r)
		}
	}
	return nil
}

// clip shortens a value echoed in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// KindLabel is the label that names an event's kind when its source sets
// one ("cpu-saturation", "overhead-guard").
const KindLabel = "kind"

// KindOverheadGuard is the kind of the overhead guard's events: an
// episode of changes of the sampling rate (package overhead).
const KindOverheadGuard = "overhead-guard"

// Incident reports whether events of kind mark something that happened
// on a node (a kernel message, a saturated CPU, a deploy someone posted)
// rather than heatscope's own bookkeeping (KindOverheadGuard: the agent
// lowering its own sampling rate). Views list every kind; only incidents
// are picked as the kind to compare before by default.
func Incident(kind string) bool { return kind != KindOverheadGuard }

// Kind is what sort of event e is: its kind label, or for a kernel log
// event the name of the pattern that matched ("ena-reset"); "" when it has
// neither.
func (e *Event) Kind() string {
	if k := e.Labels[KindLabel]; k != "" {
		return k
	}
	if e.Source == KmsgSourceName {
		return e.Labels["pattern"]
	}
	return ""
}
