package otlpexport

import (
	"reflect"
	"strings"
	"testing"
)

// TestParseHeaderFile: "Name: value" lines, comments and blank lines
// left out, names in lower case; an error names the line, never a value.
func TestParseHeaderFile(t *testing.T) {
	got, err := ParseHeaderFile(strings.NewReader("# the Collector's token\nAuthorization: Bearer abc:def\n\n  X-Scope-OrgID :  team-a  \n"))
	want := map[string]string{"authorization": "Bearer abc:def", "x-scope-orgid": "team-a"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	for _, c := range []struct{ in, want string }{
		{"Authorization Bearer s3cret", "line 1: want Name: value"},
		{"ok: 1\nBad Name: s3cret", "line 2: name \"Bad Name\""},
		{": s3cret", "empty name"},
		{"a: 1\nA: s3cret", "given twice"},
		{"a: s3cret\x01", "control character"},
		{"a: " + strings.Repeat("x", 70000), "more than"},
	} {
		_, err := ParseHeaderFile(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%.40q: error %v, want one saying %q and no value", c.in, err, c.want)
		}
	}
}

// TestParseHeaderList: OTEL_EXPORTER_OTLP_HEADERS's form, values
// percent-decoded; an error names the pair, never its value.
func TestParseHeaderList(t *testing.T) {
	got, err := ParseHeaderList("Authorization=Bearer%20abc%3D%3D, x-tenant=a,")
	want := map[string]string{"authorization": "Bearer abc==", "x-tenant": "a"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	for _, c := range []struct{ in, want string }{
		{"a=1,s3cret", "pair 2: want name=value"},
		{"a=%zzs3cret", "pair 1: the value is not percent-encoded"},
		{"a b=s3cret", "not an HTTP field name"},
	} {
		_, err := ParseHeaderList(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: error %v, want one saying %q and no value", c.in, err, c.want)
		}
	}
}

// FuzzParseHeaders: any input is headers or an error, never a panic; a
// header parsed has a valid name, in lower case, and a value without
// control characters.
func FuzzParseHeaders(f *testing.F) {
	f.Add("Authorization: Bearer abc\n# c\n")
	f.Add("a=b%20c,d=e")
	f.Fuzz(func(t *testing.T, in string) {
		for _, parse := range []func(string) (map[string]string, error){
			func(s string) (map[string]string, error) { return ParseHeaderFile(strings.NewReader(s)) },
			ParseHeaderList,
		} {
			h, err := parse(in)
			if err != nil {
				continue
			}
			for k, v := range h {
				if k == "" || k != strings.ToLower(k) || strings.ContainsFunc(k, func(r rune) bool { return r > 0x7e || !isTokenChar(byte(r)) }) {
					t.Fatalf("name %q", k)
				}
				if strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
					t.Fatalf("value %q", v)
				}
			}
		}
	})
}
