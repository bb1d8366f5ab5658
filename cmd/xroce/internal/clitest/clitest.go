// Package clitest holds what the tests of xroce's tool packages share: running
// a command as the xroce binary would, without a process, also inside a
// network namespace or as a server and its client in two (netns_linux.go);
// the race detector's stretch of their deadlines; RoCE frames and pcap files
// made for a test, the real captures in bth/testdata, and dump's summary line
// read back (frames.go, summary.go); perf's result and congestion control
// lines (perf.go).
package clitest

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"testing"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

// Run runs cmd with args, which start with the command's name as on the
// xroce command line (xroce stat --dir D is Run(t, stat.Cmd, "stat",
// "--dir", D)), and returns what it printed and its error as cli.Run
// returns it: -h's flag.ErrHelp is no error.
func Run(t testing.TB, cmd base.Command, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	if len(args) == 0 || args[0] != cmd.Name {
		t.Fatalf("clitest.Run(%s, %q): the arguments must start with the command's name", cmd.Name, args)
	}
	var o, e bytes.Buffer
	err = cmd.Run(context.Background(), &base.Env{Stdout: &o, Stderr: &e}, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		err = nil
	}
	return o.String(), e.String(), err
}
