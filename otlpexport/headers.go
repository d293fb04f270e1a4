package otlpexport

import (
	"fmt"
	"io"
	"net/url"
	"strings"
)

// maxHeaderBytes bounds a headers file and a headers variable.
const maxHeaderBytes = 64 << 10

// ParseHeaderFile reads the headers sent with each export from a file of
// "Name: value" lines (blank lines and lines starting with # are left
// out), as an HTTP request writes them, e.g. "Authorization: Bearer
// TOKEN". Names are checked as HTTP field names; an error names the line,
// never its value, which may be a credential.
func ParseHeaderFile(r io.Reader) (map[string]string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxHeaderBytes+1))
	if err != nil {
		return nil, fmt.Errorf("headers file: %w", err)
	}
	if len(b) > maxHeaderBytes {
		return nil, fmt.Errorf("headers file: more than %d bytes", maxHeaderBytes)
	}
	headers := map[string]string{}
	for i, text := range strings.Split(string(b), "\n") {
		text = strings.TrimSpace(text)
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, value, ok := strings.Cut(text, ":")
		if !ok {
			return nil, fmt.Errorf("headers file line %d: want Name: value", i+1)
		}
		if err := addHeader(headers, strings.TrimSpace(name), strings.TrimSpace(value)); err != nil {
			return nil, fmt.Errorf("headers file line %d: %w", i+1, err)
		}
	}
	return headers, nil
}

// ParseHeaderList reads headers in the form of OpenTelemetry's
// OTEL_EXPORTER_OTLP_HEADERS variable: comma-separated name=value pairs,
// values percent-encoded ("Authorization=Bearer%20TOKEN"). An error names
// the pair by its position, never its value.
func ParseHeaderList(s string) (map[string]string, error) {
	if len(s) > maxHeaderBytes {
		return nil, fmt.Errorf("headers: more than %d bytes", maxHeaderBytes)
	}
	headers := map[string]string{}
	for i, pair := range strings.Split(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("headers: pair %d: want name=value", i+1)
		}
		decoded, err := url.PathUnescape(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("headers: pair %d: the value is not percent-encoded", i+1)
		}
		if err := addHeader(headers, strings.TrimSpace(name), decoded); err != nil {
			return nil, fmt.Errorf("headers: pair %d: %w", i+1, err)
		}
	}
	return headers, nil
}

// addHeader checks a header and adds it, its name in lower case (gRPC's
// metadata keys are; HTTP's are case-insensitive).
func addHeader(headers map[string]string, name, value string) error {
	if name == "" {
		return fmt.Errorf("empty name")
	}
	for _, c := range []byte(name) {
		if !isTokenChar(c) {
			return fmt.Errorf("name %q: not an HTTP field name", name)
		}
	}
	for _, c := range []byte(value) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("header %s: a control character in its value", name)
		}
	}
	key := strings.ToLower(name)
	if _, dup := headers[key]; dup {
		return fmt.Errorf("header %s given twice", name)
	}
	headers[key] = value
	return nil
}

// isTokenChar reports whether c may be in an HTTP field name (RFC 9110's
// tchar).
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
