// Package web serves heatscope's HTTP API over a store: the sources, a
// timeline, FlameScope's subsecond heatmap, flame graphs, their
// differential, top functions and pprof downloads, each of any time range
// with any filter. docs/api.md documents every endpoint. The UI (plain
// JavaScript modules, embedded with go:embed) is served from /.
//
// Answers are computed and encoded in full, into a buffer bounded by
// Options.MaxResponseBytes, before a byte is sent: a request for too much
// fails with a clear error instead of streaming gigabytes, and any error
// still gets its proper status. Bad parameters are 400s naming the
// parameter, never 500s.
package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heatscope/heatscope/docs"
	"github.com/heatscope/heatscope/overview"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// Options configure a Server.
type Options struct {
	// AuthToken, when not empty, is required on every request, as an
	// "Authorization: Bearer TOKEN" header or the heatscope_token cookie
	// that GET /?token=TOKEN sets.
	AuthToken string
	// Logger receives failed requests and recovered panics (default
	// slog.Default()).
	Logger *slog.Logger
	// MaxResponseBytes bounds a response body (default 64 MiB).
	MaxResponseBytes int64
	// Metrics, when not nil, is served at GET /metrics (with the token,
	// like the API).
	Metrics http.Handler
	// Health, when not nil, answers GET /healthz: 200 "ok" while it
	// returns nil, 503 with its error otherwise. /healthz needs no token
	// (probes rarely carry one) and tells nothing about what is recorded.
	Health func() error
	// Busy, when not nil, hears of every request's start and end, so that
	// a recorder's overhead guard can leave the CPU spent serving out of
	// what sampling costs. /metrics and /healthz are not queries: a
	// scrape or a probe is part of what running the agent costs.
	Busy interface {
		Enter()
		Leave()
	}
	// ObserveQuery, when not nil, is called after every API request with
	// its path, HTTP status and duration.
	ObserveQuery func(endpoint string, status int, elapsed time.Duration)
	// Outage, when not nil, says whether the storage (a bucket) answers:
	// nil while it does. While it does not, every API answer carries a
	// Warning saying since when, and from what listing on, its data may
	// be stale; while nothing was ever read from it, the API answers 503
	// and /healthz is not ready.
	Outage func() *Outage
	// Overview keeps what the fleet overview read of the blocks' per-CPU
	// summaries: a query service shares it with its warming and /metrics.
	// Nil: the server keeps its own.
	Overview *overview.Cells
}

// Outage is a storage that does not answer.
type Outage struct {
	// Storage names it ("bucket s3://fleet").
	Storage string
	// Since is when it stopped answering; Err is its last error.
	Since time.Time
	Err   error
	// Listed is its last complete listing: what was uploaded since is not
	// known. Zero when it was never listed: nothing can be answered.
	Listed time.Time
}

// stale says what an answer from what was read before may lack.
func (o *Outage) stale() string {
	return fmt.Sprintf("%s has not answered since %s: data uploaded after %s (its last listing) may be missing",
		o.Storage, o.Since.UTC().Format(time.RFC3339), o.Listed.UTC().Format(time.RFC3339))
}

// unread says why there is nothing to answer (the error names the
// storage).
func (o *Outage) unread() string {
	return fmt.Sprintf("%v (no answer since %s; nothing was read from it yet)", o.Err, o.Since.UTC().Format(time.RFC3339))
}

// outage returns the storage's outage, nil while it answers.
func (s *Server) outage() *Outage {
	if s.opts.Outage == nil {
		return nil
	}
	return s.opts.Outage()
}

// Defaults and limits.
const (
	defaultMaxResponseBytes = 64 << 20
	// queryTimeout bounds one request's query, under the server's write
	// timeout so that the error can still be sent.
	queryTimeout = 50 * time.Second
	writeTimeout = 60 * time.Second
	// shutdownGrace is how long Serve lets requests finish once its
	// context is done before it cancels them.
	shutdownGrace = 5 * time.Second
	cookieName    = "heatscope_token"
	jsonType      = "application/json; charset=utf-8"
	// contentSecurityPolicy allows only the server's own scripts, styles
	// and images (and data: images, which canvas exports use).
	contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"object-src 'none'; frame-ancestors 'none'; base-uri 'none'"
)

// uiFS holds the UI: index.html, served at /, and the scripts and style
// sheet it loads, served under /ui/.
//
//go:embed ui
var uiFS embed.FS

var indexHTML = mustReadUI("index.html")

func mustReadUI(name string) []byte {
	b, err := uiFS.ReadFile("ui/" + name)
	if err != nil {
		panic(err)
	}
	return b
}

// apiDocPath serves docs/api.md, the API reference the UI links to, from
// the binary (browsers show text/markdown as text).
const apiDocPath = "/docs/api.md"

// uiTypes are the Content-Types of the static files under /ui/; other
// files are not served. ES modules must be text/javascript.
var uiTypes = map[string]string{
	".js":  "text/javascript; charset=utf-8",
	".css": "text/css; charset=utf-8",
	".svg": "image/svg+xml",
}

// uiFile returns the static file at a /ui/ path and its Content-Type.
func uiFile(urlPath string) ([]byte, string, bool) {
	name, ok := strings.CutPrefix(urlPath, "/ui/")
	if !ok || name == "" || strings.Contains(name, "..") || strings.Contains(name, "//") || strings.HasSuffix(name, "/") {
		return nil, "", false
	}
	ctype, ok := uiTypes[path.Ext(name)]
	if !ok {
		return nil, "", false
	}
	b, err := uiFS.ReadFile("ui/" + name)
	if err != nil {
		return nil, "", false
	}
	return b, ctype, true
}

// Server answers the API over one store. It is safe for concurrent use.
type Server struct {
	db Reader
	// events takes POST /api/events: db when it is an EventLog that is
	// not read-only (a recorder's store), else nil.
	events    EventLog
	opts      Options
	log       *slog.Logger
	tokenHash [sha256.Size]byte
	api       map[string]endpoint
	postLimit *tokenBucket // POST /api/events
}

// New returns a server for db. Posted events go to db when it is also an
// EventLog that is not read-only (a recorder's store); a reader's server
// refuses them. The token, if any, must be printable ASCII without spaces,
// quotes, commas, semicolons or backslashes, so that it travels unchanged
// in a header, a cookie and a URL.
func New(db Reader, opts Options) (*Server, error) {
	if db == nil {
		return nil, errors.New("web: no store")
	}
	for _, c := range []byte(opts.AuthToken) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`",;\`, c) >= 0 {
			return nil, errors.New("web: the auth token must be printable ASCII without spaces, quotes, commas, semicolons or backslashes")
		}
	}
	if opts.MaxResponseBytes < 0 {
		return nil, fmt.Errorf("web: negative MaxResponseBytes %d", opts.MaxResponseBytes)
	}
	if opts.MaxResponseBytes == 0 {
		opts.MaxResponseBytes = defaultMaxResponseBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Overview == nil {
		opts.Overview = overview.NewCells(0, 0)
	}
	s := &Server{db: db, opts: opts, log: opts.Logger, tokenHash: sha256.Sum256([]byte(opts.AuthToken))}
	if log, ok := db.(EventLog); ok && !log.ReadOnly() {
		s.events = log
	}
	s.api = s.endpoints()
	s.postLimit = newTokenBucket(postRate, postBurst)
	return s, nil
}

// Handler returns the server's HTTP handler: the API under /api/ and the
// UI at /.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// headerWriter notes whether the response has started, so that a
// recovered panic knows whether it can still send an error.
type headerWriter struct {
	http.ResponseWriter
	started bool
	status  int
}

func (w *headerWriter) WriteHeader(code int) {
	w.started = true
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *headerWriter) Write(b []byte) (int, error) {
	w.started = true
	return w.ResponseWriter.Write(b)
}

func (s *Server) serveHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &headerWriter{ResponseWriter: rw}
	setSecurityHeaders(w.Header())
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v)
		}
		s.log.Error("panic serving a request", "method", r.Method, "url", r.URL.String(), "panic", v, "stack", string(debug.Stack()))
		if !w.started {
			writeError(w, http.StatusInternalServerError, "internal error", "")
		}
	}()
	if r.URL.Path == "/healthz" && s.opts.Health != nil {
		s.health(w, r)
		return
	}
	if r.URL.Path == "/" && r.URL.Query().Has("token") && s.opts.AuthToken != "" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		s.login(w, r)
		return
	}
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="heatscope"`)
		writeError(w, http.StatusUnauthorized, "unauthorized: send the token as \"Authorization: Bearer TOKEN\", or open /?token=TOKEN once", "")
		return
	}
	path := r.URL.Path
	ep, isAPI := s.api[path]
	static, staticType, isStatic := uiFile(path)
	if page, ok := uiPages[path]; ok {
		static, staticType, isStatic = page, "text/html; charset=utf-8", true
	}
	if path == apiDocPath {
		static, staticType, isStatic = docs.API, "text/markdown; charset=utf-8", true
	}
	isMetrics := path == "/metrics" && s.opts.Metrics != nil
	switch {
	case strings.HasPrefix(path, "/api/") && !isAPI:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no API endpoint %q (see "+apiDocPath+")", path), "")
	case !isAPI && !isStatic && !isMetrics && path != "/":
		writeError(w, http.StatusNotFound, fmt.Sprintf("not found: %q", path), "")
	case path == eventsPath && r.Method == http.MethodPost:
		s.postEvent(w, r)
	case path == eventsPath && r.Method != http.MethodGet && r.Method != http.MethodHead:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed: use GET or POST", r.Method), "")
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed: use GET", r.Method), "")
	case isMetrics:
		s.opts.Metrics.ServeHTTP(w, r)
	case isAPI:
		began := time.Now()
		s.serveAPI(w, r, ep)
		if s.opts.ObserveQuery != nil {
			s.opts.ObserveQuery(path, w.status, time.Since(began))
		}
	case isStatic:
		w.Header().Set("Content-Type", staticType)
		w.Header().Set("Content-Length", strconv.Itoa(len(static)))
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(static)
	default:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(indexHTML)))
		w.Write(indexHTML)
	}
}

// health answers /healthz from Options.Health.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed: use GET", r.Method), "")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	err := s.opts.Health()
	o := s.outage()
	if o != nil && errors.Is(err, store.ErrUnavailable) {
		err = nil // the outage, said below
	}
	switch {
	case err != nil:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "unhealthy: %v\n", err)
	case o != nil && o.Listed.IsZero():
		// Not ready: nothing to serve until the storage answers.
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %s\n", o.unread())
	case o != nil:
		// Ready: it serves what it read before, each answer saying so.
		fmt.Fprintf(w, "ok, degraded: %s; answers come from what was read before\n", o.stale())
	default:
		w.Write([]byte("ok\n"))
	}
}

// setSecurityHeaders sets the headers every response carries.
func setSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// authorized reports whether r carries the token (always, without one).
func (s *Server) authorized(r *http.Request) bool {
	if s.opts.AuthToken == "" {
		return true
	}
	if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") && s.tokenOK(tok) {
		return true
	}
	c, err := r.Cookie(cookieName)
	return err == nil && s.tokenOK(c.Value)
}

// tokenOK compares tok with the token in constant time (of their hashes,
// so that not even the length leaks).
func (s *Server) tokenOK(tok string) bool {
	h := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(h[:], s.tokenHash[:]) == 1
}

// login answers GET /?token=TOKEN: the right token is set as a cookie and
// the browser sent back to /, so that the token leaves the address bar and
// the history.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if !s.tokenOK(r.URL.Query().Get("token")) {
		writeError(w, http.StatusUnauthorized, "unauthorized: wrong token", "token")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.opts.AuthToken, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// errorBody is the JSON of every error response.
type errorBody struct {
	Error string `json:"error"`
	// Param names the bad parameter of a 400.
	Param string `json:"param,omitempty"`
}

func writeError(w http.ResponseWriter, status int, msg, param string) {
	b, _ := json.Marshal(errorBody{Error: msg, Param: param}) // strings always encode
	h := w.Header()
	h.Set("Content-Type", jsonType)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// serveAPI runs an endpoint and sends its reply or its error.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, ep endpoint) {
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	rep := &reply{limit: int(s.opts.MaxResponseBytes)}
	var warnings store.Warnings
	p, err := parseParams(r, ep.params, time.Now())
	o := s.outage()
	if err == nil && o != nil && o.Listed.IsZero() {
		writeError(w, http.StatusServiceUnavailable, o.unread(), "")
		return
	}
	if err == nil {
		warnings, err = ep.run(ctx, p, rep)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", rep.contentType)
	h.Set("Content-Length", strconv.Itoa(len(rep.body)))
	h.Set("Cache-Control", "no-store")
	if rep.filename != "" {
		h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", rep.filename))
	}
	if o := s.outage(); o != nil {
		h.Add("Warning", warningValue(o.stale()))
	}
	// Two recorders under one node name, shown apart: said on every
	// answer, since every figure of that node depends on it.
	notices := s.db.InstanceNotices()
	for _, n := range notices {
		h.Add("Warning", warningValue(n.Error()))
	}
	for i, warning := range warnings {
		if i+len(notices) >= maxWarnings {
			h.Add("Warning", warningValue(fmt.Sprintf("and %d more data skipped", len(warnings)-i)))
			break
		}
		if unknown := (*store.CgroupPathsUnknown)(nil); errors.As(warning, &unknown) {
			h.Add("Warning", warningValue(warning.Error()))
			continue
		}
		h.Add("Warning", warningValue("skipped unreadable data: "+warning.Error()))
	}
	w.WriteHeader(http.StatusOK)
	w.Write(rep.body)
}

// maxWarnings bounds the Warning headers of one response.
const maxWarnings = 10

// warningValue formats a Warning header (RFC 7234: code 199, agent,
// quoted text), keeping to printable ASCII.
func warningValue(text string) string {
	var b strings.Builder
	b.WriteString(`199 heatscope "`)
	for _, c := range []byte(text) {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < ' ' || c >= 0x7f:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// fail sends err as an error response: 400 naming the parameter for bad
// parameters, 413 for responses too large, 503 for queries out of time or
// storage that does not answer, and 500 for the rest, whose details go to
// the log only.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var pe *query.ParamError
	switch {
	case errors.As(err, &pe):
		writeError(w, http.StatusBadRequest, pe.Error(), pe.Param)
	case errors.Is(err, errTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"response too large (more than %d bytes): narrow the range or add filters", s.opts.MaxResponseBytes), "")
	case r.Context().Err() != nil:
		// The client went away (or the server is stopping): nobody reads this.
		s.log.Debug("request cancelled", "url", r.URL.String(), "err", err)
		writeError(w, http.StatusServiceUnavailable, "request cancelled", "")
	case errors.Is(err, store.ErrUnavailable):
		// The storage (a bucket) did not answer: say which, with no
		// more of the error than the store put in it (never credentials).
		s.log.Warn("request failed: storage unavailable", "url", r.URL.Path, "err", err)
		writeError(w, http.StatusServiceUnavailable, err.Error(), "")
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf(
			"the query took longer than %v: narrow the range or add filters", queryTimeout), "")
	default:
		s.log.Error("request failed", "url", r.URL.String(), "err", err)
		writeError(w, http.StatusInternalServerError, "internal error", "")
	}
}

// Serve serves HTTP on ln until ctx is done, then shuts down: requests
// under way get a few seconds to finish, then are cancelled. It returns
// once every request has returned, so the store can then be closed.
//
// On a loopback address without an auth token only requests addressed to
// a loopback name (localhost, 127.0.0.1, [::1]) are answered, which stops
// DNS-rebinding pages from reading the API through a browser; on any
// other address without a token it logs a warning.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	loopback := false
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		loopback = a.IP.IsLoopback()
	}
	var h http.Handler = http.HandlerFunc(s.serveHTTP)
	if b := s.opts.Busy; b != nil {
		next := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" && r.URL.Path != "/healthz" {
				b.Enter()
				defer b.Leave()
			}
			next.ServeHTTP(w, r)
		})
	}
	switch {
	case s.opts.AuthToken != "":
	case loopback:
		h = loopbackHostsOnly(h)
	default:
		s.log.Warn("SERVING WITHOUT AUTHENTICATION on a non-loopback address: anyone who can reach it can read "+
			"every recorded process's stacks and commands; set an auth token (--auth-token)", "addr", ln.Addr().String())
	}
	g := &gate{}
	g.cond = sync.NewCond(&g.mu)
	baseCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{
		Handler:           g.wrap(h),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.log.Info("serving the heatscope API", "url", "http://"+ln.Addr().String()+"/")
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var err error
	select {
	case err = <-served:
		err = fmt.Errorf("web server: %w", err)
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		if srv.Shutdown(shutdownCtx) != nil {
			cancelRequests()
			srv.Close()
		}
		cancel()
		<-served
	}
	cancelRequests()
	g.close()
	return err
}

// loopbackHostsOnly refuses requests whose Host is not a loopback name.
func loopbackHostsOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		host = strings.ToLower(strings.Trim(host, "[]"))
		ip := net.ParseIP(host)
		if host == "localhost" || strings.HasSuffix(host, ".localhost") || ip != nil && ip.IsLoopback() {
			next.ServeHTTP(w, r)
			return
		}
		setSecurityHeaders(w.Header())
		writeError(w, http.StatusForbidden, fmt.Sprintf("host %q refused: without an auth token this server answers only "+
			"requests addressed to localhost (against DNS rebinding); open it as http://localhost:PORT/ or set an auth token", r.Host), "")
	})
}

// gate counts the requests under way, so that Serve can wait for them.
type gate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	n      int
	closed bool
}

func (g *gate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			setSecurityHeaders(w.Header())
			writeError(w, http.StatusServiceUnavailable, "the server is stopping", "")
			return
		}
		g.n++
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			g.n--
			g.cond.Broadcast()
			g.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}

// close refuses new requests and waits for those under way.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for g.n > 0 {
		g.cond.Wait()
	}
}
