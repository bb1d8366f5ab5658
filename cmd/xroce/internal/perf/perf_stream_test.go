//go:build linux

package perf

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/netns"
)

var (
	psBWLineRE  = regexp.MustCompile(`(?m)^ (\d+ (?:KiB|MiB|B))\s+(xroce|rsocket|tcp)\s+\d+\s+\d+\.\d\d\s+(\d+\.\d\d\+\d+\.\d\d|\d+\.\d\d)\s+(\d+\.\d%|-)$`)
	psRatioRE   = regexp.MustCompile(`(?m)^\s+(?:xroce|rsocket)/tcp\s+\d+\.\d\dx\s+\d+\.\d\dx$`)
	psLatLineRE = regexp.MustCompile(`(?m)^ (xroce|rsocket|tcp)\s+(\d+)\s+\d+\.\d\s+\d+\.\d\s+\d+\.\d$`)
)

// checkPerfStream checks the client's table: bw lines of each transport
// per size, and the latency lines with iters round trips.
func checkPerfStream(t *testing.T, r clitest.Result, sizes, transports, iters int) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("client: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	if n := len(psBWLineRE.FindAllString(r.Stdout, -1)); n != sizes*transports {
		t.Errorf("%d throughput lines, want %d:\n%s", n, sizes*transports, r.Stdout)
	}
	// Each stream transport gets a ratio to TCP per size and for the
	// ping-pong, when TCP ran.
	ratios := 0
	if regexp.MustCompile(`(?m)^ \S.*\s+tcp\s`).MatchString(r.Stdout) {
		ratios = sizes
		if iters > 0 {
			ratios++
		}
		ratios *= transports - 1
	}
	if n := len(psRatioRE.FindAllString(r.Stdout, -1)) + len(regexp.MustCompile(`\n (?:xroce|rsocket)/tcp `).FindAllString(r.Stdout, -1)); n < ratios {
		t.Errorf("%d ratio lines, want %d:\n%s", n, ratios, r.Stdout)
	}
	lat := psLatLineRE.FindAllStringSubmatch(r.Stdout, -1)
	if iters == 0 {
		return
	}
	if len(lat) != transports {
		t.Fatalf("%d latency lines, want %d:\n%s", len(lat), transports, r.Stdout)
	}
	for _, l := range lat {
		if l[2] != strconv.Itoa(iters) {
			t.Errorf("latency line %q: want %d round trips", l[0], iters)
		}
	}
}

// Client and server in two namespaces: every size over both transports,
// then one size over xroce only with the direct path on, then a timed run
// with a progress line.
func TestPerfStream(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	for i, tc := range []struct {
		name                       string
		flags                      []string
		sizes, transports, latency int
	}{
		{"all", []string{"-n", "50"}, 3, 3, 50},
		{"direct", []string{"-n", "40", "-s", "262144", "-direct", "65536", "-tcp=false", "-rsocket=false", "-lat=false"}, 1, 1, 0},
		{"latency", []string{"-n", "300", "-bw=false", "-rsocket=false"}, 0, 2, 300},
		{"spin", []string{"-n", "300", "-bw=false", "-tcp=false", "-spin", "200us"}, 0, 2, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := 18700 + i
			flags := append([]string{"perf", "stream", "-p", strconv.Itoa(port), "-timeout", "10s"}, tc.flags...)
			srv := append(append([]string(nil), flags...), "-d", p.B.Ifname)
			cli := append(append([]string(nil), flags...), "-d", p.A.Ifname)
			rs, rc := clientServer(t, p, port, srv, cli)
			if rs.Err != nil || !strings.Contains(rs.Stdout, "tests served") {
				t.Errorf("server: %v\n%s%s", rs.Err, rs.Stdout, rs.Stderr)
			}
			checkPerfStream(t, rc, tc.sizes, tc.transports, tc.latency)
			t.Logf("client:\n%s", rc.Stdout)
		})
	}
}

// A run of -D seconds prints progress lines on stderr. The writer looks
// at the clock every 64 writes, so the writes are small (4 KiB) for it to
// look often even on a busy machine; the first line comes 2 s into the
// run or later.
func TestPerfStreamDuration(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	flags := []string{"perf", "stream", "-p", "18710", "-timeout", "10s", "-D", "3", "-s", "4096", "-lat=false", "-tcp=false", "-rsocket=false"}
	rs, rc := clientServer(t, p, 18710, append(flags, "-d", p.B.Ifname), append(flags, "-d", p.A.Ifname))
	if rs.Err != nil {
		t.Errorf("server: %v", rs.Err)
	}
	checkPerfStream(t, rc, 1, 1, 0)
	if m := regexp.MustCompile(`(?m)^perf: stream xroce 4 KiB writes: \d+ iterations in (\d+) s, \d+\.\d\d MB/sec so far$`).FindStringSubmatch(rc.Stderr); m == nil {
		t.Errorf("no progress line on the client's stderr:\n%s", rc.Stderr)
	} else if s, _ := strconv.Atoi(m[1]); s < 2 {
		t.Errorf("progress line at %d s, want the first 2 s into the run:\n%s", s, rc.Stderr)
	}
}

// The real binary with -netns: its own namespaces, both ends, no setup;
// none of its namespaces is left.
func TestPerfStreamNetnsBinary(t *testing.T) {
	netns.NewT(t, netns.Config{}) // skips unless namespaces can be made
	bin := filepath.Join(t.TempDir(), "xroce")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/xroce/xroce/cmd/xroce").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "perf", "stream", "-netns", "-n", "100", "-s", "65536")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	checkPerfStream(t, clitest.Result{Err: err, Stdout: out.String(), Stderr: errb.String()}, 1, 3, 100)
	if !strings.Contains(out.String(), "cpu-s/GB (both ends)") {
		t.Errorf("no both-ends CPU column:\n%s", out.String())
	}
	left, _ := filepath.Glob("/run/netns/xr" + strconv.Itoa(cmd.Process.Pid) + "-*")
	if len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	t.Logf("%s", out.String())
	_ = os.Remove(bin)
}

// Command-line mistakes: exit status 2 and one line saying what is wrong.
func TestPerfStreamBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-s", "0x"}, "invalid value"},
		{[]string{"-s", "-1"}, "-s -1: want 1.."},
		{[]string{"-s", "20000000"}, "-s 20000000: want 1.."},
		{[]string{"-n", "3"}, "-n 3: want at least 5"},
		{[]string{"-D", "-1"}, "-D -1"},
		{[]string{"-n", "10", "-D", "2"}, "-n and -D do not go together"},
		{[]string{"-p", "0"}, "-p 0: want a TCP port"},
		{[]string{"-direct", "-5"}, "-direct -5"},
		{[]string{"-ring", "100"}, "-ring 100: want 4096"},
		{[]string{"-timeout", "0s"}, "-timeout 0s"},
		{[]string{"-spin", "2s"}, "-spin 2s: want 0 to 1s"},
		{[]string{"-bw=false", "-lat=false"}, "leave nothing to run"},
		{[]string{"-netns", "198.18.0.1"}, "-netns makes its own link"},
		{[]string{"-netns", "-d", "eth0"}, "-netns makes its own link"},
		{[]string{"h1", "h2"}, "at most one HOST"},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"perf", "stream"}, tc.args...)
		err := runCmd(context.Background(), args, &out, &errb)
		if base.ExitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v (exit %d), want exit 2 and one line with %q", args, err, base.ExitCode(err), tc.want)
		}
	}
	// perf's list of tests names the mode.
	err := runCmd(context.Background(), []string{"perf"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "stream") {
		t.Errorf("perf without a test: %v, want the list to name stream", err)
	}
}
