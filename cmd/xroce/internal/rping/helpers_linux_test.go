//go:build linux

package rping

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
)

// runIn, cmServerClient, startServer and runCmd are clitest's and
// cmtest's runners for xroce rping.

func runIn(ctx context.Context, h *netns.Host, args ...string) <-chan clitest.Result {
	return clitest.RunIn(ctx, h, Cmd, args...)
}

func cmServerClient(t *testing.T, p *netns.Pair, server, client []string, linger time.Duration) (rs, rc clitest.Result) {
	t.Helper()
	return cmtest.CMServerClient(t, p, Cmd, server, Cmd, client, linger)
}

func startServer(t *testing.T, h *netns.Host, listened <-chan struct{}, args ...string) (res <-chan clitest.Result, stop func()) {
	t.Helper()
	return cmtest.StartServer(t, h, listened, Cmd, args...)
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cmtest.Run(ctx, Cmd, args, stdout, stderr)
}
