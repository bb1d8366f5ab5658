//go:build linux

package perf

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/internal/perftest"
	"github.com/xroce/xroce/internal/statsock"
)

var (
	perfAddrRE = regexp.MustCompile(`(?m)^ (local|remote) address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN 0x[0-9a-f]{1,6}`)
	perfGIDRE  = regexp.MustCompile(`(?m)^ GID: 00:00:00:00:00:00:00:00:00:00:255:255:198:18:00:0[12]$`)
)

// checkPerf checks a perf run's output: banner, addresses, the table
// header hdr (unless empty) and result lines of the given sizes.
func checkPerf(t *testing.T, who string, r clitest.Result, hdr string, sizes []int, iters int) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", who, r.Err, r.Stdout, r.Stderr)
	}
	out := r.Stdout
	re := clitest.BWLineRE
	if hdr == perftest.ResultLat {
		re = clitest.LatLineRE
	}
	if hdr != "" && !strings.Contains(out, hdr+"\n") || !strings.Contains(out, "Test\n Dual-port       : OFF") ||
		len(perfAddrRE.FindAllString(out, -1)) < 2 || len(perfGIDRE.FindAllString(out, -1)) < 2 {
		t.Errorf("%s: banner, addresses or table header missing:\n%s", who, out)
	}
	lines := re.FindAllStringSubmatch(out, -1)
	if len(lines) != len(sizes) {
		t.Fatalf("%s: %d result lines, want %d:\n%s", who, len(lines), len(sizes), out)
	}
	for i, l := range lines {
		if l[1] != fmt.Sprint(sizes[i]) || iters > 0 && l[2] != fmt.Sprint(iters) {
			t.Errorf("%s: line %q: want %d bytes, %d iterations", who, l[0], sizes[i], iters)
		}
	}
}

func TestPerf(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	all := []int{}
	for n := 2; n <= 1<<23; n *= 2 {
		all = append(all, n)
	}
	for i, tc := range []struct {
		test  string
		flags []string
		sizes []int
		iters int
	}{
		{"write_bw", []string{"-n", "200"}, []int{65536}, 200},
		{"write_bw", []string{"-n", "300", "-s", "1000", "-q", "3", "--report_gbits"}, []int{1000}, 900},
		{"write_bw", []string{"-n", "300", "-s", "5000", "-c", "UC", "-m", "512"}, []int{5000}, 300},
		{"read_bw", []string{"-n", "200", "-s", "10000"}, []int{10000}, 200},
		{"send_bw", []string{"-n", "500", "-s", "4096"}, []int{4096}, 500},
		{"send_bw", []string{"-n", "500", "-s", "100", "-c", "UC", "-q", "2"}, []int{100}, 1000},
		{"atomic_bw", []string{"-n", "500"}, []int{8}, 500},
		{"atomic_bw", []string{"-n", "100", "-A", "CMP_AND_SWAP"}, []int{8}, 100},
		{"write_lat", []string{"-n", "200"}, []int{2}, 200},
		{"write_lat", []string{"-n", "100", "-s", "3000", "-c", "UC"}, []int{3000}, 100},
		{"read_lat", []string{"-n", "200", "-s", "100"}, []int{100}, 200},
		{"send_lat", []string{"-n", "200"}, []int{2}, 200},
		{"send_lat", []string{"-n", "200", "-c", "UD", "-s", "1000"}, []int{1000}, 200},
		{"send_bw", []string{"-n", "300", "-c", "UD"}, []int{1024}, 300}, // 65536 is cut to the MTU
		{"send_bw", []string{"-n", "20", "-c", "UD", "-a"}, []int{2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}, 20},
		{"send_lat", []string{"-n", "50", "-a"}, all, 50},
		{"write_bw", []string{"-n", "10", "-a"}, all, 10},
	} {
		t.Run(fmt.Sprintf("%s%q", tc.test, tc.flags), func(t *testing.T) {
			port := 18600 + i
			flags := append([]string{tc.test, "-p", fmt.Sprint(port), "-timeout", "10s", "-stat-dir", ""}, tc.flags...)
			srv := append([]string{"perf", "-d", p.B.Ifname}, flags...)
			cli := append([]string{"perf", "-d", p.A.Ifname}, flags...)
			rs, rc := clientServer(t, p, port, srv, cli)
			hdr := perftest.ResultBW
			switch {
			case strings.HasSuffix(tc.test, "_lat"):
				hdr = perftest.ResultLat
			case slices.Contains(tc.flags, "--report_gbits"):
				hdr = perftest.ResultBWG
			}
			checkPerf(t, "client", rc, hdr, tc.sizes, tc.iters)
			switch {
			case tc.test == "read_lat":
				checkPerf(t, "server", rs, "", nil, 0) // perftest's server prints no table
			case strings.HasSuffix(tc.test, "_lat") || tc.test == "send_bw":
				checkPerf(t, "server", rs, hdr, tc.sizes, tc.iters)
			default: // the server prints the client's result: the last line
				checkPerf(t, "server", rs, hdr, tc.sizes[len(tc.sizes)-1:], tc.iters)
			}
			t.Logf("client:\n%s", rc.Stdout)
		})
	}
}

// A run of -D seconds: one result line, progress lines on stderr, and the
// counters for xroce stat while it runs.
func TestPerfDuration(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	dir := t.TempDir()
	flags := []string{"write_bw", "-D", "3", "-s", "4096", "-p", "18650", "-timeout", "10s"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc := runIn(ctx, p.B, append([]string{"perf", "-d", p.B.Ifname, "-stat-dir", ""}, flags...)...)
	clitest.WaitListen(t, p.B, 18650, sc)
	cc := runIn(ctx, p.A, append(append([]string{"perf", "-d", p.A.Ifname, "-stat-dir", dir}, flags...), p.B.IP.String())...)
	// Read the client's counters until a snapshot shows it running: it
	// runs for the 3 s of -D however slow the machine, and serves them
	// meanwhile.
	var snap *statsock.Snapshot
	var rc clitest.Result
poll:
	for {
		select {
		case rc = <-cc:
			break poll
		case <-time.After(50 * time.Millisecond):
		}
		if snap != nil && snap.Phase == "running" {
			continue
		}
		if ps, err := statsock.List(dir); err == nil && len(ps) == 1 {
			if s, err := statsock.Read(ctx, ps[0].Path); err == nil {
				snap = s
			}
		}
	}
	rs := <-sc
	checkPerf(t, "client", rc, perftest.ResultBW, []int{4096}, 0)
	checkPerf(t, "server", rs, perftest.ResultBW, []int{4096}, 0)
	// The first progress line comes 2 s into the run (or later, on a busy
	// machine): it says at least 2 s.
	if m := regexp.MustCompile(`(?m)^perf: write_bw: \d+ iterations in (\d+) s, \d+\.\d\d MB/sec so far$`).FindStringSubmatch(rc.Stderr); m == nil {
		t.Errorf("no progress line on the client's stderr:\n%s", rc.Stderr)
	} else if s, _ := strconv.Atoi(m[1]); s < 2 {
		t.Errorf("progress line at %d s, want the first 2 s into the run:\n%s", s, rc.Stderr)
	}
	if snap == nil || snap.Command != "perf write_bw" || snap.Phase != "running" || len(snap.Devices) != 1 ||
		len(snap.Devices[0].QPs) != 1 || snap.Devices[0].QPs[0].State != "RTS" {
		t.Errorf("xroce stat snapshot while running: %+v", snap)
	}
	if ps, _ := statsock.List(dir); len(ps) != 0 {
		t.Errorf("sockets left after the run: %v", ps)
	}
	t.Logf("client:\n%s\nstderr:\n%s", rc.Stdout, rc.Stderr)
}

// A latency run of -D seconds prints perftest's duration table.
func TestPerfLatencyDuration(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	for i, test := range []string{"send_lat", "write_lat"} {
		port := 18651 + i
		flags := []string{test, "-D", "2", "-p", fmt.Sprint(port), "-timeout", "10s", "-stat-dir", ""}
		rs, rc := clientServer(t, p, port,
			append([]string{"perf", "-d", p.B.Ifname}, flags...), append([]string{"perf", "-d", p.A.Ifname}, flags...))
		// perftest pads its columns (%-7.2f): a slow run's tps below
		// 1000 ends the line with a space.
		line := regexp.MustCompile(`(?m)^ 2\s+\d+\s+\d+\.\d\d\s+\d+\.\d\d *$`)
		for who, r := range map[string]clitest.Result{"client": rc, "server": rs} {
			if r.Err != nil || !strings.Contains(r.Stdout, perftest.ResultLatD+"\n") || !line.MatchString(r.Stdout) {
				t.Errorf("%s %s: %v\n%s\n%s", test, who, r.Err, r.Stdout, r.Stderr)
			}
		}
		t.Logf("%s client:\n%s", test, rc.Stdout)
	}
}

// TestReceiverRate: the send_bw receiver's peak is its average over the
// receives after the first batch, and all receives in one batch (the same
// clock reading) give no rate, not 62,500,000 MB/s.
func TestReceiverRate(t *testing.T) {
	for _, c := range []struct {
		name      string
		done, n0  int
		t0, tl    time.Duration
		duration  bool
		wantAvg   float64
		wantIters uint64
	}{
		{"one batch", 2, 2, time.Millisecond, time.Millisecond, false, 0, 2},
		{"one message", 1, 1, time.Millisecond, time.Millisecond, false, 0, 1},
		{"duration", 100, 1, time.Millisecond, time.Second, true, 0, 100},
		{"11 receives in 10 ms", 11, 1, 10 * time.Millisecond, 20 * time.Millisecond, false, 1000, 11},
	} {
		r := receiverRate(1<<20, c.done, c.n0, c.t0, c.tl, c.duration, false)
		if math.Abs(r.Avg-c.wantAvg) > 1e-6 || r.Peak != r.Avg || r.Iters != c.wantIters {
			t.Errorf("%s: %+v, want average = peak = %v MB/s, %d iterations", c.name, r, c.wantAvg, c.wantIters)
		}
	}
}

// TestPerfConnectOptions: as perftest, the requester's read/atomic depth
// is the peer's advertised out_reads, the responder's our own.
func TestPerfConnectOptions(t *testing.T) {
	for _, c := range []struct {
		my, rem        uint16
		wantRd, wantDR uint8
	}{{16, 16, 16, 16}, {16, 4, 4, 16}, {2, 16, 16, 2}, {16, 0, 0, 16}, {16, 1000, 128, 16}} {
		o := perfConnectOptions(&perftest.Dest{OutReads: c.my}, &perftest.Dest{OutReads: c.rem})
		if o.MaxRdAtomic != c.wantRd || o.MaxDestRdAtomic != c.wantDR {
			t.Errorf("out_reads %d here, %d there: max_rd_atomic %d, max_dest_rd_atomic %d; want %d, %d",
				c.my, c.rem, o.MaxRdAtomic, o.MaxDestRdAtomic, c.wantRd, c.wantDR)
		}
	}
}

// --perftest 25.01 on the client: it says 6.24 on the wire and prints
// perftest 25.01's banner and table; the server, left to auto, follows the
// peer it meets. A bad value is a usage error.
func TestPerfStyle2501(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	flags := []string{"write_bw", "-n", "50", "-s", "4096", "-p", "18651", "-timeout", "10s"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc := runIn(ctx, p.B, append([]string{"perf", "-d", p.B.Ifname, "-stat-dir", ""}, flags...)...)
	clitest.WaitListen(t, p.B, 18651, sc)
	rc := <-runIn(ctx, p.A, append(append([]string{"perf", "-d", p.A.Ifname, "-stat-dir", "", "--perftest", "25.01"}, flags...), p.B.IP.String())...)
	rs := <-sc
	checkPerf(t, "client", rc, perftest.ResultBWMiB, []int{4096}, 50)
	checkPerf(t, "server", rs, perftest.ResultBWMiB, []int{4096}, 50)
	for who, r := range map[string]clitest.Result{"client": rc, "server": rs} {
		if !strings.Contains(r.Stdout, "Lock-free      : OFF\n") {
			t.Errorf("%s: no 25.01 banner:\n%s", who, r.Stdout)
		}
	}
	var out, errb bytes.Buffer
	if err := runCmd(ctx, []string{"perf", "write_bw", "--perftest", "24.10"}, &out, &errb); base.ExitCode(err) != 2 {
		t.Errorf("--perftest 24.10: exit %d, want 2 (%v)", base.ExitCode(err), err)
	}
}
