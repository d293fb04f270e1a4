package buildinfo

import (
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// TestFromBuildInfo reads what the toolchain records: the stamped version
// wins over the module's, the commit and its modified flag, the tags.
func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261127-bfb9c42"},
		Settings: []debug.BuildSetting{{Key: "-tags", Value: "gcs,azure"}, {Key: "vcs.revision", Value: "bfb9c42aa"}, {Key: "vcs.modified", Value: "true"}}}
	got := fromBuildInfo(bi, "v1.2.3-4-gbfb9c42", "")
	want := Info{Version: "v1.2.3-4-gbfb9c42", Commit: "bfb9c42aa", Modified: true, GoVersion: "go1.26.8", Tags: []string{"gcs", "azure"}}
	if got.Version != want.Version || got.Commit != want.Commit || got.Modified != want.Modified || got.GoVersion != want.GoVersion || !slices.Equal(got.Tags, want.Tags) {
		t.Fatalf("fromBuildInfo = %+v, want %+v", got, want)
	}
	s := got.String()
	for _, w := range []string{"heatscope v1.2.3-4-gbfb9c42\n", "commit:     bfb9c42aa (with uncommitted changes)\n", "go:         go1.26.8\n", "build tags: gcs,azure\n"} {
		if !strings.Contains(s, w) {
			t.Errorf("String() = %q, want it to contain %q", s, w)
		}
	}
	if got := fromBuildInfo(bi, "", ""); got.Version != "v0.0.0-20261127-bfb9c42" {
		t.Errorf("without a stamped version: %q, want the module's", got.Version)
	}
	stamped := fromBuildInfo(bi, "v1.2.3-dirty", "0123abcd")
	if stamped.Commit != "0123abcd" || !stamped.Modified {
		t.Errorf("a commit stamped by make build: %+v, want it over vcs.revision, modified from -dirty", stamped)
	}
	if clean := fromBuildInfo(bi, "v1.2.3", "0123abcd"); clean.Modified {
		t.Errorf("a stamped clean build reads as modified: %+v", clean)
	}
	plain := fromBuildInfo(&debug.BuildInfo{}, "", "").String()
	for _, w := range []string{"heatscope (devel)\n", "commit:     unknown", "build tags: none"} {
		if !strings.Contains(plain, w) {
			t.Errorf("a build without information: %q, want %q", plain, w)
		}
	}
}
