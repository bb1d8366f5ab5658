// Package version is xroce version: the version, the commit and the Go
// toolchain the binary was built from.
package version

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

// Version is xroce's version, in the form of a module version (semantic
// versioning with a leading v). A release sets it to the tag it is about
// to get (v0.1.0); the commit after the release moves it on to the next
// version with -dev. This is the one line a release changes.
const Version = "v0.1.0-dev"

// Cmd is xroce version.
var Cmd = base.Command{Name: "version", Summary: "print the version, the commit and the Go toolchain it was built from", Run: runVersion}

const versionAbout = `
Print xroce's version, the commit it was built from (when the build had
the version control information: built from a clone with go build or go
install), whether the work tree had uncommitted changes, the Go version
that built it and the target OS and architecture, on one line:

  xroce v0.1.0 (rev 0123456789ab, 2026-12-02T10:00:00Z, modified) go1.25.0 linux/amd64

A binary installed with go install .../cmd/xroce@VERSION says the
module's version in parentheses when it differs from the one xroce
names itself. -m adds the module build information as go version -m
prints it: the module paths, versions and checksums of every dependency
and the build settings. 'xroce --version' and 'xroce -V' are the same
as 'xroce version'.`

func runVersion(_ context.Context, e *base.Env, args []string) error {
	fs := base.NewFlagSet(e, "version", "[-m]", versionAbout, "  xroce version\n  xroce version -m")
	mods := fs.Bool("m", false, "also print the module build information (dependencies, build settings), as go version -m")
	if err := base.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return base.Usagef("version: unexpected argument %q", fs.Arg(0))
	}
	bi, _ := debug.ReadBuildInfo() // nil without build information
	fmt.Fprintln(e.Stdout, versionLine(bi))
	if *mods && bi != nil {
		fmt.Fprint(e.Stdout, bi.String())
	}
	return nil
}

// versionLine is the line `xroce version` prints for a binary with build
// information bi (nil when it has none).
func versionLine(bi *debug.BuildInfo) string {
	var b strings.Builder
	b.WriteString("xroce " + Version)
	goVersion := runtime.Version()
	if bi != nil {
		var details []string
		// go install ...@v0.1.0 stamps the module's version; go build in
		// a clone stamps "(devel)" or, from Go 1.24 on, a pseudo-version
		// made of the commit: said only when it adds something.
		if v := bi.Main.Version; v != "" && v != "(devel)" && v != Version {
			details = append(details, "module "+v)
		}
		var rev, when string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" {
			details = append(details, "rev "+rev[:min(len(rev), 12)])
		}
		if when != "" {
			details = append(details, when)
		}
		if modified {
			details = append(details, "modified")
		}
		if len(details) > 0 {
			b.WriteString(" (" + strings.Join(details, ", ") + ")")
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
	}
	fmt.Fprintf(&b, " %s %s/%s", goVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}
