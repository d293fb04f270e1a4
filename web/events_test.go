package web

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/apitest"
	"github.com/heatscope/heatscope/store"
)

func (fx *fixture) post(t testing.TB, target, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, fx.url+target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestPostAndListEvents(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	before := time.Now()
	for _, body := range []string{
		`{"time": 1795237390.25, "source": "deploy", "severity": "notice", "text": "deploy api v42", "labels": {"service": "api"}}`,
		`{"time": "2026-11-21T05:03:20Z", "text": "maintenance starts"}`,
		`{"text": "now", "severity": "error"}`,
	} {
		resp, b := fx.post(t, "/api/events", body)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", body, resp.StatusCode, b)
		}
	}
	var all eventsJSON
	apitest.GetJSON(t, fx.url+"/api/events", &all)
	if len(all.Events) != 3 || all.More {
		t.Fatalf("GET /api/events: %+v", all)
	}
	e0, e1, e2 := all.Events[0], all.Events[1], all.Events[2]
	if math.Abs(e0.Time-1795237390.25) > 1e-6 || e0.Source != "deploy" || e0.Severity != "notice" || e0.Labels["service"] != "api" ||
		e1.Time != 1795237400 || e1.Source != "api" || e1.Severity != "info" ||
		e2.Text != "now" || e2.Severity != "err" || e2.Time < float64(before.UnixNano())/1e9-0.001 || e2.Time > float64(time.Now().UnixNano())/1e9 {
		t.Fatalf("events %+v", all.Events)
	}
	var some eventsJSON
	apitest.GetJSON(t, fx.url+"/api/events?from=1795237390&to=1795237401&source=api,other", &some)
	if len(some.Events) != 1 || some.Events[0].Text != "maintenance starts" {
		t.Fatalf("range and source: %+v", some)
	}
	apitest.GetJSON(t, fx.url+"/api/events?kind=rollout,other", &some)
	if len(some.Events) != 0 {
		t.Fatalf("kind with no event: %+v", some)
	}
	fx.post(t, "/api/events", `{"time": 1795237395, "source": "ci", "text": "rollout", "labels": {"kind": "rollout"}}`)
	apitest.GetJSON(t, fx.url+"/api/events?kind=rollout,other", &some)
	if len(some.Events) != 1 || some.Events[0].Text != "rollout" {
		t.Fatalf("kind: %+v", some)
	}
	apitest.GetJSON(t, fx.url+"/api/events?kind=rollout&source=api", &some)
	if len(some.Events) != 0 {
		t.Fatalf("kind and another source: %+v", some)
	}
	apitest.GetJSON(t, fx.url+"/api/events?limit=2", &some)
	if len(some.Events) != 2 || !some.More {
		t.Fatalf("limit: %+v", some)
	}
	// Both event lists parse these alike (parseEventQuery).
	for _, path := range []string{"/api/events", "/api/fleet/events"} {
		for query, param := range map[string]string{"from=yesterday": "from", "from=10&to=5": "to", "limit=0": "limit", "comm=x": "comm", "limit=100001": "limit",
			"kind=" + strings.Repeat("a,", 1024) + "a": "kind", "source=" + strings.Repeat("a,", 1024) + "a": "source"} {
			resp, b := fx.get(t, path+"?"+query)
			var e errorBody
			json.Unmarshal(b, &e)
			if resp.StatusCode != http.StatusBadRequest || e.Param != param {
				t.Errorf("GET %s?%s: %d %s, want 400 naming %s", path, query, resp.StatusCode, b, param)
			}
		}
	}
}

func TestPostEventBadInput(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	for _, tc := range []struct {
		body, param string
		status      int
	}{
		{`{"text": "x", "colour": "red"}`, "colour", 400},
		{`{"text": 5}`, "text", 400},
		{`{"text": ""}`, "text", 400},
		{`{"text": "a\nb"}`, "text", 400},
		{`{"text": "x", "time": "soon"}`, "time", 400},
		{`{"text": "x", "time": true}`, "time", 400},
		{`{"text": "x", "time": -5}`, "time", 400},
		{`{"text": "x", "severity": "loud"}`, "severity", 400},
		{`{"text": "x", "source": "kmsg"}`, "source", 400},
		{`{"text": "x", "source": "has space"}`, "source", 400},
		{`{"text": "x", "labels": {"k": 1}}`, "labels", 400},
		{`{"text": "x", "labels": {"bad key": "v"}}`, "labels", 400},
		{`{"text": "x"`, "", 400},
		{`{"text": "x"} {"text": "y"}`, "", 400},
		{`[]`, "", 400},
		{`{"text": "` + strings.Repeat("x", 70<<10) + `"}`, "", 413},
	} {
		resp, b := fx.post(t, "/api/events", tc.body)
		var e errorBody
		json.Unmarshal(b, &e)
		if resp.StatusCode != tc.status || e.Param != tc.param || e.Error == "" {
			t.Errorf("POST %.60s: %d %s, want %d naming %q", tc.body, resp.StatusCode, b, tc.status, tc.param)
		}
	}
	resp, b := fx.post(t, "/api/events", `{"text": "x"}`, "Content-Type", "text/plain")
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d %s", resp.StatusCode, b)
	}
	resp, b = fx.post(t, "/api/events", `{"text": "x"}`, "Origin", "http://evil.example")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin: %d %s", resp.StatusCode, b)
	}
	if resp, _ := fx.do(t, http.MethodPut, "/api/events"); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD, POST" {
		t.Errorf("PUT: %d %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if resp, _ := fx.post(t, "/api/heatmap", `{}`); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /api/heatmap: %d", resp.StatusCode)
	}
	if evs, _ := fx.db.Events(store.Range{From: 0, To: maxTime}, store.EventFilter{}, 0); len(evs) != 0 {
		t.Errorf("bad input stored %+v", evs)
	}
}

func TestPostEventAuthAndRate(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{AuthToken: "s3cret"})
	if resp, _ := fx.post(t, "/api/events", `{"text": "x"}`); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", resp.StatusCode)
	}
	created, limited := 0, 0
	for i := range postBurst + 10 {
		resp, b := fx.post(t, "/api/events", fmt.Sprintf(`{"text": "mark %d"}`, i), "Authorization", "Bearer s3cret")
		switch resp.StatusCode {
		case http.StatusCreated:
			created++
		case http.StatusTooManyRequests:
			limited++
			if resp.Header.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
		default:
			t.Fatalf("POST %d: %d %s", i, resp.StatusCode, b)
		}
	}
	// The burst, plus what the rate refilled while the loop ran.
	if created < postBurst || created > postBurst+5 || limited == 0 {
		t.Fatalf("%d created, %d refused (burst %d)", created, limited, postBurst)
	}
	if evs, _ := fx.db.Events(store.Range{From: 0, To: maxTime}, store.EventFilter{}, 0); len(evs) != created {
		t.Fatalf("%d events stored, %d created", len(evs), created)
	}
}

func TestPostEventReadOnly(t *testing.T) {
	dir := t.TempDir()
	w, err := store.Open(dir, store.Options{Source: "host", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	ro, err := store.Open(dir, store.Options{ReadOnly: true, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	fx := newFixture(t, ro, Options{})
	if resp, b := fx.post(t, "/api/events", `{"text": "x"}`); resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(string(b), "read-only") {
		t.Fatalf("POST to a read-only server: %d %s", resp.StatusCode, b)
	}
}

// growthAnswer is /api/top's answer with a baseline.
type growthAnswer struct {
	Samples   int64       `json:"samples"`
	Samples2  int64       `json:"samples2"`
	CPU       float64     `json:"cpu"`
	CPU2      float64     `json:"cpu2"`
	Unit      string      `json:"unit"`
	Functions []growthRow `json:"functions"`
}

type growthRow struct {
	Name          string  `json:"name"`
	Kind          string  `json:"kind"`
	Via           string  `json:"via"`
	Total         int64   `json:"total"`
	Total2        int64   `json:"total2"`
	TotalCPU      float64 `json:"totalCpu"`
	TotalCPU2     float64 `json:"totalCpu2"`
	DeltaTotalCPU float64 `json:"deltaTotalCpu"`
	DeltaSelfCPU  float64 `json:"deltaSelfCpu"`
	DeltaViaCPU   float64 `json:"deltaViaCpu"`
}

// TestTopGrowth: /api/top with a baseline ranks what grew.
func TestTopGrowth(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	var g growthAnswer
	// The capture's second half against its first: same work, same length.
	apitest.GetJSON(t, fmt.Sprintf("%s/api/top?source=capture&from=%d.5&to=%d&from2=%d&to2=%d.5", fx.url, base+71, base+73, base+70, base+71), &g)
	if g.Samples == 0 || g.Samples2 == 0 || g.CPU <= 0 || g.CPU2 <= 0 || g.Unit != "cpu-seconds" || len(g.Functions) == 0 {
		t.Fatalf("growth %+v", g)
	}
	for i, f := range g.Functions {
		// Equal lengths: the growth is A's CPU time minus B's.
		if math.Abs(f.DeltaTotalCPU-(f.TotalCPU-f.TotalCPU2)) > 1e-9 || f.Total > 0 && f.TotalCPU <= 0 {
			t.Errorf("%s: delta %v s, total %v s (%d samples), baseline %v s", f.Name, f.DeltaTotalCPU, f.TotalCPU, f.Total, f.TotalCPU2)
		}
		if i > 0 && f.DeltaTotalCPU > g.Functions[i-1].DeltaTotalCPU {
			t.Errorf("not sorted by growth at %d", i)
		}
	}
	for query, param := range map[string]string{"from2=x&to2=5": "from2", "from2=5": "to2", "to2=5": "from2", "from2=6&to2=5": "to2",
		"from2=4&to2=5&order=name": "order", "order=self": "order"} {
		resp, b := fx.get(t, fmt.Sprintf("/api/top?source=capture&from=%d&to=%d&%s", base+70, base+71, query))
		var e errorBody
		json.Unmarshal(b, &e)
		if resp.StatusCode != http.StatusBadRequest || e.Param != param {
			t.Errorf("/api/top?%s: %d %s, want 400 naming %s", query, resp.StatusCode, b, param)
		}
	}
}

// FuzzParseEvent: any body is refused with an error or gives a valid
// event.
func FuzzParseEvent(f *testing.F) {
	f.Add([]byte(`{"time": 1795237390.25, "source": "deploy", "severity": "notice", "text": "deploy api v42", "labels": {"service": "api"}}`))
	f.Add([]byte(`{"time": "-5s", "text": "x"}`))
	f.Add([]byte(`{"time": "2026-11-21T05:03:20Z", "text": "x", "labels": {"k": 1}}`))
	now := time.Unix(1795237400, 0)
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := parseEvent(body, now)
		if err != nil {
			return
		}
		if verr := e.Validate(); verr != nil || e.Source == "kmsg" {
			t.Fatalf("accepted %q as %+v: %v", body, e, verr)
		}
	})
}
