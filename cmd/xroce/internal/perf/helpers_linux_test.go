//go:build linux

package perf

import (
	"context"
	"io"
	"testing"

	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
)

// runIn, clientServer and runCmd are clitest's and cmtest's runners for
// xroce perf.

func runIn(ctx context.Context, h *netns.Host, args ...string) <-chan clitest.Result {
	return clitest.RunIn(ctx, h, Cmd, args...)
}

func clientServer(t *testing.T, p *netns.Pair, port int, server, client []string) (rs, rc clitest.Result) {
	t.Helper()
	return clitest.ClientServer(t, p, port, Cmd, server, client)
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cmtest.Run(ctx, Cmd, args, stdout, stderr)
}
