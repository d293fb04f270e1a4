package overhead

import (
	"fmt"
	"strconv"
	"time"

	"github.com/heatscope/heatscope/events"
)

// DefaultMaxEpisode bounds an episode's length (Config.MaxEpisode).
const DefaultMaxEpisode = 10 * time.Minute

// EventSource is the source of the episodes' events: the recorder's own
// events, as the cpu-saturation events.
const EventSource = "heatscope"

// Episode is one run of the Guard's frequency changes: from the first
// change away from the target frequency until the rate is back at it
// (Restored), or until it has lasted Config.MaxEpisode (it goes on as a
// new episode, Continued), or until the Guard stops. On a busy machine
// the Guard changes the rate every few windows (24 changes in 8 minutes
// were seen); one event per change swamped the event list and the
// timeline's marks, so an episode is one event.
type Episode struct {
	// Start is the first change's time (for a continued episode, the
	// previous piece's end), End the last change's, or when the episode
	// was cut or the Guard stopped.
	Start, End time.Time
	// FromHz is the frequency before the episode, ToHz the one after its
	// last change, LowestHz the lowest it held.
	FromHz, ToHz, LowestHz int
	// Changes counts the changes in the episode (0 for a continued piece
	// in which the rate held).
	Changes int
	// Reason is why the episode's first change was made ("" for a
	// continued piece without change).
	Reason string
	// Restored is true when the episode ended with the rate back at the
	// target, Stopped when the Guard stopped during it.
	Restored, Stopped bool
	// Continued is true for a piece after the first of an episode that
	// outlasted Config.MaxEpisode.
	Continued bool
}

// Event is the episode as a system event of kind
// events.KindOverheadGuard, at its start: its text says the rates, the
// number of changes, the lowest rate and the duration, and its labels
// hold them (from_hz, to_hz, lowest_hz, changes, duration_seconds,
// continued). A warning when the rate went below where it started.
func (e Episode) Event() events.Event {
	sev := events.Notice
	if e.LowestHz < e.FromHz {
		sev = events.Warning
	}
	dur := e.End.Sub(e.Start)
	labels := map[string]string{
		events.KindLabel:   events.KindOverheadGuard,
		"from_hz":          strconv.Itoa(e.FromHz),
		"to_hz":            strconv.Itoa(e.ToHz),
		"lowest_hz":        strconv.Itoa(e.LowestHz),
		"changes":          strconv.Itoa(e.Changes),
		"duration_seconds": strconv.FormatFloat(dur.Seconds(), 'f', 3, 64),
	}
	changes := "1 change"
	if e.Changes != 1 {
		changes = fmt.Sprintf("%d changes", e.Changes)
	}
	text := fmt.Sprintf("sampling frequency %d Hz -> %d Hz: %s in %v, lowest %d Hz", e.FromHz, e.ToHz, changes,
		dur.Round(time.Second), e.LowestHz)
	switch {
	case e.Restored:
		text += ", back at the target"
	case e.Stopped:
		text += ", until the recording stopped"
	default:
		text += ", still lowered (continued in the next event)"
	}
	if e.Reason != "" {
		text += "; first change: " + e.Reason
	}
	if e.Continued {
		labels["continued"] = "true"
		text += " (continued)"
	}
	return events.Event{Time: e.Start.UnixNano(), Source: EventSource, Severity: sev, Text: text, Labels: labels}
}

// noteChange adds a change of frequency made at now to the open episode,
// opening one if none is, and reports the episode when the change brought
// the rate back to the target.
func (g *Guard) noteChange(now time.Time, from, to int, reason string) {
	ep := g.episode
	if ep == nil {
		ep = &Episode{Start: now, FromHz: from, LowestHz: from, Reason: reason}
		g.episode = ep
	}
	ep.Changes++
	ep.ToHz, ep.End = to, now
	ep.LowestHz = min(ep.LowestHz, to)
	if to >= g.cfg.TargetFrequency {
		ep.Restored = true
		g.report()
	}
}

// cutEpisode reports the open episode when it has lasted MaxEpisode at
// now, and opens its continuation at the rate it left.
func (g *Guard) cutEpisode(now time.Time) {
	ep := g.episode
	if ep == nil || now.Sub(ep.Start) < g.cfg.MaxEpisode {
		return
	}
	ep.End = now
	hz := ep.ToHz
	g.report()
	g.episode = &Episode{Start: now, End: now, FromHz: hz, ToHz: hz, LowestHz: hz, Continued: true}
}

// stopEpisode reports the open episode, if any, as ending at now, when
// the Guard stops.
func (g *Guard) stopEpisode(now time.Time) {
	if g.episode != nil {
		g.episode.End, g.episode.Stopped = now, true
		g.report()
	}
}

// report hands the open episode to OnEpisode and closes it.
func (g *Guard) report() {
	ep := g.episode
	g.episode = nil
	if g.cfg.OnEpisode != nil {
		g.cfg.OnEpisode(*ep)
	}
}
