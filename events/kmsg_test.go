package events

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseKmsg(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want KmsgRecord
	}{
		{"6,339,5140900,-;NET: Registered PF_INET6 protocol family\n",
			KmsgRecord{Facility: 0, Level: Info, Seq: 339, Monotonic: 5140900000, Flag: '-', Text: "NET: Registered PF_INET6 protocol family"}},
		{"4,1234,7023410589,-,caller=T42;ena 0000:00:05.0 eth0: Device reset completed successfully\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:05.0\n",
			KmsgRecord{Facility: 0, Level: Warning, Seq: 1234, Monotonic: 7023410589000, Flag: '-',
				Text: "ena 0000:00:05.0 eth0: Device reset completed successfully",
				Dict: map[string]string{"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:00:05.0"}}},
		{"12,7,0,c;first part", KmsgRecord{Facility: 1, Level: Warning, Seq: 7, Flag: 'c', Text: "first part"}},
		{`3,8,1,+;x\x1by; semi;colons`, KmsgRecord{Level: Err, Seq: 8, Monotonic: 1000, Flag: '+', Text: `x\x1by; semi;colons`}},
		{"6,9,1,-;", KmsgRecord{Level: Info, Seq: 9, Monotonic: 1000, Flag: '-'}},
	} {
		got, err := ParseKmsg([]byte(tc.in))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseKmsg(%q) = %+v, %v\nwant %+v", tc.in, got, err, tc.want)
		}
	}
	for in, want := range map[string]string{
		"no header":                    "no ';'",
		"6,1,2;text":                   "3 fields",
		"x,1,2,-;text":                 "prio",
		"6,-1,2,-;text":                "seq",
		"6,1,99999999999999999999,-;t": "usec",
		"6,1,2,--;text":                "flags",
	} {
		if _, err := ParseKmsg([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseKmsg(%q): %v, want an error about %s", in, err, want)
		}
	}
	long := "6,1,2,-;" + strings.Repeat("é", MaxTextLen) + "\n"
	if r, err := ParseKmsg([]byte(long)); err != nil || len(r.Text) > MaxTextLen || !strings.HasSuffix(r.Text, "é") {
		t.Errorf("long text: %d bytes, %v", len(r.Text), err)
	}
}

func FuzzParseKmsg(f *testing.F) {
	f.Add([]byte("6,339,5140900,-;NET: Registered PF_INET6 protocol family\n"))
	f.Add([]byte("4,1234,7023410589,-,caller=T42;ena 0000:00:05.0 eth0: Device reset\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:05.0\n"))
	f.Add([]byte("12,7,0,c;first part"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseKmsg(b)
		if err != nil {
			return
		}
		e := KmsgEvent(&r, 1, "p")
		if r.Text == "" {
			return
		}
		// Whatever the kernel sent, the event it makes is valid.
		if err := e.Validate(); err != nil {
			t.Fatalf("event from %q is invalid: %v", b, err)
		}
	})
}
