//go:build linux

package cli

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/internal/statsock"
)

// perf qps makes its namespaces, connects 1 and then 64 QPs (through the
// TCP exchange, and through RDMA CM), runs them, prints a row each with a
// goodput, the fairness of every whole second and no retransmission, and
// serves each QP's counters and the fairness to xroce stat meanwhile.
func TestPerfQPs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs for a few seconds")
	}
	for _, mode := range []string{"tcp", "cm"} {
		t.Run(mode, func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("perf qps needs root for its namespaces")
			}
			dir := t.TempDir()
			args := []string{"perf", "qps", "-q", "1,64", "-s", "4096", "-D", "2s", "-stat-dir", dir}
			if mode == "cm" {
				args = append(args, "-cm")
			}
			ctx, cancel := context.WithTimeout(context.Background(), testSlowdown*60*time.Second)
			defer cancel()
			done := make(chan result, 1)
			go func() {
				var out, errb syncBuffer
				err := Run(ctx, args, &out, &errb)
				done <- result{err, out.String(), errb.String()}
			}()
			var r result
			var seen *statsock.Snapshot
		wait:
			for {
				select {
				case r = <-done:
					break wait
				case <-time.After(100 * time.Millisecond):
				}
				ps, _ := statsock.List(dir)
				for _, p := range ps {
					s, err := statsock.Read(ctx, p.Path)
					if err != nil || len(s.Devices) != 1 {
						continue
					}
					if n, _ := statsock.Lookup(s.Devices[0].Counters, "qps_running"); n == 64 && len(s.Devices[0].QPs) == 64 {
						if j, _ := statsock.Lookup(s.Devices[0].Counters, "jain_index_x1000"); j > 0 {
							seen = s
						}
					}
				}
			}
			if r.err != nil {
				t.Fatalf("perf qps: %v\n%s%s", r.err, r.stdout, r.stderr)
			}
			t.Logf("\n%s", r.stdout)
			rows := 0
			for _, line := range strings.Split(r.stdout, "\n") {
				f := strings.Fields(line)
				if len(f) != 9 || f[0] != "1" && f[0] != "64" {
					continue
				}
				rows++
				gbps, _ := strconv.ParseFloat(f[2], 64)
				jain, _ := strconv.ParseFloat(f[4], 64)
				slowest, _ := strconv.ParseFloat(f[5], 64)
				if gbps <= 0 || jain <= 0 || jain > 1 || slowest <= 0 || f[8] != "0" {
					t.Errorf("row %q: want a goodput, a Jain index in (0, 1], a slowest share above 0 and no retransmission", line)
				}
			}
			if rows != 2 {
				t.Fatalf("%d rows, want 2:\n%s", rows, r.stdout)
			}
			if seen == nil {
				t.Fatal("xroce stat never showed the 64 QPs running with a fairness index")
			}
			for _, q := range seen.Devices[0].QPs {
				if n, _ := statsock.Lookup(q.Counters, "tx_frames"); n == 0 {
					t.Errorf("QP %#x: no frames sent in xroce stat's view", q.QPN)
				}
			}
		})
	}
}
