//go:build linux

package rcopy

import (
	"context"

	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/netns"
)

// runIn is clitest's for xroce rcopy.
func runIn(ctx context.Context, h *netns.Host, args ...string) <-chan clitest.Result {
	return clitest.RunIn(ctx, h, Cmd, args...)
}
