package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "0123456789abcdef0123"}
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"none", nil, "devel"},
		{"a module version", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{rev}}, "v1.2.3"},
		{"a checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{rev}}, "0123456789ab"},
		{"a modified checkout", &debug.BuildInfo{Settings: []debug.BuildSetting{rev, {Key: "vcs.modified", Value: "true"}}}, "0123456789ab+dirty"},
		{"no vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
	} {
		if got := fromBuildInfo(c.bi); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestStampWins(t *testing.T) {
	defer func(s string) { stamp = s }(stamp)
	stamp = "v9.9.9-test"
	if got := Version(); got != stamp {
		t.Fatalf("Version() = %q with a stamp %q", got, stamp)
	}
}
