package store

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
)

// NodeNameSource is what DefaultNodeName chooses from: the machine's
// hostname, its machine id (/etc/machine-id) and its interface addresses.
type NodeNameSource struct {
	Hostname  func() (string, error)
	MachineID func() ([]byte, error)
	Addrs     func() ([]net.Addr, error)
}

// SystemNodeNameSource reads this machine's.
var SystemNodeNameSource = NodeNameSource{
	Hostname:  os.Hostname,
	MachineID: func() ([]byte, error) { return os.ReadFile("/etc/machine-id") },
	Addrs:     net.InterfaceAddrs,
}

// DefaultNodeName is the node name of a recorder given none: the
// hostname; on a machine without one ("", "(none)": minimal VMs and
// initramfs, or "localhost"), "machine-" and the first 16 hex digits of
// its machine id; failing that "ip-" and its first non-loopback address
// ("ip-10-0-1-7"). why says which was taken and why, for the log. A
// hostname that is not a valid node name is returned as it is: the
// caller's check names it.
func (src NodeNameSource) DefaultNodeName() (name, why string, err error) {
	host, herr := src.Hostname()
	host = strings.TrimSpace(host)
	if herr == nil && !placeholderHostname(host) {
		return host, "the hostname", nil
	}
	missing := fmt.Sprintf("the hostname is %q", host)
	if herr != nil {
		missing = fmt.Sprintf("the hostname cannot be read (%v)", herr)
	}
	if b, err := src.MachineID(); err == nil {
		if id := strings.TrimSpace(string(b)); len(id) >= 16 && isHex(id) {
			return "machine-" + strings.ToLower(id[:16]), missing + ", so the machine id (/etc/machine-id)", nil
		}
	}
	if addrs, err := src.Addrs(); err == nil {
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if ip := p.Addr().Unmap(); err == nil && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() && !ip.IsUnspecified() {
				return "ip-" + strings.NewReplacer(".", "-", ":", "-").Replace(ip.WithZone("").String()), missing + ", no machine id, so the first non-loopback address", nil
			}
		}
	}
	return "", "", fmt.Errorf("no node name: %s, and there is no machine id (/etc/machine-id) or non-loopback address; give one with --node or $NODE_NAME", missing)
}

// placeholderHostname reports a hostname that names no machine in a fleet.
func placeholderHostname(h string) bool {
	switch strings.ToLower(h) {
	case "", "(none)", "localhost", "localhost.localdomain":
		return true
	}
	return false
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// nodeNameRe is what a node name may be: it is a directory name, in a
// bucket and in a receiver's data directory.
var nodeNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$`)

// NodeNameRule says what a node name may be, for errors.
const NodeNameRule = "a node name is 1 to 253 letters, digits, '.', '_' or '-', starting with a letter or digit"

// ValidNodeName reports whether name may name a node (NodeNameRule).
func ValidNodeName(name string) bool { return nodeNameRe.MatchString(name) }
