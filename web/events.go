package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// System events: GET /api/events lists them, POST /api/events (the API's
// only write) adds one.
const (
	eventsPath = "/api/events"
	// maxEventBody bounds a POSTed event: the largest valid event is
	// about 16 KiB of JSON.
	maxEventBody = 64 << 10
	// postRate and postBurst bound POSTed events (all clients together):
	// marks from automation, not a log stream.
	postRate  = 10.0 // per second
	postBurst = 50
	// defaultEventSource names POSTed events that give none.
	defaultEventSource = "api"
	defaultEventsLimit = 1000
	maxEventsLimit     = 10_000
)

// eventJSON is an event as the API sends it.
type eventJSON struct {
	// Time is Unix seconds.
	Time     float64           `json:"time"`
	Source   string            `json:"source"`
	Severity string            `json:"severity"`
	Text     string            `json:"text"`
	Labels   map[string]string `json:"labels,omitempty"`
}

func toEventJSON(e *events.Event) eventJSON {
	return eventJSON{Time: seconds(e.Time), Source: e.Source, Severity: e.Severity.String(), Text: e.Text, Labels: e.Labels}
}

// eventsJSON is the answer of GET /api/events.
type eventsJSON struct {
	Events []eventJSON `json:"events"`
	// More is true when limit cut the list short.
	More bool `json:"more"`
	// Message says why the list is empty ("" when it is not).
	Message string `json:"message"`
}

// eventQuery holds the parameters both event lists (/api/events and
// /api/fleet/events) take besides the node filters.
type eventQuery struct {
	// r is from and to, by default all time; limit the most events.
	r     store.Range
	limit int
	// filter holds the event sources (source) and kinds (kind) named,
	// each a comma-separated list, by default all.
	filter store.EventFilter
}

// parseEventQuery parses from, to, limit, source and kind.
func parseEventQuery(p *params) (eventQuery, error) {
	var q eventQuery
	var err error
	if q.r, err = p.timeRange("from", "to", store.Range{From: 0, To: maxTime}, nil, true); err != nil {
		return q, err
	}
	if q.limit, err = p.int("limit", defaultEventsLimit, 1, maxEventsLimit); err != nil {
		return q, err
	}
	if q.filter.Sources, err = listParam(p, "source"); err != nil {
		return q, err
	}
	q.filter.Kinds, err = listParam(p, "kind")
	return q, err
}

// listEvents answers GET /api/events: the events in [from, to) (default:
// all), from the event sources named by source and of the kinds named by
// kind (comma-separated; default: all), recorded on the nodes node and
// label select (as the sample filters' node and label), in time order, at
// most limit.
func (s *Server) listEvents(_ context.Context, p *params, rep *reply) (store.Warnings, error) {
	q, err := parseEventQuery(p)
	if err != nil {
		return nil, err
	}
	r, f, limit := q.r, q.filter, q.limit
	if p.get("node") == "" && p.get("label") == "" {
		evs, more := s.db.Events(r, f, limit)
		msg := ""
		if len(evs) == 0 {
			all, more := s.db.Events(store.Range{From: 0, To: maxTime}, f, maxEventsLimit)
			msg = noEvents(p, r, len(all), more, all)
		}
		return nil, rep.encoded(listOfEvents(len(evs), more, msg, rep.limit, func(out []byte, i int) []byte {
			return append(appendEventFields(out, &evs[i]), '}')
		}))
	}
	nf, err := s.nodeFilter(p)
	if err != nil {
		return nil, err
	}
	evs := s.db.NodeEvents(r, f, &nf)
	msg := ""
	if len(evs) == 0 {
		all := s.db.NodeEvents(store.Range{From: 0, To: maxTime}, f, &nf)
		first := make([]events.Event, 0, 2)
		if len(all) > 0 {
			first = append(first, all[0].Event, all[len(all)-1].Event)
		}
		msg = noEvents(p, r, len(all), false, first)
	}
	return nil, rep.encoded(listOfEvents(min(len(evs), limit), len(evs) > limit, msg, rep.limit, func(out []byte, i int) []byte {
		return append(appendEventFields(out, &evs[i].Event), '}')
	}))
}

// noEvents says why no event in r passes the event and node filters: the
// data holds none that pass them at any time, or n at other times (more:
// at least n), from the first of some to the last.
func noEvents(p *params, r store.Range, n int, more bool, some []events.Event) string {
	var filters []string
	for _, name := range []string{"source", "kind", "node", "label"} {
		if v := p.get(name); v != "" {
			filters = append(filters, name+" "+strconv.Quote(query.Clip(v)))
		}
	}
	of := ""
	if len(filters) > 0 {
		of = " of " + strings.Join(filters, ", ")
	}
	switch {
	case n == 0 && of == "":
		return "No events: none recorded yet (kernel log markers, CPU saturation, events posted to /api/events)."
	case n == 0:
		return fmt.Sprintf("No events%s at any time.", of)
	}
	if more {
		return fmt.Sprintf("No events%s %s: the data holds more than %d, the first at %s.", of, query.Window(r, false), n,
			query.FormatTime(some[0].Time))
	}
	return fmt.Sprintf("No events%s %s: the data holds %d, from %s to %s.", of, query.Window(r, false), n,
		query.FormatTime(some[0].Time), query.FormatTime(some[len(some)-1].Time))
}

// postedEvent is the body of POST /api/events. Time is Unix seconds (a
// number or a string), RFC 3339, or a duration before now ("-5s"); it
// defaults to now.
type postedEvent struct {
	Time     json.RawMessage   `json:"time"`
	Source   string            `json:"source"`
	Severity string            `json:"severity"`
	Text     string            `json:"text"`
	Labels   map[string]string `json:"labels"`
}

// postEvent answers POST /api/events: 201 and the stored event; 400
// naming the field of a malformed event; 413 for a body over 64 KiB; 415
// unless the body is JSON; 429 past the rate limit; 405 on a read-only
// data directory or a bucket (heatscope serve).
func (s *Server) postEvent(w http.ResponseWriter, r *http.Request) {
	if s.events == nil {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "this server reads the data directory read-only: POST events to the recorder's server (heatscope record --listen)", "")
		return
	}
	// Browsers send a form or a "simple" fetch to any site without asking;
	// a JSON body, or a foreign Origin, they must ask for first (CORS),
	// which this server never allows.
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "send the event as Content-Type: application/json", "")
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		if u, err := url.Parse(origin); err != nil || !strings.EqualFold(u.Host, r.Host) {
			writeError(w, http.StatusForbidden, fmt.Sprintf("cross-origin POST from %q refused", query.Clip(origin)), "")
			return
		}
	}
	if !s.postLimit.allow(time.Now()) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("too many events: at most %g a second (bursts of %d)", postRate, postBurst), "")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxEventBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("event larger than %d bytes", maxEventBody), "")
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "read the event: "+err.Error(), "")
		return
	}
	e, err := parseEvent(body, time.Now())
	if err != nil {
		var fe *events.FieldError
		if errors.As(err, &fe) {
			writeError(w, http.StatusBadRequest, "event "+fe.Error(), fe.Field)
			return
		}
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	if err := s.events.AppendEvent(e); err != nil {
		s.log.Error("store a posted event", "err", err)
		writeError(w, http.StatusInternalServerError, "the event could not be stored", "")
		return
	}
	b, _ := json.Marshal(toEventJSON(&e))
	w.Header().Set("Content-Type", jsonType)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusCreated)
	w.Write(b)
}

// parseEvent decodes and validates a POSTed event. Errors about a field
// are *events.FieldError.
func parseEvent(body []byte, now time.Time) (events.Event, error) {
	var pe postedEvent
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pe); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return events.Event{}, &events.FieldError{Field: typeErr.Field, Err: fmt.Errorf("want a %s", typeErr.Type)}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
			return events.Event{}, &events.FieldError{Field: query.Clip(name), Err: errors.New("unknown field (want time, source, severity, text, labels)")}
		}
		return events.Event{}, fmt.Errorf("the body is not a JSON event: %w", err)
	}
	if dec.More() {
		return events.Event{}, errors.New("the body holds more than one JSON value")
	}
	e := events.Event{Source: pe.Source, Text: pe.Text, Labels: pe.Labels, Severity: events.Info, Time: now.UnixNano()}
	if e.Source == "" {
		e.Source = defaultEventSource
	}
	if e.Source == events.KmsgSourceName {
		return e, &events.FieldError{Field: "source", Err: fmt.Errorf("%q is kept for the kernel log", events.KmsgSourceName)}
	}
	if pe.Severity != "" {
		sev, err := events.ParseSeverity(pe.Severity)
		if err != nil {
			return e, &events.FieldError{Field: "severity", Err: err}
		}
		e.Severity = sev
	}
	if t, err := parseEventTime(pe.Time, now); err != nil {
		return e, &events.FieldError{Field: "time", Err: err}
	} else if t != 0 {
		e.Time = t
	}
	return e, e.Validate()
}

// parseEventTime parses a JSON number or string as the time parameters
// take them; 0 when absent or null.
func parseEventTime(raw json.RawMessage, now time.Time) (int64, error) {
	v := strings.TrimSpace(string(raw))
	if v == "" || v == "null" {
		return 0, nil
	}
	if strings.HasPrefix(v, `"`) {
		if err := json.Unmarshal(raw, &v); err != nil {
			return 0, err
		}
	} else if _, err := strconv.ParseFloat(v, 64); err != nil {
		return 0, fmt.Errorf("%s is not a time: want Unix seconds, RFC 3339 or a duration before now", query.Clip(v))
	}
	t, err := query.ParseTime("time", v, now)
	if err != nil {
		var pe *query.ParamError
		if errors.As(err, &pe) {
			return 0, pe.Err
		}
		return 0, err
	}
	if t == 0 { // 0 is "now": ParseTime takes 1970 to 2116
		return 0, fmt.Errorf("%q is out of range: want a time after 1970", query.Clip(v))
	}
	return t, nil
}

// tokenBucket is a rate limiter: rate tokens a second, at most burst.
type tokenBucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
	rate   float64
	burst  float64
}

func newTokenBucket(rate float64, burst int) *tokenBucket {
	return &tokenBucket{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// allow takes a token if there is one.
func (b *tokenBucket) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() {
		b.tokens = math.Min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
