//go:build linux

package cli

import (
	"context"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/netns"
)

// runIn runs the xroce command that args[0] names, with args, inside h's
// namespace, in the background: clitest.RunIn for the tests of the tools
// still in this package, which name their commands.
func runIn(ctx context.Context, h *netns.Host, args ...string) <-chan clitest.Result {
	return clitest.RunIn(ctx, h, testCommand(args), args...)
}

// clientServer is clitest.ClientServer for the command that server[0]
// names.
func clientServer(t *testing.T, p *netns.Pair, port int, server, client []string) (rs, rc clitest.Result) {
	t.Helper()
	return clitest.ClientServer(t, p, port, testCommand(server), server, client)
}

// cmServerClient is cmServerClientCmd for the commands that server[0]
// and client[0] name.
func cmServerClient(t *testing.T, p *netns.Pair, server, client []string, linger time.Duration) (rs, rc clitest.Result) {
	t.Helper()
	return cmServerClientCmd(t, p, testCommand(server), server, testCommand(client), client, linger)
}

// startServer is startServerCmd for the command that args[0] names.
func startServer(t *testing.T, h *netns.Host, listened <-chan struct{}, args ...string) (res <-chan clitest.Result, stop func()) {
	t.Helper()
	return startServerCmd(t, h, listened, testCommand(args), args...)
}

// testCmatest is testCmatestCmd for the command that tool names.
func testCmatest(t *testing.T, p *netns.Pair, tool string, cases []cmatestCase) {
	t.Helper()
	testCmatestCmd(t, p, testCommand([]string{tool}), cases)
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
