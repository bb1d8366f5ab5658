//go:build linux

package ucmatose

import (
	"context"
	"io"
	"testing"

	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
)

// runIn, testCmatest and runCmd are clitest's and cmtest's runners for
// xroce ucmatose.

func runIn(ctx context.Context, h *netns.Host, args ...string) <-chan clitest.Result {
	return clitest.RunIn(ctx, h, Cmd, args...)
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
