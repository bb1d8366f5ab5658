//go:build linux

package perf

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/internal/perftest"
)

func TestPerfRateBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"perf", "write_bw", "--burst_size", "4"}, "--burst_size needs --rate_limit"},
		{[]string{"perf", "write_bw", "--rate_limit", "1", "--rate_units", "k"}, `--rate_units "k": want M, g or p`},
		{[]string{"perf", "write_bw", "--rate_limit", "-1"}, "--rate_limit -1: want a rate"},
		{[]string{"perf", "write_lat", "--rate_limit", "1"}, "the rate limiter is for bandwidth tests"},
		{[]string{"perf", "atomic_bw", "--rate_limit", "1"}, "the rate limiter is for bandwidth tests"},
		{[]string{"perf", "write_bw", "--rate_limit", "1", "--rate_limit_type", "PP"}, "packet pacing is for Raw Ethernet"},
	} {
		var out, errb bytes.Buffer
		err := runCmd(context.Background(), tc.args, &out, &errb)
		if base.ExitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v (exit %d), want exit 2 with %q", tc.args, err, base.ExitCode(err), tc.want)
		}
	}
}

func TestPerfWireBytes(t *testing.T) {
	for _, tc := range []struct {
		size, mtu int
		conn      string
		v6, write bool
		want      int64
	}{
		// One packet: Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4, 24 on the wire.
		{4, 1024, "RC", false, false, 4 + 82},
		{3, 1024, "RC", false, false, 3 + 1 + 82}, // and a pad byte
		{65536, 4096, "UC", false, false, 65536 + 16*82},
		{65536, 4096, "RC", false, true, 65536 + 16*82 + 16}, // the RETH
		{1024, 1024, "UD", true, false, 1024 + 82 + 20 + 8},
	} {
		if got := perfWireBytes(tc.size, tc.mtu, tc.conn, tc.v6, tc.write); got != tc.want {
			t.Errorf("perfWireBytes(%d, %d, %s, v6 %v, write %v) = %d, want %d", tc.size, tc.mtu, tc.conn, tc.v6, tc.write, got, tc.want)
		}
	}
}

// TestPerfRateLimit runs send_bw over UC with perftest's rate limiter
// flags: the bandwidth reported stays under the limit (payload, as
// perftest reports it), and every message arrives.
func TestPerfRateLimit(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	for i, tc := range []struct {
		flags []string
		limit float64 // MB/s (2^20 bytes) of payload
		burst int
	}{
		{[]string{"--rate_limit", "0.2", "--burst_size", "1"}, 0.2e9 / 8 / (1 << 20), 1},
		// The default burst is the send queue depth, here the whole run of
		// 100 messages, as in perftest: the burst would go at once.
		{[]string{"--rate_limit", "30", "--rate_units", "M", "--burst_size", "8"}, 30, 8},
		{[]string{"--rate_limit", "400", "--rate_units", "p", "--burst_size", "2"}, 400 * 65536.0 / (1 << 20), 2},
	} {
		t.Run(strings.Join(tc.flags, " "), func(t *testing.T) {
			port := 18700 + i
			flags := append([]string{"send_bw", "-c", "UC", "-n", "100", "-p", fmt.Sprint(port), "-timeout", "10s", "-stat-dir", ""}, tc.flags...)
			rs, rc := clientServer(t, p, port, append([]string{"perf", "-d", p.B.Ifname}, flags...),
				append([]string{"perf", "-d", p.A.Ifname}, flags...))
			checkPerf(t, "client", rc, perftest.ResultBW, []int{65536}, 100)
			checkPerf(t, "server", rs, perftest.ResultBW, []int{65536}, 100)
			l := clitest.BWLineRE.FindStringSubmatch(rc.Stdout)
			avg, _ := strconv.ParseFloat(l[4], 64)
			t.Logf("limit %.2f MB/s: client reports %.2f MB/s", tc.limit, avg)
			// The first burst goes at once: 100 messages take the time of
			// 100 − burst at the limit, and a little more.
			if most := tc.limit * 100 / float64(100-tc.burst) * 1.02; avg > most {
				t.Errorf("BW average %.2f MB/s above %.2f MB/s: the limit %.2f MB/s and a first burst of %d", avg, most, tc.limit, tc.burst)
			}
		})
	}
}
