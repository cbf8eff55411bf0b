// Package buildinfo says which build of a program is running, for its logs:
// the version an image build stamped into it, or else what the Go toolchain
// recorded.
package buildinfo

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// stamp is set at link time by an image build (deploy/Dockerfile):
//
//	go build -ldflags="-X github.com/redmap/redmap/internal/buildinfo.stamp=$VERSION"
//
// A build from a VCS checkout needs none: Go records the revision itself.
// An image build has no .git in its context (.dockerignore), hence the stamp.
var stamp string

// Version returns the program's version: the stamp if the build set one;
// else the main module's version (go install m@v1.2.3); else its VCS
// revision, 12 hex digits, with "+dirty" if the tree was modified; else
// "devel". It costs one read of the binary's build information.
func Version() string {
	if stamp != "" {
		return stamp
	}
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) string {
	if bi == nil {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	return rev[:min(12, len(rev))] + dirty
}

// Collector returns the gauge redmap_build_info, 1, labelled with the
// program's version (Version) and Go's, as every metrics endpoint exports
// it: which build runs, on the dashboards.
func Collector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "redmap_build_info",
		Help:        "1, labelled with the program's version (an image build's stamp, the module's version or its VCS revision) and Go's.",
		ConstLabels: prometheus.Labels{"version": Version(), "goversion": runtime.Version()},
	}, func() float64 { return 1 })
}
