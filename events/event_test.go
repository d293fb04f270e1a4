package events

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	good := func() Event {
		return Event{Time: 1795237387e9, Source: "deploy-bot", Severity: Notice, Text: "deploy api v42",
			Labels: map[string]string{"service": "api", "version": "v42"}}
	}
	if e := good(); e.Validate() != nil {
		t.Fatalf("valid event refused: %v", e.Validate())
	}
	tooManyLabels := map[string]string{}
	for i := range MaxLabels + 1 {
		tooManyLabels[strings.Repeat("k", i+1)] = "v"
	}
	for _, tc := range []struct {
		field  string
		change func(*Event)
	}{
		{"time", func(e *Event) { e.Time = 0 }},
		{"time", func(e *Event) { e.Time = -5 }},
		{"source", func(e *Event) { e.Source = "" }},
		{"source", func(e *Event) { e.Source = "has space" }},
		{"source", func(e *Event) { e.Source = strings.Repeat("s", MaxSourceLen+1) }},
		{"severity", func(e *Event) { e.Severity = 8 }},
		{"text", func(e *Event) { e.Text = "" }},
		{"text", func(e *Event) { e.Text = strings.Repeat("x", MaxTextLen+1) }},
		{"text", func(e *Event) { e.Text = "two\nlines" }},
		{"text", func(e *Event) { e.Text = "bad \xff utf-8" }},
		{"labels", func(e *Event) { e.Labels = tooManyLabels }},
		{"labels", func(e *Event) { e.Labels = map[string]string{"": "v"} }},
		{"labels", func(e *Event) { e.Labels = map[string]string{"k": strings.Repeat("v", MaxLabelValLen+1)} }},
		{"labels", func(e *Event) { e.Labels = map[string]string{"k": "a\x00b"} }},
	} {
		e := good()
		tc.change(&e)
		err := e.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: error %v, want one naming %s", e.Source, err, tc.field)
		}
	}
}

func TestSeverity(t *testing.T) {
	for name, want := range map[string]Severity{"emerg": Emerg, "ERR": Err, "error": Err, "critical": Crit,
		"warning": Warning, "warn": Warning, "info": Info, "debug": Debug} {
		got, err := ParseSeverity(name)
		if err != nil || got != want {
			t.Errorf("ParseSeverity(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := ParseSeverity("loud"); err == nil || !strings.Contains(err.Error(), "loud") {
		t.Errorf("ParseSeverity(loud): %v", err)
	}
	if Warning.String() != "warning" || Severity(9).String() != "severity(9)" {
		t.Errorf("names: %s %s", Warning, Severity(9))
	}
}

func TestKind(t *testing.T) {
	for _, c := range []struct {
		e    Event
		want string
	}{
		{Event{Source: "heatscope", Labels: map[string]string{"kind": "cpu-saturation"}}, "cpu-saturation"},
		{Event{Source: KmsgSourceName, Labels: map[string]string{"pattern": "ena-reset"}}, "ena-reset"},
		{Event{Source: KmsgSourceName, Labels: map[string]string{"pattern": "ena-reset", "kind": "k"}}, "k"},
		{Event{Source: "deploy", Labels: map[string]string{"pattern": "x"}}, ""},
		{Event{Source: "deploy"}, ""},
	} {
		if got := c.e.Kind(); got != c.want {
			t.Errorf("%+v: kind %q, want %q", c.e, got, c.want)
		}
	}
}
