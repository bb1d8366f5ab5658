//go:build linux

package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/netns"
)

// Failures of the TCP exchange: one clear line, exit status 1.
func TestPingpongPerfConnectErrors(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := func(h *netns.Host, args ...string) error {
		r := <-runIn(ctx, h, args...)
		return r.Err
	}
	check := func(what string, err error, want string) {
		t.Helper()
		if err == nil || ExitCode(err) != 1 || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", what, err, want)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
	for _, cmd := range [][]string{{"pingpong"}, {"perf", "write_bw"}} {
		name := strings.Join(cmd, " ")
		a := func(rest ...string) []string {
			return append(append(append([]string(nil), cmd...), "-d", p.A.Ifname, "-timeout", "1s"), rest...)
		}
		// Nobody listens on B: connection refused.
		check(name+": refused", run(p.A, a(p.B.IP.String())...), "connection refused (is the server running?)")
		// An address on the link where nobody answers.
		check(name+": unreachable", run(p.A, a(p.B.IP.Next().String())...), "(is the address right?)")
		// The port is taken.
		var ln net.Listener
		if err := p.A.Do(func() (err error) { ln, err = net.Listen("tcp", ":18515"); return err }); err != nil {
			t.Fatal(err)
		}
		check(name+": port in use", run(p.A, a()...), "address already in use")
		ln.Close()
		// A server nobody connects to gives up after the timeout.
		check(name+": no client", run(p.A, a()...), "no client connected to port 18515 within the timeout")
	}
	// A pingpong client whose server is a perf server: the messages differ.
	sc := runIn(ctx, p.B, "perf", "write_bw", "-d", p.B.Ifname, "-timeout", "2s", "-p", "18530")
	clitest.WaitListen(t, p.B, 18530, sc)
	err := run(p.A, "pingpong", "-d", p.A.Ifname, "-timeout", "2s", "-p", "18530", p.B.IP.String())
	check("pingpong against perf", err, "pingpong:")
	<-sc
}

// The real binary, run with ip netns exec in both namespaces: a pingpong
// and a perf write_bw.
func TestBinaryInNamespaces(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	bin := filepath.Join(t.TempDir(), "xroce")
	build := exec.Command("go", "build", "-o", bin, "github.com/xroce/xroce/cmd/xroce")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cases := [][]string{
		{"pingpong", "-c", "-n", "500", "-s", "2048"},
		{"perf", "write_bw", "-n", "1000", "-s", "65536"},
	}
	if f := os.Getenv("XROCE_FIGURES"); f != "" { // the figures of the report (1: all; else those matching)
		cases = append(cases,
			[]string{"pingpong"},
			[]string{"pingpong", "-s", "64", "-n", "10000"},
			[]string{"pingpong", "-e", "-s", "64", "-n", "10000"},
			[]string{"pingpong", "--ud", "-s", "1024", "-n", "10000"},
			[]string{"perf", "write_bw", "-n", "20000"},
			[]string{"perf", "write_bw", "-n", "20000", "-q", "2"},
			[]string{"perf", "read_bw", "-n", "20000"},
			[]string{"perf", "send_bw", "-n", "20000"},
			[]string{"perf", "write_bw", "-D", "5", "--report_gbits"},
			[]string{"perf", "write_lat", "-n", "10000"},
			[]string{"perf", "read_lat", "-n", "10000"},
			[]string{"perf", "send_lat", "-n", "10000"},
		)
		if f != "1" {
			cases = slices.DeleteFunc(cases, func(c []string) bool { return !strings.Contains(strings.Join(c, " "), f) })
		}
	}
	for i, tc := range cases {
		port := fmt.Sprint(18540 + i)
		extra := []string{"-d", p.B.Ifname, "-p", port, "-timeout", "10s"}
		if tc[0] == "perf" {
			extra = append(extra, "-stat-dir", "")
		}
		srv := p.B.Command(bin, append(append([]string(nil), tc...), extra...)...)
		var sout, serr bytes.Buffer
		srv.Stdout, srv.Stderr = &sout, &serr
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Wait() }()
		clitest.WaitListen(t, p.B, 18540+i, nil)
		extra[1] = p.A.Ifname
		cli := p.A.Command(bin, append(append(append([]string(nil), tc...), extra...), p.B.IP.String())...)
		out, err := cli.CombinedOutput()
		if err != nil {
			srv.Process.Kill()
		}
		serrw := <-done
		if err != nil || serrw != nil {
			t.Fatalf("%q: client: %v\n%s\nserver: %v\n%s%s", tc, err, out, serrw, sout.String(), serr.String())
		}
		t.Logf("%q client:\n%s", tc, out)
		if os.Getenv("XROCE_FIGURES") != "" {
			fmt.Printf("FIGURE %q client:\n%s\nserver:\n%s\n", tc, out, sout.String())
		}
		if tc[0] == "pingpong" && !clitest.ItersRE.Match(out) || tc[0] == "perf" && !clitest.BWLineRE.Match(out) && !clitest.LatLineRE.Match(out) {
			t.Errorf("%q: no result line in the client's output", tc)
		}
	}
	_ = os.Remove(bin)
}
