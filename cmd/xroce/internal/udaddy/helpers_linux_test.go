//go:build linux

package udaddy

import (
	"context"
	"io"
	"testing"

	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
)

// runIn, startServer, testCmatest and runCmd are clitest's and cmtest's runners for
// xroce udaddy.

func runIn(ctx context.Context, h *netns.Host, args ...string) <-chan clitest.Result {
	return clitest.RunIn(ctx, h, Cmd, args...)
}

func startServer(t *testing.T, h *netns.Host, listened <-chan struct{}, args ...string) (res <-chan clitest.Result, stop func()) {
	t.Helper()
	return cmtest.StartServer(t, h, listened, Cmd, args...)
}

func testCmatest(t *testing.T, p *netns.Pair, tool string, cases []cmtest.CmatestCase) {
	t.Helper()
	if tool != Cmd.Name {
		t.Fatalf("testCmatest(%q): this is %s's test", tool, Cmd.Name)
	}
	cmtest.TestCmatest(t, p, Cmd, cases)
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cmtest.Run(ctx, Cmd, args, stdout, stderr)
}
