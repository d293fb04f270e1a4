package store_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/heatscope/heatscope/store"
)

func TestDefaultNodeName(t *testing.T) {
	noID := func() ([]byte, error) { return nil, errors.New("no such file") }
	noAddrs := func() ([]net.Addr, error) { return nil, nil }
	addrs := func(s ...string) func() ([]net.Addr, error) {
		return func() ([]net.Addr, error) {
			var out []net.Addr
			for _, a := range s {
				ip, n, err := net.ParseCIDR(a)
				if err != nil {
					t.Fatal(err)
				}
				n.IP = ip
				out = append(out, n)
			}
			return out, nil
		}
	}
	host := func(h string) func() (string, error) { return func() (string, error) { return h, nil } }
	id := func(s string) func() ([]byte, error) { return func() ([]byte, error) { return []byte(s), nil } }
	for _, c := range []struct {
		name      string
		src       store.NodeNameSource
		want, why string
	}{
		{"hostname", store.NodeNameSource{Hostname: host("ip-10-0-1-7"), MachineID: id("3d1219c7c4c5404aaa1f6d2a48adfda4\n"), Addrs: noAddrs}, "ip-10-0-1-7", "the hostname"},
		{"(none) takes the machine id", store.NodeNameSource{Hostname: host("(none)"), MachineID: id("3D1219C7C4C5404AAA1F6D2A48ADFDA4\n"), Addrs: noAddrs}, "machine-3d1219c7c4c5404a", `the hostname is "(none)", so the machine id`},
		{"empty hostname", store.NodeNameSource{Hostname: host(""), MachineID: id("3d1219c7c4c5404aaa1f6d2a48adfda4"), Addrs: noAddrs}, "machine-3d1219c7c4c5404a", `the hostname is ""`},
		{"localhost", store.NodeNameSource{Hostname: host("localhost"), MachineID: id("3d1219c7c4c5404aaa1f6d2a48adfda4"), Addrs: noAddrs}, "machine-3d1219c7c4c5404a", `"localhost"`},
		{"no machine id: the first non-loopback address", store.NodeNameSource{Hostname: host("(none)"), MachineID: noID, Addrs: addrs("127.0.0.1/8", "fe80::1/64", "10.0.2.15/24", "10.0.3.1/24")}, "ip-10-0-2-15", "first non-loopback address"},
		{"a malformed machine id is not taken", store.NodeNameSource{Hostname: host("(none)"), MachineID: id("uninitialized\n"), Addrs: addrs("2001:db8::7/64")}, "ip-2001-db8--7", "no machine id"},
		{"hostname unreadable", store.NodeNameSource{Hostname: func() (string, error) { return "", errors.New("EPERM") }, MachineID: id("3d1219c7c4c5404aaa1f6d2a48adfda4"), Addrs: noAddrs}, "machine-3d1219c7c4c5404a", "cannot be read (EPERM)"},
	} {
		got, why, err := c.src.DefaultNodeName()
		if err != nil || got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%s: DefaultNodeName() = %q, %q, %v; want %q, a why containing %q", c.name, got, why, err, c.want, c.why)
		}
	}
	_, _, err := store.NodeNameSource{Hostname: host("(none)"), MachineID: noID, Addrs: addrs("127.0.0.1/8")}.DefaultNodeName()
	if err == nil || !strings.Contains(err.Error(), `the hostname is "(none)"`) || !strings.Contains(err.Error(), "--node") {
		t.Errorf("no name at all: %v, want an error naming the hostname and --node", err)
	}
}
