package web

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/heatscope/heatscope/events"
)

// Event lists are encoded by hand, byte for byte as encoding/json encodes
// eventsJSON and fleetEventsJSON (TestEventListEncoding): a fleet's list
// of 10,000 events is what /api/events and /api/fleet/events spend their
// time on, and reflection over each event's fields and labels map cost
// several times the copying this does.

// appendEventFields appends the fields of toEventJSON(e), from the
// opening brace to the last field, without the closing brace.
func appendEventFields(out []byte, e *events.Event) []byte {
	out = append(out, `{"time":`...)
	out = appendFloat(out, seconds(e.Time))
	out = append(out, `,"source":`...)
	out = appendString(out, e.Source)
	out = append(out, `,"severity":`...)
	out = appendString(out, e.Severity.String())
	out = append(out, `,"text":`...)
	out = appendString(out, e.Text)
	if len(e.Labels) > 0 {
		// Sorted by key as encoding/json sorts a map, pairs on the stack
		// for the usual few labels.
		var buf [8][2]string
		pairs := buf[:0]
		for k, v := range e.Labels {
			pairs = append(pairs, [2]string{k, v})
		}
		for i := 1; i < len(pairs); i++ { // insertion sort: a handful
			for j := i; j > 0 && pairs[j][0] < pairs[j-1][0]; j-- {
				pairs[j], pairs[j-1] = pairs[j-1], pairs[j]
			}
		}
		out = append(out, `,"labels":{`...)
		for i, p := range pairs {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(appendString(out, p[0]), ':')
			out = appendString(out, p[1])
		}
		out = append(out, '}')
	}
	return out
}

// eventList begins an answer listing events: n of them, each appended by
// encode, then more, leaving the object open for other fields. It stops
// with errTooLarge once the body passes limit.
func eventList(n int, more bool, limit int, encode func(out []byte, i int) []byte) ([]byte, error) {
	out := append(make([]byte, 0, min(160*n+32, limit+1)), `{"events":[`...)
	for i := range n {
		if i > 0 {
			out = append(out, ',')
		}
		out = encode(out, i)
		if len(out) > limit {
			return nil, errTooLarge
		}
	}
	return strconv.AppendBool(append(out, `],"more":`...), more), nil
}

// listOfEvents is the answer of /api/events (eventsJSON): n events, each
// appended by encode, more and the message.
func listOfEvents(n int, more bool, message string, limit int, encode func(out []byte, i int) []byte) ([]byte, error) {
	out, err := eventList(n, more, limit, encode)
	if err != nil {
		return nil, err
	}
	return closeEventList(out, eventsMessage{message})
}

// eventsMessage is the field of /api/events' answer after the list.
type eventsMessage struct {
	Message string `json:"message"`
}

// closeEventList ends a list begun by eventList with the other fields of
// its answer: rest, encoded by encoding/json as an object, follows the
// events.
func closeEventList(out []byte, rest any) ([]byte, error) {
	b, err := json.Marshal(rest)
	if err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	if len(b) > 2 { // not {}
		out = append(append(out, ','), b[1:len(b)-1]...)
	}
	return append(out, '}'), nil
}
