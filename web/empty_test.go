package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/store"
)

// findNull returns the JSON path of the first null in v ("" when none).
func findNull(v any, at string) string {
	switch v := v.(type) {
	case nil:
		return at
	case map[string]any:
		for k, c := range v {
			if p := findNull(c, at+"."+k); p != "" {
				return p
			}
		}
	case []any:
		for i, c := range v {
			if p := findNull(c, at+"["+strconv.Itoa(i)+"]"); p != "" {
				return p
			}
		}
	}
	return ""
}

// TestEmptyResults asks every endpoint for a selection no sample passes
// (a command that does not exist, a window without samples, a source whose
// range holds none): every answer is a 200 whose lists are [] (never null),
// and whose counts are zero.
func TestEmptyResults(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	// The recording is base+0.3 .. base+65.3, the capture base+70 .. base+73:
	// base+66 .. base+69 holds no sample at all.
	const gap = "from=1795237446&to=1795237449"
	for _, filter := range []string{"comm=nosuchcommand&" + queryA, gap, "comm=~^nosuch&" + queryA, "frame=nosuchframe&" + queryA} {
		baseline := "from2=1795237382&to2=1795237385&" // samples, none passing the filter
		if filter == gap {
			baseline = "from2=1795237446.5&to2=1795237447.5&"
		}
		for _, c := range []struct {
			target string
			empty  []string // the lists that must be []
		}{
			{"/api/timeline?" + filter, nil},
			{"/api/heatmap?" + filter, nil},
			{"/api/percpu?" + filter, []string{"cpus", "counts"}},
			{"/api/flamegraph?" + filter, nil},
			{"/api/flamegraph?group=pod&" + filter, nil},
			{"/api/diff?" + baseline + filter, nil},
			{"/api/top?" + filter, []string{"functions"}},
			{"/api/top?group=container&" + filter, []string{"functions"}},
			{"/api/top?" + baseline + filter, []string{"functions"}},
		} {
			resp, body := fx.get(t, c.target)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s: %d %s", c.target, resp.StatusCode, body)
				continue
			}
			var v map[string]any
			if err := json.Unmarshal(body, &v); err != nil {
				t.Errorf("GET %s: %v", c.target, err)
				continue
			}
			if p := findNull(v, "$"); p != "" {
				t.Errorf("GET %s: null at %s in %s", c.target, p, clipBody(body))
			}
			for _, name := range c.empty {
				if l, ok := v[name].([]any); !ok || len(l) != 0 {
					t.Errorf("GET %s: %s is not [] in %s", c.target, name, clipBody(body))
				}
			}
			// No sample passes: every count in the answer is 0.
			for _, field := range []string{`"samples":`, `"samples2":`, `"samplesA":`, `"samplesB":`, `"cpu2":`, `"value":`, `"totalA":`, `"a":`, `"maxvalue":`} {
				if i := bytes.Index(body, []byte(field)); i >= 0 && body[i+len(field)] != '0' {
					t.Errorf("GET %s: %s not 0 in %s", c.target, field, clipBody(body))
				}
			}
		}
		// pprof: a valid profile without samples.
		resp, body := fx.get(t, "/api/pprof?"+filter)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("pprof %s: %d %s", filter, resp.StatusCode, body)
		} else if p, err := profile.ParseData(body); err != nil || len(p.Sample) != 0 {
			t.Errorf("pprof %s: %v, %v", filter, p, err)
		}
	}
	// Events of a window without any, and the sources of an empty store.
	resp, body := fx.get(t, "/api/events?from=1795237446&to=1795237449")
	if resp.StatusCode != http.StatusOK || string(body) != `{"events":[],"more":false}` {
		t.Errorf("events: %d %s", resp.StatusCode, body)
	}
	db, err := store.Open(t.TempDir(), store.Options{Source: "none", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	empty := newFixture(t, db, Options{})
	if resp, body := empty.get(t, "/api/sources"); resp.StatusCode != http.StatusOK || string(body) != `[]` {
		t.Errorf("sources of an empty store: %d %s", resp.StatusCode, body)
	}
	if resp, body := empty.get(t, "/api/events"); resp.StatusCode != http.StatusOK || string(body) != `{"events":[],"more":false}` {
		t.Errorf("events of an empty store: %d %s", resp.StatusCode, body)
	}
	if resp, body := empty.get(t, "/api/nodes"); resp.StatusCode != http.StatusOK || string(body) != `[]` {
		t.Errorf("nodes of an empty store: %d %s", resp.StatusCode, body)
	}
	// Lists and maps of what there is: a node without labels has {}.
	for _, target := range []string{"/api/nodes", "/api/sources"} {
		resp, body := fx.get(t, target)
		var v any
		if err := json.Unmarshal(body, &v); resp.StatusCode != http.StatusOK || err != nil {
			t.Errorf("GET %s: %d %s", target, resp.StatusCode, body)
		} else if p := findNull(v, "$"); p != "" {
			t.Errorf("GET %s: null at %s in %s", target, p, clipBody(body))
		}
	}
}

func clipBody(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}
