package web

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/docs"
	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

func sourceNamed(t *testing.T, db Reader, name string) store.SourceInfo {
	t.Helper()
	for _, s := range db.Sources() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no source %s", name)
	return store.SourceInfo{}
}

func TestSources(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	resp, body := fx.get(t, "/api/sources")
	mustOK(t, "sources", resp, body)
	host, capture := sourceNamed(t, fx.db, "host"), sourceNamed(t, fx.db, "capture")
	wantJSON(t, "sources", body, []sourceJSON{
		{Name: "capture", First: seconds(capture.First), Last: seconds(capture.Last), Samples: 600, Imported: true},
		{Name: "host", First: seconds(host.First), Last: seconds(host.Last), Samples: host.Samples, PeriodNs: hostPeriod},
	})
	if capture.First != (base+70)*1e9 || host.Samples < 4*99*65 {
		t.Fatalf("fixture: capture from %d, %d host samples", capture.First, host.Samples)
	}
}

// TestDefaultRanges leaves out from and to: heatmaps and timelines cover
// the selected sources' whole span, as FlameScope shows a whole file.
func TestDefaultRanges(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	ctx := context.Background()
	host, capture := sourceNamed(t, fx.db, "host"), sourceNamed(t, fx.db, "capture")
	for _, tc := range []struct {
		query string
		f     store.Filter
		r     store.Range
	}{
		{"source=capture", store.Filter{Sources: []string{"capture"}}, store.Range{From: capture.First, To: capture.Last + 1}},
		{"", store.Filter{}, store.Range{From: host.First, To: capture.Last + 1}},
		{"from=1795237440", store.Filter{}, store.Range{From: (base + 60) * 1e9, To: capture.Last + 1}},
		{"source=host&to=1795237420&idle=include", store.Filter{Sources: []string{"host"}, IncludeIdle: true},
			store.Range{From: host.First, To: (base + 40) * 1e9}},
	} {
		resp, body := fx.get(t, withQuery("/api/heatmap", tc.query))
		mustOK(t, "heatmap "+tc.query, resp, body)
		h, _, err := query.HeatmapOf(ctx, fx.db, tc.r, &tc.f, defaultRows)
		if err != nil {
			t.Fatal(err)
		}
		wantJSON(t, "heatmap "+tc.query, body, heatmapJSON{Heatmap: h})
	}

	// A short span: a step from the 1-2-5 ladder, the range as it is.
	resp, body := fx.get(t, "/api/timeline?source=host")
	mustOK(t, "timeline", resp, body)
	r := store.Range{From: host.First, To: host.Last + 1}
	f := store.Filter{Sources: []string{"host"}}
	tl, _, err := fx.db.Timeline(ctx, r, 100e6, &f) // 65 s / 1000 -> 100 ms
	if err != nil {
		t.Fatal(err)
	}
	wantJSON(t, "default timeline", body, newTimelineJSON(r.From, 100e6, tl))

	// Long spans: multiples of 10 s, the range aligned to them, at most
	// 1000 points even after aligning.
	for _, tc := range []struct {
		query string
		step  int64
		r     store.Range
	}{
		{"from=1795222980&to=1795237460", 20e9, store.Range{From: (base - 14400) * 1e9, To: (base + 80) * 1e9}},
		// 10 000 s: 10 s steps would need 1001 points once aligned.
		{"from=1795237385&to=1795247385", 20e9, store.Range{From: base * 1e9, To: (base + 10020) * 1e9}},
	} {
		resp, body := fx.get(t, "/api/timeline?"+tc.query)
		mustOK(t, "timeline", resp, body)
		tl, _, err := fx.db.Timeline(ctx, tc.r, tc.step, &store.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		counts := tl.Samples
		var sum int64
		for _, c := range counts {
			sum += c
		}
		if sum == 0 || len(counts) > defaultTimelinePoints {
			t.Fatalf("%s: %d points, %d samples", tc.query, len(counts), sum)
		}
		wantJSON(t, "timeline "+tc.query, body, newTimelineJSON(tc.r.From, tc.step, tl))
	}

	// An empty store has nothing to default to.
	empty, err := store.Open(t.TempDir(), store.Options{Source: "none", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	efx := newFixture(t, empty, Options{})
	for _, path := range []string{"/api/heatmap", "/api/timeline"} {
		resp, body := efx.get(t, path)
		wantParamError(t, path, resp, body, "from")
	}
	resp, body = efx.get(t, "/api/sources")
	if resp.StatusCode != http.StatusOK || string(body) != "[]" {
		t.Fatalf("sources of an empty store: %d %s", resp.StatusCode, body)
	}
}

func wantParamError(t *testing.T, what string, resp *http.Response, body []byte, param string) {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%s: %d, body %q is not JSON: %v", what, resp.StatusCode, body, err)
	}
	if resp.StatusCode != http.StatusBadRequest || e.Param != param || !strings.HasPrefix(e.Error, param+": ") ||
		resp.Header.Get("Content-Type") != jsonType {
		t.Errorf("%s: %d %s (%s), want 400 naming %s", what, resp.StatusCode, body, resp.Header.Get("Content-Type"), param)
	}
}

func TestBadParameters(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	long := strings.Repeat("1,", maxListItems) + "1"
	for _, tc := range []struct{ path, query, param string }{
		{"/api/flamegraph", "to=1795237460", "from"},
		{"/api/flamegraph", "from=1795237390", "to"},
		{"/api/flamegraph", "from=yesterday&to=1795237460", "from"},
		{"/api/top", "from=1795237390&to=soon", "to"},
		{"/api/top", "from=1795237460&to=1795237390", "to"},
		{"/api/pprof", "from=1795237390&to=1795237390", "to"},
		{"/api/pprof", "from=-5m&to=-10m", "to"},
		{"/api/heatmap", "from=-5", "from"},
		{"/api/heatmap", "from=1&to=1e30", "to"},
		{"/api/heatmap", "from=2200-01-01T00:00:00Z", "from"},
		{"/api/heatmap", "from=0&to=1000000", "to"},
		{"/api/heatmap", "to=1795437460", "from"},
		{"/api/heatmap", queryA + "&rows=0", "rows"},
		{"/api/heatmap", queryA + "&rows=1001", "rows"},
		{"/api/heatmap", queryA + "&rows=ten", "rows"},
		{"/api/heatmap", "from=1795237380&to=1795267380&rows=200", "rows"},
		{"/api/diff", queryA, "from2"},
		{"/api/diff", queryA + "&from2=x&to2=1795237382", "from2"},
		{"/api/diff", queryA + "&from2=1795237382", "to2"},
		{"/api/diff", queryA + "&from2=1795237389&to2=1795237382", "to2"},
		{"/api/diff", queryA + "&from2=1795237382&to2=later", "to2"},
		{"/api/diff", queryA + "&from2=1795237382&to2=1795237389&normalize=samples", "normalize"},
		{"/api/flamegraph", queryA + "&normalize=length", "normalize"},
		{"/api/percpu", queryA + "&step=1ms", "step"},
		{"/api/percpu", queryA + "&step=abc", "step"},
		{"/api/percpu", queryA + "&step=0", "step"},
		{"/api/percpu", queryA + "&rows=5", "rows"},
		{"/api/percpu", "from=x", "from"},
		{"/api/percpu", "from=1795237460&to=1795237390", "to"},
		{"/api/percpu", queryA + "&cpu=70000", "cpu"},
		{"/api/timeline", "step=0", "step"},
		{"/api/timeline", "step=abc", "step"},
		{"/api/timeline", "step=-1s", "step"},
		{"/api/timeline", "step=NaN", "step"},
		{"/api/timeline", "step=-Inf", "step"},
		{"/api/timeline", "step=1e300", "step"},
		{"/api/timeline", "step=1ns", "step"},
		{"/api/timeline", "from=x", "from"},
		{"/api/timeline", "to=1", "to"},
		{"/api/top", queryA + "&limit=0", "limit"},
		{"/api/top", queryA + "&limit=10001", "limit"},
		{"/api/top", queryA + "&limit=x", "limit"},
		{"/api/top", queryA + "&source=nope", "source"},
		{"/api/top", queryA + "&source=host,,capture", "source"},
		{"/api/top", queryA + "&node=nope", "node"},
		{"/api/heatmap", queryA + "&node=a,,b", "node"},
		{"/api/heatmap", queryA + "&node=" + url.QueryEscape("~("), "node"},
		{"/api/timeline", "node=" + url.QueryEscape("<b>"), "node"},
		{"/api/flamegraph", queryA + "&node=" + long, "node"},
		{"/api/top", queryA + "&label=zone", "label"},
		{"/api/top", queryA + "&label=" + url.QueryEscape("=us-east-1a"), "label"},
		{"/api/percpu", queryA + "&label=" + url.QueryEscape("zone=a"), "label"},
		{"/api/heatmap", queryA + "&label=" + url.QueryEscape("zo ne=a"), "label"},
		{"/api/nodes", "node=a", "node"},
		{"/api/top", queryA + "&comm=~(", "comm"},
		{"/api/top", queryA + "&pid=x", "pid"},
		{"/api/top", queryA + "&pid=" + long, "pid"},
		{"/api/top", queryA + "&tid=1.5", "tid"},
		{"/api/top", queryA + "&cpu=3-1", "cpu"},
		{"/api/top", queryA + "&cpu=70000", "cpu"},
		{"/api/top", queryA + "&cpu=0-4294967295", "cpu"},
		{"/api/top", queryA + "&cpu=" + strings.Repeat("0-65535,", 100) + "0", "cpu"}, // 6.5 million CPUs
		{"/api/top", queryA + "&cgroup=../../etc", "cgroup"},
		{"/api/top", queryA + "&cgroup=5003,,5005", "cgroup"},
		{"/api/top", queryA + "&cgroup=" + url.QueryEscape("/a\nb"), "cgroup"},
		{"/api/top", queryA + "&container=a,,b", "container"},
		{"/api/top", queryA + "&container=" + url.QueryEscape("<img src=x>"), "container"},
		{"/api/top", queryA + "&pod=" + strings.Repeat("p", 300), "pod"},
		{"/api/heatmap", queryA + "&namespace=" + url.QueryEscape("kube system"), "namespace"},
		{"/api/timeline", "qos=gold", "qos"},
		{"/api/top", queryA + "&qos=" + long, "qos"},
		{"/api/flamegraph", queryA + "&group=node", "group"},
		{"/api/top", queryA + "&group=node", "group"},
		{"/api/top", queryA + "&group=pod&from2=1795237300&to2=1795237370", "group"},
		{"/api/flamegraph", queryA + "&frame=[", "frame"},
		{"/api/flamegraph", queryA + "&stack=both", "stack"},
		{"/api/flamegraph", queryA + "&idle=yes", "idle"},
		{"/api/top", queryA + "&form=1", "form"},
		{"/api/sources", "from=1", "from"},
		{"/api/top", queryA + "&pid=1&pid=2", "pid"},
		{"/api/top", "from=%zz", "query"},
		{"/api/top", "from=1;to=2", "query"},
	} {
		resp, body := fx.get(t, tc.path+"?"+tc.query)
		wantParamError(t, tc.path+"?"+tc.query, resp, body, tc.param)
	}
}

func TestMethodsAndUnknownPaths(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	for _, path := range []string{"/", "/api/sources", "/api/timeline", "/api/heatmap", "/api/flamegraph", "/api/diff", "/api/percpu", "/api/top", "/api/pprof"} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			resp, body := fx.do(t, method, path+"?"+queryA)
			var e errorBody
			if resp.StatusCode != http.StatusMethodNotAllowed || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, method) ||
				resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: %d %s, Allow %q", method, path, resp.StatusCode, body, resp.Header.Get("Allow"))
			}
		}
	}
	resp, body := fx.do(t, http.MethodHead, "/api/sources")
	if resp.StatusCode != http.StatusOK || len(body) != 0 || resp.ContentLength <= 2 {
		t.Errorf("HEAD: %d, %d bytes, Content-Length %d", resp.StatusCode, len(body), resp.ContentLength)
	}
	for _, path := range []string{"/api/nope", "/api/", "/api", "/api/sources/", "/nope", "/favicon.ico", "/index.html"} {
		resp, body := fx.get(t, path)
		var e errorBody
		if resp.StatusCode != http.StatusNotFound || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, path) ||
			resp.Header.Get("Content-Type") != jsonType {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
	resp, body = fx.get(t, "/")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" ||
		!bytes.Contains(body, []byte("docs/api.md")) || bytes.Contains(body, []byte("<script>")) || bytes.Contains(body, []byte("<style")) || bytes.Contains(body, []byte("style=")) {
		t.Errorf("GET /: %d %q\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

func wantSecurityHeaders(t *testing.T, what string, resp *http.Response) {
	t.Helper()
	for name, want := range map[string]string{
		"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
	} {
		if got := resp.Header.Get(name); got != want {
			t.Errorf("%s (%d): %s %q, want %q", what, resp.StatusCode, name, got, want)
		}
	}
}

func TestSecurityHeaders(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	for _, target := range []string{"/", "/api/sources", "/api/heatmap?rows=0", "/api/nope", "/api/pprof?" + queryA} {
		resp, _ := fx.get(t, target)
		wantSecurityHeaders(t, target, resp)
	}
	resp, _ := fx.do(t, http.MethodPost, "/api/top")
	wantSecurityHeaders(t, "POST", resp)
	tfx := newFixture(t, fx.db, Options{AuthToken: "t0ken"})
	resp, _ = tfx.get(t, "/api/sources")
	wantSecurityHeaders(t, "401", resp)
	cfx := newFixture(t, fx.db, Options{MaxResponseBytes: 10})
	resp, _ = cfx.get(t, "/api/sources")
	wantSecurityHeaders(t, "413", resp)
}

func TestAuthToken(t *testing.T) {
	const token = "s3cret.Token-42"
	fx := newFixture(t, testStore(t), Options{AuthToken: token})
	unauthorized := func(what string, resp *http.Response, body []byte) {
		t.Helper()
		var e errorBody
		if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal(body, &e) != nil || !strings.HasPrefix(e.Error, "unauthorized") ||
			resp.Header.Get("Content-Type") != jsonType {
			t.Errorf("%s: %d %s, want 401 JSON", what, resp.StatusCode, body)
		}
	}
	for _, target := range []string{"/", "/api/sources", "/api/heatmap", "/api/nope", "/?token=wrong", "/?token=", "/api/sources?token=" + token} {
		resp, body := fx.get(t, target)
		unauthorized(target, resp, body)
	}
	for _, hdr := range []string{"Bearer wrong", "Bearer " + token + "x", "Basic " + token, token, "Bearer"} {
		resp, body := fx.get(t, "/api/sources", "Authorization", hdr)
		unauthorized(hdr, resp, body)
	}
	resp, body := fx.get(t, "/api/sources", "Cookie", cookieName+"=wrong")
	unauthorized("wrong cookie", resp, body)

	for _, hdr := range []string{"Bearer " + token, "bearer " + token} {
		resp, body := fx.get(t, "/api/sources", "Authorization", hdr)
		mustOK(t, hdr, resp, body)
	}
	resp, body = fx.get(t, "/", "Authorization", "Bearer "+token)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("heatscope")) {
		t.Errorf("UI with the token: %d", resp.StatusCode)
	}

	// The browser's way in: /?token= sets the cookie and leaves the URL.
	resp, _ = fx.get(t, "/?token="+token)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("/?token=: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || cookies[0].Name != cookieName || cookies[0].Value != token || !cookies[0].HttpOnly ||
		cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Path != "/" {
		t.Fatalf("cookies %+v", cookies)
	}
	cookie := cookieName + "=" + cookies[0].Value
	resp, body = fx.get(t, "/api/sources", "Cookie", cookie)
	mustOK(t, "with the cookie", resp, body)
	resp, _ = fx.get(t, "/", "Cookie", cookie)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("UI with the cookie: %d", resp.StatusCode)
	}
	resp, _ = fx.do(t, http.MethodPost, "/?token="+token)
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("POST /?token=: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}

	for _, bad := range []string{"with space", `quo"te`, "semi;colon", "comma,", "back\\slash", "tab\t", "ünï"} {
		if _, err := New(fx.db, Options{AuthToken: bad}); err == nil {
			t.Errorf("token %q accepted", bad)
		}
	}
}

func TestResponseTooLarge(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{MaxResponseBytes: 300})
	for _, target := range []string{"/api/flamegraph?" + queryA, "/api/diff?" + queryA + "&from2=1795237382.5&to2=1795237389.75",
		"/api/heatmap?" + queryA, "/api/percpu?" + queryA, "/api/top?" + queryA, "/api/pprof?" + queryA, "/api/timeline"} {
		resp, body := fx.get(t, target)
		var e errorBody
		if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(body, &e) != nil ||
			!strings.Contains(e.Error, "response too large") || !strings.Contains(e.Error, "narrow the range or add filters") ||
			resp.Header.Get("Content-Disposition") != "" {
			t.Errorf("%s: %d %s", target, resp.StatusCode, body)
		}
	}
	resp, body := fx.get(t, "/api/sources")
	mustOK(t, "small answer", resp, body)

	// The tree encoder stops soon after the limit, whatever the tree's size.
	root, _, err := query.FlameGraphOf(context.Background(), fx.db, rangeA, &store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	full, err := node(nil, root, 1<<30)
	if err != nil || len(full) < 10000 {
		t.Fatalf("full tree: %d bytes, %v", len(full), err)
	}
	out, err := node(nil, root, 1000)
	if err != errTooLarge || len(out) > 2000 {
		t.Fatalf("limited tree: %d bytes, %v", len(out), err)
	}
}

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestPanicIsRecovered(t *testing.T) {
	var log lockedBuffer
	srv, err := New(testStore(t), Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv.api["/api/boom"] = endpoint{run: func(context.Context, *params, *reply) (store.Warnings, error) { panic("boom") }}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/boom", nil))
	if rec.Code != http.StatusInternalServerError || rec.Body.String() != `{"error":"internal error"}` ||
		rec.Header().Get("Content-Type") != jsonType {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "panic=boom") || !strings.Contains(log.String(), "/api/boom") {
		t.Fatalf("log:\n%s", log.String())
	}
}

// TestStoreWarnings damages one of two blocks: the answer covers the other
// and says what was skipped in a Warning header; an answer of the damaged
// block alone says in its message that nothing could be read.
func TestStoreWarnings(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{Source: "host", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"one", "two"} {
		if _, err := db.Import(name, 0, func(fn func(*sample.Sample) error) error {
			return profileio.ReadPerfScript(strings.NewReader(capturePerfScript()), fn)
		}); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	blocks, err := store.LocalBlocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	damaged := ""
	for _, b := range blocks {
		if meta, _, err := b.ReadMeta(); err == nil && meta.Source == "one" {
			damaged = b.Dir
			data, _ := os.ReadFile(b.DataPath())
			data[20] ^= 0x55 // inside chunk 0
			os.WriteFile(b.DataPath(), data, 0o644)
		}
	}
	if damaged == "" {
		t.Fatal("no block of source one")
	}
	ro, err := store.Open(dir, store.Options{ReadOnly: true, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	fx := newFixture(t, ro, Options{})
	resp, body := fx.get(t, "/api/top?from=1795237450&to=1795237453")
	mustOK(t, "top", resp, body)
	var top query.Top
	json.Unmarshal(body, &top)
	warnings := resp.Header.Values("Warning")
	if top.Samples != 450 || len(warnings) != 1 || !strings.HasPrefix(warnings[0], `199 heatscope "skipped unreadable data: `) ||
		!strings.Contains(warnings[0], filepath.Base(damaged)) {
		t.Fatalf("%d samples (want the 450 non-idle of source two), warnings %q", top.Samples, warnings)
	}
	resp, _ = fx.get(t, "/api/top?from=1795237450&to=1795237453&source=two")
	if resp.StatusCode != http.StatusOK || len(resp.Header.Values("Warning")) != 0 {
		t.Fatalf("source two alone: %d, warnings %q", resp.StatusCode, resp.Header.Values("Warning"))
	}
	// Source one alone: nothing could be read. The message says so, not
	// that the window holds nothing, and the block is named once.
	for _, path := range []string{"/api/top?", "/api/heatmap?", "/api/timeline?"} {
		resp, body = fx.get(t, path+"from=1795237450&to=1795237453&source=one")
		var v struct{ Message string }
		json.Unmarshal(body, &v)
		want := `No samples of source "one" from 2026-11-21T05:04:10Z to 2026-11-21T05:04:13Z could be read: 1 warning names what was not.`
		if warnings := resp.Header.Values("Warning"); resp.StatusCode != http.StatusOK || v.Message != want || len(warnings) != 1 ||
			!strings.Contains(warnings[0], filepath.Base(damaged)) {
			t.Errorf("%ssource=one: %d, message %q, warnings %q; want %q", path, resp.StatusCode, v.Message, warnings, want)
		}
	}
}

func TestPprofDownload(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	resp, body := fx.get(t, "/api/pprof?from=1795237390.5&to=2026-11-21T05:04:20Z&comm=java")
	mustOK(t, "pprof", resp, body)
	if ct, cd := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"); ct != "application/octet-stream" ||
		cd != `attachment; filename="heatscope-1795237390.5-1795237460.pb.gz"` {
		t.Fatalf("Content-Type %q, Content-Disposition %q", ct, cd)
	}
	p, err := profile.ParseData(body)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range p.Sample {
		if s.Label["comm"][0] != "java" {
			t.Fatalf("a sample of %v", s.Label["comm"])
		}
		n += s.Value[0]
	}
	top, _, err := query.TopOf(context.Background(), fx.db, store.Range{From: (base+10)*1e9 + 5e8, To: (base + 80) * 1e9},
		&store.Filter{Comm: "java"}, query.GroupNone, query.GroupAddresses)
	if err != nil {
		t.Fatal(err)
	}
	if n != top.Samples || n == 0 || p.Period != hostPeriod {
		t.Fatalf("%d samples, period %d; want %d samples, period %d", n, p.Period, top.Samples, hostPeriod)
	}
	file := filepath.Join(t.TempDir(), "heatscope.pb.gz")
	os.WriteFile(file, body, 0o644)
	out, err := exec.Command("go", "tool", "pprof", "-top", file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "naïve_") || !strings.Contains(string(out), "vfs_read") {
		t.Fatalf("go tool pprof -top: %v\n%s", err, out)
	}
}

// TestServe runs the real listener: loopback Host checks, a token lifting
// them, and a clean stop when the context ends.
func TestServe(t *testing.T) {
	db := testStore(t)
	serve := func(addr string, opts Options) (string, *lockedBuffer, func()) {
		var log lockedBuffer
		opts.Logger = slog.New(slog.NewTextHandler(&log, nil))
		srv, err := New(db, opts)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, ln) }()
		stop := func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
			case <-time.After(shutdownGrace + 5*time.Second):
				t.Fatal("Serve did not return after its context ended")
			}
		}
		return ln.Addr().String(), &log, stop
	}
	get := func(addr, host, auth string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/sources", nil)
		if host != "" {
			req.Host = host
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	addr, log, stop := serve("127.0.0.1:0", Options{})
	_, port, _ := net.SplitHostPort(addr)
	for host, want := range map[string]int{"": 200, "localhost:" + port: 200, "LOCALHOST": 200, "[::1]:" + port: 200,
		"evil.example:" + port: 403, "127.0.0.1.nip.io": 403, "localhost.evil.example": 403} {
		resp := get(addr, host, "")
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, resp.StatusCode, want)
		}
		if want == 403 {
			wantSecurityHeaders(t, "403", resp)
		}
	}
	stop()
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("still listening after Serve returned")
	}
	if !strings.Contains(log.String(), "url=http://"+addr+"/") || strings.Contains(log.String(), "WITHOUT AUTHENTICATION") {
		t.Errorf("log:\n%s", log.String())
	}

	addr, _, stop = serve("127.0.0.1:0", Options{AuthToken: "tok"})
	if resp := get(addr, "evil.example", "tok"); resp.StatusCode != 200 {
		t.Errorf("with a token, any Host: %d", resp.StatusCode)
	}
	stop()

	addr, log, stop = serve("0.0.0.0:0", Options{})
	_, port, _ = net.SplitHostPort(addr)
	if resp := get("127.0.0.1:"+port, "heatscope.example", ""); resp.StatusCode != 200 {
		t.Errorf("on 0.0.0.0: %d", resp.StatusCode)
	}
	stop()
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "WITHOUT AUTHENTICATION") {
		t.Errorf("no warning for a non-loopback address without a token:\n%s", log.String())
	}
}

func TestTreeEncodingMatchesEncodingJSON(t *testing.T) {
	names := []string{"plain", "", "with \"quotes\" and \\", "<html>&amp;", "naïve ünïcode", "\x00\x1f\x7f", "bad \xff utf-8",
		"line\u2028sep\u2029", "tab\tnewline\n"}
	root := &query.Node{Name: "root", Kind: "root", Value: 99, Self: 1}
	d := &query.Diff{TotalA: 7, TotalB: -3, SamplesA: 5, SamplesB: 9, Root: &query.DiffNode{Name: "root", Kind: "root", A: 1, B: 2, SelfA: 3, SelfB: 4, Delta: -5, DeltaTotal: 6}}
	for i, name := range names {
		root.Children = append(root.Children, &query.Node{Name: name, Kind: name, Value: int64(i) - 3, Self: int64(i) << 40,
			FP: int64(i % 2), Children: []*query.Node{{Name: name + "x", Kind: "user"}}})
		d.Root.Children = append(d.Root.Children, &query.DiffNode{Name: name, Kind: "k" + name, A: int64(i), Delta: -int64(i)})
	}
	got, err := node(nil, root, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(root)
	if !bytes.Equal(got, want) {
		t.Fatalf("node:\n got %s\nwant %s", got, want)
	}
	got, err = diff(nil, d, "", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want, _ = json.Marshal(nestedDiff(d))
	if !bytes.Equal(got, want) {
		t.Fatalf("diff:\n got %s\nwant %s", got, want)
	}
	got, _ = diff(nil, &query.Diff{}, "", 100)
	if want, _ := json.Marshal(nestedDiff(&query.Diff{})); !bytes.Equal(got, want) {
		t.Fatalf("empty diff: %s, want %s", got, want)
	}
}

func TestSteps(t *testing.T) {
	for width, want := range map[int64]int64{1: 1e6, 999e6: 1e6, 1001e6: 2e6, 65e9: 100e6, 5000e9: 5e9, 5001e9: 10e9,
		10001e9: 20e9, 86400e9: 90e9} {
		if got := defaultStep(width); got != want {
			t.Errorf("defaultStep(%v) = %v, want %v", time.Duration(width), time.Duration(got), time.Duration(want))
		}
	}
	r := store.Range{From: 15e9 + 1, To: 35e9}
	if got := alignRange(r, 20e9); got != (store.Range{From: 0, To: 40e9}) {
		t.Errorf("aligned to 20 s: %+v", got)
	}
	if got := alignRange(r, 5e9); got != r {
		t.Errorf("aligned to 5 s: %+v", got)
	}
	for ns, want := range map[int64]string{0: "0", 1795237390e9: "1795237390", 1795237390_500000000: "1795237390.5",
		100e9: "100", 1: "0.000000001", 10_000_000_010: "10.00000001"} {
		if got := secondsText(ns); got != want {
			t.Errorf("secondsText(%d) = %q, want %q", ns, got, want)
		}
	}
}

// countingBusy counts the requests a Server tells it of.
type countingBusy struct{ enters, leaves atomic.Int64 }

func (b *countingBusy) Enter() { b.enters.Add(1) }
func (b *countingBusy) Leave() { b.leaves.Add(1) }

// TestServeTellsBusyOfQueriesOnly checks that the overhead guard hears of
// API requests but not of scrapes and probes, which are part of what
// running the agent costs.
func TestServeTellsBusyOfQueriesOnly(t *testing.T) {
	busy := &countingBusy{}
	srv, err := New(testStore(t), Options{Logger: discard(), Busy: busy, Health: func() error { return nil },
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("metric 1\n")) })})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	for _, path := range []string{"/metrics", "/healthz", "/api/sources", "/healthz", "/metrics"} {
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
	}
	if e, l := busy.enters.Load(), busy.leaves.Load(); e != 1 || l != 1 {
		t.Fatalf("Busy heard of %d requests starting and %d ending, want the one API request", e, l)
	}
}

// TestAPIReference serves docs/api.md from the binary at /docs/api.md,
// where the UI's footers link, and a wrong API path points there.
func TestAPIReference(t *testing.T) {
	fx := newFixture(t, testStore(t), Options{})
	resp, body := fx.get(t, "/docs/api.md")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/markdown; charset=utf-8" || !bytes.Equal(body, docs.API) ||
		!bytes.HasPrefix(body, []byte("# heatscope HTTP API\n")) {
		t.Fatalf("GET /docs/api.md: %d %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
	wantSecurityHeaders(t, "/docs/api.md", resp)
	for _, page := range []string{"/", "/fleet/events", "/fleet/prediff"} {
		if _, body := fx.get(t, page); !bytes.Contains(body, []byte(`href="/docs/api.md"`)) || bytes.Contains(body, []byte("github.com/heatscope")) {
			t.Errorf("%s does not link the served /docs/api.md", page)
		}
	}
	if _, body := fx.get(t, "/api/nope"); !bytes.Contains(body, []byte("see /docs/api.md")) {
		t.Errorf("a wrong API path: %s, want it to point at /docs/api.md", body)
	}
}
