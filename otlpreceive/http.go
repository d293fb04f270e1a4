package otlpreceive

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Content types of OTLP/HTTP.
const (
	contentProtobuf = "application/x-protobuf"
	contentJSON     = "application/json"
)

// HTTPHandler serves OTLP/HTTP profiles at HTTPPath (POST, protobuf or
// JSON, plain or gzip), as the Collector's OTLP receiver does; every other
// path is 404.
func (r *Receiver) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(HTTPPath, r.serveHTTP)
	return mux
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if ct != contentJSON {
		ct = contentProtobuf // the errors of a request of no known type are protobuf, as OTLP's
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeHTTPError(w, ct, http.StatusMethodNotAllowed, codes.Unimplemented, fmt.Sprintf("%s %s: profiles are POSTed", req.Method, HTTPPath))
		return
	}
	if !r.authorized(req.Header.Get("Authorization")) {
		e := r.refuse(refUnauthenticated, "unauthorized: send the token as \"Authorization: Bearer TOKEN\"")
		r.count(e, req.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="heatscope"`)
		writeHTTPError(w, ct, http.StatusUnauthorized, codes.Unauthenticated, e.msg)
		return
	}
	if got, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); got != contentProtobuf && got != contentJSON {
		writeHTTPError(w, ct, http.StatusUnsupportedMediaType, codes.InvalidArgument,
			fmt.Sprintf("Content-Type %q: send %s or %s", truncate(req.Header.Get("Content-Type"), 80), contentProtobuf, contentJSON))
		return
	}
	release, busy := r.acquire()
	if busy != nil {
		r.count(busy, req.RemoteAddr)
		r.writeRefusal(w, ct, busy)
		return
	}
	defer release()
	body, e := r.readBody(w, req)
	if e != nil {
		r.requests.Add(1)
		r.count(e, req.RemoteAddr)
		r.writeRefusal(w, ct, e)
		return
	}
	exp := pprofileotlp.NewExportRequest()
	var err error
	if ct == contentJSON {
		err = exp.UnmarshalJSON(body)
	} else {
		err = exp.UnmarshalProto(body)
	}
	if err != nil {
		r.requests.Add(1)
		e := r.refuse(refInvalid, "malformed %s request: %v", ct, err)
		r.count(e, req.RemoteAddr)
		r.writeRefusal(w, ct, e)
		return
	}
	res, e := r.ingest(req.Context(), exp.Profiles())
	if e != nil {
		r.count(e, req.RemoteAddr)
		r.writeRefusal(w, ct, e)
		return
	}
	resp := res.response()
	var out []byte
	if ct == contentJSON {
		out, err = resp.MarshalJSON()
	} else {
		out, err = resp.MarshalProto()
	}
	if err != nil {
		writeHTTPError(w, ct, http.StatusInternalServerError, codes.Internal, "encoding the response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(http.StatusOK)
	w.Write(out)
}

// readBody reads the request's body, uncompressed, within
// MaxRequestBytes (compressed and uncompressed).
func (r *Receiver) readBody(w http.ResponseWriter, req *http.Request) ([]byte, *refusal) {
	limit := int64(r.opts.MaxRequestBytes)
	if req.ContentLength > limit {
		return nil, r.refuse(refTooLarge, "request of %d bytes: the limit is %d", req.ContentLength, limit)
	}
	var src io.Reader = http.MaxBytesReader(w, req.Body, limit)
	switch enc := strings.ToLower(strings.TrimSpace(req.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, r.tooLargeOr(err, "gzip body: %v", err)
		}
		defer zr.Close()
		src = zr
	default:
		return nil, r.refuse(refInvalid, "Content-Encoding %q: send gzip or none", truncate(enc, 40))
	}
	body, err := io.ReadAll(io.LimitReader(src, limit+1))
	if err != nil {
		return nil, r.tooLargeOr(err, "reading the body: %v", err)
	}
	if int64(len(body)) > limit {
		return nil, r.refuse(refTooLarge, "request of more than %d bytes uncompressed: the limit is %d", limit, limit)
	}
	return body, nil
}

// tooLargeOr is a too-large refusal when err says the body passed the
// limit, else an invalid one.
func (r *Receiver) tooLargeOr(err error, format string, args ...any) *refusal {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return r.refuse(refTooLarge, "request of more than %d bytes: the limit is %d", mbe.Limit, mbe.Limit)
	}
	return r.refuse(refInvalid, format, args...)
}

// statusClientClosedRequest is the HTTP status of a request its sender
// gave up on (no standard one; nginx's, which access logs know).
const statusClientClosedRequest = 499

// httpStatus is a refusal's HTTP status and gRPC code.
func httpStatus(e *refusal) (int, codes.Code) {
	switch e.kind {
	case refTooLarge:
		return http.StatusRequestEntityTooLarge, codes.ResourceExhausted
	case refRateLimited, refBusy:
		return http.StatusTooManyRequests, codes.ResourceExhausted
	case refUnauthenticated:
		return http.StatusUnauthorized, codes.Unauthenticated
	case refConflict:
		return http.StatusConflict, codes.FailedPrecondition
	case refStore:
		return http.StatusServiceUnavailable, codes.Unavailable
	case refCancelled:
		// No one reads it: the sender has gone.
		return statusClientClosedRequest, codes.Canceled
	default:
		return http.StatusBadRequest, codes.InvalidArgument
	}
}

func (r *Receiver) writeRefusal(w http.ResponseWriter, ct string, e *refusal) {
	st, code := httpStatus(e)
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.retryAfter.Seconds()))))
	}
	writeHTTPError(w, ct, st, code, e.msg)
}

// writeHTTPError answers with a google.rpc.Status, as OTLP/HTTP does, in
// the request's encoding.
func writeHTTPError(w http.ResponseWriter, ct string, httpCode int, code codes.Code, msg string) {
	st := status.New(code, msg).Proto()
	var body []byte
	if ct == contentJSON {
		body, _ = protojson.Marshal(st)
	} else {
		body, _ = proto.Marshal(st)
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(httpCode)
	w.Write(body)
}
