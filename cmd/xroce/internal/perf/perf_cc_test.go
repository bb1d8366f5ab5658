//go:build linux

package perf

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/internal/perftest"
)

func TestPerfMarkCEBadFlags(t *testing.T) {
	for _, v := range []string{"-0.1", "1.5"} {
		var out, errb bytes.Buffer
		err := runCmd(context.Background(), []string{"perf", "write_bw", "--mark-ce", v}, &out, &errb)
		if base.ExitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), "want a fraction from 0 to 1") {
			t.Errorf("--mark-ce %s: %v (exit %d), want exit 2 with 'want a fraction from 0 to 1'", v, err, base.ExitCode(err))
		}
	}
}

// TestPerfMarkCE: the server's XDP program marks 5% of the client's WRITEs
// CE (--mark-ce); the server answers with CNPs, the client's DCQCN cuts its
// rate, and both print the counters at the end of a run that completes.
func TestPerfMarkCE(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	flags := []string{"write_bw", "-n", "2000", "-p", "18760", "-timeout", "10s", "-stat-dir", ""}
	rs, rc := clientServer(t, p, 18760, append([]string{"perf", "-d", p.B.Ifname, "--mark-ce", "0.05"}, flags...),
		append([]string{"perf", "-d", p.A.Ifname}, flags...))
	checkPerf(t, "client", rc, perftest.ResultBW, []int{65536}, 2000)
	checkPerf(t, "server", rs, perftest.ResultBW, []int{65536}, 2000)
	if strings.Contains(rs.Stderr, "AF_PACKET") {
		t.Skipf("no AF_XDP on the veth, so no XDP program to mark: %s", rs.Stderr)
	}
	t.Logf("server: %s\nclient: %s", clitest.CCLineRE.FindString(rs.Stderr), clitest.CCLineRE.FindString(rc.Stderr))
	marked, ce, cnps := clitest.CCFig(t, "server", rs.Stderr, "xdp_marked_ce"), clitest.CCFig(t, "server", rs.Stderr, "rx_ce"), clitest.CCFig(t, "server", rs.Stderr, "tx_cnp")
	if marked == 0 || ce != marked || cnps == 0 || cnps > ce {
		t.Errorf("server: XDP marked %d, received %d CE-marked, sent %d CNPs; want as many received as marked, and 1..that many CNPs", marked, ce, cnps)
	}
	if rx := clitest.CCFig(t, "client", rc.Stderr, "rx_cnp"); rx == 0 || rx > cnps {
		t.Errorf("client: received %d CNPs, want 1..%d (the server's)", rx, cnps)
	}
	if cuts, low := clitest.CCFig(t, "client", rc.Stderr, "rate_cuts"), clitest.CCFig(t, "client", rc.Stderr, "rate_lowest"); cuts == 0 || low == 0 {
		t.Errorf("client: %d rate cuts, lowest rate %d b/s; want cuts and a rate", cuts, low)
	}
}
