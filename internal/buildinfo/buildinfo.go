// Package buildinfo says which heatscope a binary is: the version
// `make build` stamps in (`git describe`), the commit and whether the tree
// had uncommitted changes, the Go release and the build tags, as the Go
// toolchain records them in the binary.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version and commit are set at link time by `make build`:
//
//	go build -ldflags "-X github.com/heatscope/heatscope/internal/buildinfo.version=$(git describe --tags --always --dirty) \
//	  -X github.com/heatscope/heatscope/internal/buildinfo.commit=$(git rev-parse HEAD)"
//
// Without them, what the Go toolchain stamped is used: the module version
// and vcs.revision (which it leaves out under -buildvcs=false and in a
// git worktree).
var version, commit string

// Info describes one build.
type Info struct {
	// Version is the stamped version, else the main module's version as
	// the Go toolchain recorded it ("(devel)" when it knew none).
	Version string
	// Commit is the VCS revision the binary was built from ("" when the
	// build did not record one, e.g. go build -buildvcs=false).
	Commit string
	// Modified is true when the working tree had uncommitted changes.
	Modified bool
	// GoVersion is the Go release that built the binary.
	GoVersion string
	// Tags are the build tags (-tags), empty for the default build.
	Tags []string
}

// Read returns this binary's build information.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi, version, commit)
}

// fromBuildInfo reads Info from what the toolchain recorded (nil when it
// recorded nothing) and the link-time version and commit ("" when not
// given).
func fromBuildInfo(bi *debug.BuildInfo, stampedVersion, stampedCommit string) Info {
	info := fromToolchain(bi, stampedVersion)
	if stampedCommit != "" {
		info.Commit = stampedCommit
		info.Modified = strings.HasSuffix(stampedVersion, "-dirty")
	}
	return info
}

// fromToolchain reads Info from what the toolchain recorded.
func fromToolchain(bi *debug.BuildInfo, stampedVersion string) Info {
	info := Info{Version: stampedVersion, GoVersion: runtime.Version()}
	if bi == nil {
		if info.Version == "" {
			info.Version = "(unknown)"
		}
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if info.Version == "" {
		info.Version = bi.Main.Version
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		case "-tags":
			for _, t := range strings.Split(s.Value, ",") {
				if t = strings.TrimSpace(t); t != "" {
					info.Tags = append(info.Tags, t)
				}
			}
		}
	}
	return info
}

// String is the information on one line per item, as `heatscope
// version` prints it.
func (i Info) String() string {
	commit := i.Commit
	switch {
	case commit == "":
		commit = "unknown (built without version control information)"
	case i.Modified:
		commit += " (with uncommitted changes)"
	}
	tags := strings.Join(i.Tags, ",")
	if tags == "" {
		tags = "none (s3 and filesystem object stores only)"
	}
	return fmt.Sprintf("heatscope %s\ncommit:     %s\ngo:         %s\nbuild tags: %s\n", i.Version, commit, i.GoVersion, tags)
}
