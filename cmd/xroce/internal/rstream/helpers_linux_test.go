//go:build linux

package rstream

import (
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
)

// cmServerClient is cmtest's for xroce rstream.
func cmServerClient(t *testing.T, p *netns.Pair, server, client []string, linger time.Duration) (rs, rc clitest.Result) {
	t.Helper()
	return cmtest.CMServerClient(t, p, Cmd, server, Cmd, client, linger)
}
