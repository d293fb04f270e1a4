package container

import (
	"slices"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics and that what it returns is
// well formed and really in the path. Seeds: testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid_ + ".slice/cri-containerd-" + id1 + ".scope")
	f.Add("/kubepods/burstable/pod" + uid + "/" + id1)
	f.Add("/docker/" + id1)
	f.Fuzz(func(t *testing.T, path string) {
		in := Parse(path)
		if in.ID != "" && (!isContainerID(in.ID) || !strings.Contains(path, in.ID)) {
			t.Errorf("Parse(%q): container id %q is malformed or not in the path", path, in.ID)
		}
		if in.ID == "" && in.Runtime != "" {
			t.Errorf("Parse(%q): runtime %q without a container", path, in.Runtime)
		}
		if !slices.Contains([]string{"", Containerd, CRIO, Docker, Podman}, in.Runtime) {
			t.Errorf("Parse(%q): unknown runtime %q", path, in.Runtime)
		}
		if !slices.Contains([]string{"", Guaranteed, Burstable, BestEffort}, in.QoS) {
			t.Errorf("Parse(%q): unknown QoS class %q", path, in.QoS)
		}
		if in.PodUID != "" {
			if u, ok := podUID(in.PodUID); !ok || u != in.PodUID {
				t.Errorf("Parse(%q): malformed pod UID %q", path, in.PodUID)
			}
			lower := strings.ToLower(path)
			if !strings.Contains(lower, in.PodUID) && !strings.Contains(lower, strings.ReplaceAll(in.PodUID, "-", "_")) {
				t.Errorf("Parse(%q): pod UID %q is not in the path", path, in.PodUID)
			}
			if in.QoS == "" {
				t.Errorf("Parse(%q): a pod without a QoS class", path)
			}
		}
		// Empty segments do not matter: a doubled or missing leading
		// slash reads the same.
		if again := Parse("/" + path); again != in {
			t.Errorf("Parse(%q) = %+v but with a leading slash %+v", path, in, again)
		}
	})
}
