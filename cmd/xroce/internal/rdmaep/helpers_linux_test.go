//go:build linux

package rdmaep

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
)

// command is Server or Client, as args[0] names it (rdma_server or
// rdma_client); for any other name, a command of none, which the runners
// refuse.
func command(args []string) base.Command {
	if len(args) > 0 {
		for _, c := range []base.Command{Server, Client} {
			if c.Name == args[0] {
				return c
			}
		}
	}
	return base.Command{}
}

// cmServerClient and runCmd are cmtest's runners for the command that
// their arguments start with.

func cmServerClient(t *testing.T, p *netns.Pair, server, client []string, linger time.Duration) (rs, rc clitest.Result) {
	t.Helper()
	return cmtest.CMServerClient(t, p, command(server), server, command(client), client, linger)
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cmtest.Run(ctx, command(args), args, stdout, stderr)
}
