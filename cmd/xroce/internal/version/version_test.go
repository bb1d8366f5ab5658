package version

import (
	"bytes"
	"context"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

// versionShape is the line's form: name, version, optional details in
// parentheses, Go version, OS/architecture.
var versionShape = regexp.MustCompile(`^xroce v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?( \([^()]+\))? go\S+ [a-z0-9]+/[a-z0-9]+$`)

func TestVersionLine(t *testing.T) {
	rev := "a7face2c1d2e3f405162738495a6b7c8d9e0f1a2"
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		want string // the part between Version and the Go version
	}{
		{"no build info", nil, ""},
		{"devel, no VCS", &debug.BuildInfo{GoVersion: "go1.25.0", Main: debug.Module{Version: "(devel)"}}, ""},
		{"clone, clean", &debug.BuildInfo{GoVersion: "go1.25.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-12-02T10:00:00Z"},
			{Key: "vcs.modified", Value: "false"}}}, " (rev a7face2c1d2e, 2026-12-02T10:00:00Z)"},
		{"clone, modified, pseudo-version", &debug.BuildInfo{GoVersion: "go1.25.0",
			Main: debug.Module{Version: "v0.0.0-20261202100000-a7face2c1d2e+dirty"}, Settings: []debug.BuildSetting{
				{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}},
			" (module v0.0.0-20261202100000-a7face2c1d2e+dirty, rev a7face2c1d2e, modified)"},
		{"go install at this version", &debug.BuildInfo{GoVersion: "go1.25.0", Main: debug.Module{Version: Version}}, ""},
		{"go install at a tag", &debug.BuildInfo{GoVersion: "go1.25.0", Main: debug.Module{Version: "v9.8.7"}}, " (module v9.8.7)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := versionLine(tt.bi)
			goVersion := runtime.Version()
			if tt.bi != nil {
				goVersion = tt.bi.GoVersion
			}
			want := "xroce " + Version + tt.want + " " + goVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
			if got != want {
				t.Errorf("versionLine = %q, want %q", got, want)
			}
			if !versionShape.MatchString(got) {
				t.Errorf("versionLine = %q, not of the form %v", got, versionShape)
			}
		})
	}
}

// TestVersionCommand runs the command as a user does, with the test
// binary's own build information: its revision, when the build recorded
// one, is on the line. (cli's TestVersionAliases runs --version and -V.)
func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"version", "-m"}} {
		var out, errOut bytes.Buffer
		if err := Cmd.Run(context.Background(), &base.Env{Stdout: &out, Stderr: &errOut}, args[1:]); err != nil {
			t.Fatalf("xroce %v: %v (%s)", args, err, errOut.String())
		}
		first, rest, _ := strings.Cut(out.String(), "\n")
		if !versionShape.MatchString(first) {
			t.Errorf("xroce %v: first line %q, not of the form %v", args, first, versionShape)
		}
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			continue
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && !strings.Contains(first, "rev "+s.Value[:min(len(s.Value), 12)]) {
				t.Errorf("xroce %v: %q lacks the build's revision %s", args, first, s.Value)
			}
		}
		if args[len(args)-1] == "-m" && !strings.Contains(rest, "path\t") {
			t.Errorf("xroce %v: no module build information after the first line:\n%s", args, rest)
		}
	}
	if err := Cmd.Run(context.Background(), &base.Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}, []string{"extra"}); base.ExitCode(err) != 2 {
		t.Errorf("xroce version extra: %v, want a usage error", err)
	}
}
