//go:build linux

package perf

import (
	"context"
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/statsock"
)

// perf qps makes its namespaces, connects 1 and then 64 QPs (through the
// TCP exchange, and through RDMA CM), runs them, prints a row each with a
// goodput, the fairness of every whole second and the requester's
// timeouts and retransmissions, and serves each QP's counters and the
// fairness to xroce stat meanwhile. How fair and how lossless a run is
// depends on the machine's load; jainSlowest's figures are
// TestJainSlowest's.
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
			ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
			defer cancel()
			done := make(chan clitest.Result, 1)
			go func() {
				var out, errb clitest.SyncBuffer
				err := runCmd(ctx, args, &out, &errb)
				done <- clitest.Result{Err: err, Stdout: out.String(), Stderr: errb.String()}
			}()
			var r clitest.Result
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
			if r.Err != nil {
				t.Fatalf("perf qps: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
			}
			t.Logf("\n%s", r.Stdout)
			rows := 0
			for _, line := range strings.Split(r.Stdout, "\n") {
				f := strings.Fields(line)
				if len(f) != 9 || f[0] != "1" && f[0] != "64" {
					continue
				}
				rows++
				// What holds however busy the machine: WRITEs completed
				// in the -D seconds, and the fairness figures are a Jain
				// index and a share (0 for a second in which nothing moved,
				// which a starved machine may have). Timeouts and
				// retransmissions are counts: a busy machine's full rings
				// drop frames and the requester resends them.
				gbps, err1 := strconv.ParseFloat(f[2], 64)
				jain, err2 := strconv.ParseFloat(f[4], 64)
				slowest, err3 := strconv.ParseFloat(f[5], 64)
				_, err4 := strconv.ParseUint(f[7], 10, 64)
				_, err5 := strconv.ParseUint(f[8], 10, 64)
				if err := errors.Join(err1, err2, err3, err4, err5); err != nil || gbps <= 0 || jain < 0 || jain > 1 || slowest < 0 || slowest > 1 {
					t.Errorf("row %q: want a goodput, a Jain index and a slowest share in [0, 1], counts of timeouts and retransmissions (%v)", line, err)
				}
			}
			if rows != 2 {
				t.Fatalf("%d rows, want 2:\n%s", rows, r.Stdout)
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

// TestJainSlowest: Jain's index (Σx)²/(n·Σx²) and the slowest one's share
// of the mean, 0 and 0 when nothing moved.
func TestJainSlowest(t *testing.T) {
	for _, c := range []struct {
		name          string
		x             []float64
		jain, slowest float64
	}{
		{"one", []float64{5}, 1, 1},
		{"equal", []float64{3, 3, 3, 3}, 1, 1},
		{"one and three", []float64{1, 3}, 0.8, 0.5},
		{"one of two idle", []float64{0, 4}, 0.5, 0},
		{"one of four busy", []float64{0, 0, 0, 8}, 0.25, 0},
		{"nothing moved", []float64{0, 0}, 0, 0},
	} {
		j, s := jainSlowest(c.x)
		if math.Abs(j-c.jain) > 1e-9 || math.Abs(s-c.slowest) > 1e-9 {
			t.Errorf("%s: jainSlowest(%v) = %v, %v; want %v, %v", c.name, c.x, j, s, c.jain, c.slowest)
		}
	}
}
