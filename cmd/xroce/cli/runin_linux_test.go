//go:build linux

package cli

import (
	"context"
	"testing"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
)

// runIn runs the xroce command that args[0] names, with args, inside h's
// namespace, in the background: clitest.RunIn for the tests in this
// package (perf, conform, the CM clones together), which name their commands.
func runIn(ctx context.Context, h *netns.Host, args ...string) <-chan clitest.Result {
	return clitest.RunIn(ctx, h, testCommand(args), args...)
}

// clientServer is clitest.ClientServerOf for the commands that server[0]
// and client[0] name (conform's tests run perf as the server).
func clientServer(t *testing.T, p *netns.Pair, port int, server, client []string) (rs, rc clitest.Result) {
	t.Helper()
	return clitest.ClientServerOf(t, p, port, testCommand(server), server, testCommand(client), client)
}

// startServer is cmtest.StartServer for the command that args[0] names.
func startServer(t *testing.T, h *netns.Host, listened <-chan struct{}, args ...string) (res <-chan clitest.Result, stop func()) {
	t.Helper()
	return cmtest.StartServer(t, h, listened, testCommand(args), args...)
}

// testCommand is the command that args[0] names; for an unknown name or
// none, a command of no name, which the clitest runners refuse to run.
func testCommand(args []string) base.Command {
	if len(args) > 0 {
		if c := lookup(args[0]); c != nil {
			return *c
		}
	}
	return base.Command{}
}
