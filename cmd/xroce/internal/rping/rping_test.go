//go:build linux

package rping

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
)

// struct rping_rdma_info: 16 bytes, big-endian buf, rkey, size.
func TestRpingInfo(t *testing.T) {
	b := make([]byte, rdmacm.RpingInfoSize)
	rpingInfo(b).Encode(0x0102030405060708, 0x0a0b0c0d, 64)
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 0, 64}
	if !bytes.Equal(b, want) {
		t.Errorf("encoded % x, want % x", b, want)
	}
	i := rpingInfo(b)
	if i.Buf() != 0x0102030405060708 || i.RKey() != 0x0a0b0c0d || i.Size() != 64 {
		t.Errorf("decoded %#x %#x %d", i.Buf(), i.RKey(), i.Size())
	}
	// The server's go-ahead: 16 zero bytes read as nothing.
	z := rpingInfo(make([]byte, rdmacm.RpingInfoSize))
	if z.Buf() != 0 || z.RKey() != 0 || z.Size() != 0 {
		t.Error("zeros do not decode to zero")
	}
}

// Command lines: rping's messages, usage and statuses; the options read.
func TestRpingFlags(t *testing.T) {
	rpingUsageText := cmtest.Usage44(t, "rping")
	b := &strings.Builder{}
	rpingUsage(b)
	if b.String() != rpingUsageText {
		t.Fatalf("usage:\n%s\nwant (rping 44's):\n%s", b, rpingUsageText)
	}
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{nil, 22, rpingUsageText, ""},
		{[]string{"-v"}, 22, rpingUsageText, ""},
		{[]string{"-s", "-x"}, 22, rpingUsageText, ""},
		{[]string{"-s", "-h"}, 22, rpingUsageText, ""},
		{[]string{"-s", "-t", "1"}, 22, rpingUsageText, ""}, // in the optstring, not handled
		{[]string{"-s", "-p"}, 22, rpingUsageText, ""},
		{[]string{"-s", "-S", "1"}, 22, "", "Invalid size 1 (valid range is 23 to 65536)\n"},
		{[]string{"-s", "-S", "65536"}, 22, "", "Invalid size 65536 (valid range is 23 to 65536)\n"},
		{[]string{"-c", "-a", "198.18.0.2", "-C", "-1"}, 22, "", "Invalid count -1\n"},
		{[]string{"-c", "-S", "22", "-S", "30", "-C", "-1"}, 22, "", "Invalid size 22 (valid range is 23 to 65536)\nInvalid count -1\n"},
		{[]string{"-s", "-S", "0", "-a", "0.0.0.0"}, 22, "", "Invalid size 0 (valid range is 23 to 65536)\nInvalid size 0 (valid range is 23 to 65536)\n"},
		{[]string{"-c", "-x", "-S", "1"}, 22, rpingUsageText, ""},
	} {
		var out, errb bytes.Buffer
		err := runCmd(context.Background(), append([]string{"rping"}, tc.args...), &out, &errb)
		if base.ExitCode(err) != tc.code || !base.Reported(err) || out.String() != tc.stdout || errb.String() != tc.stderr {
			t.Errorf("rping %q: exit %d (%v)\nstdout %q\nstderr %q\nwant exit %d, %q, %q", tc.args, base.ExitCode(err), err,
				out.String(), errb.String(), tc.code, tc.stdout, tc.stderr)
		}
	}

	// What the flags set, and -d's lines for the flags after it.
	var out, errb bytes.Buffer
	o, _, done := parseRping(context.Background(), &out, &errb,
		[]string{"-v", "-d", "-sVS", "100", "-C", "7", "-p", "7999x", "-a", "198.18.0.2", "-I", "::1", "-P", "-q", "extra"})
	if done {
		t.Fatalf("parse failed: %q %q", out.String(), errb.String())
	}
	want := rpingOptions{server: 1, addr: netip.MustParseAddr("198.18.0.2"), src: netip.MustParseAddr("::1"), port: 7999,
		count: 7, size: 100, verbose: true, validate: true, debug: true, persistent: true, selfQP: true}
	if *o != want {
		t.Errorf("options %+v, want %+v", *o, want)
	}
	if out.String() != "server\nvalidate data\nsize 100\ncount 7\nport 7999\n" || errb.Len() != 0 {
		t.Errorf("-d lines %q, stderr %q", out.String(), errb.String())
	}
	// The quirk: a later -a that resolves clears a bad -S's status.
	o, _, done = parseRping(context.Background(), &out, &errb, []string{"-c", "-S", "5", "-a", "198.18.0.2"})
	if done || o.size != 5 {
		t.Errorf("-S 5 then -a: %+v, done %v", o, done)
	}
	// Defaults.
	o, _, _ = parseRping(context.Background(), &out, &errb, []string{"-c"})
	if o.addr != netip.IPv4Unspecified() || o.port != 7174 || o.size != 64 || o.count != 0 || o.src.IsValid() {
		t.Errorf("defaults %+v", *o)
	}
}

// rpingLines are the -v lines of pings 0..n-1 of size bytes.
func rpingLines(prefix string, n, size int) string {
	var b strings.Builder
	buf := make([]byte, size)
	for i := range n {
		rdmacm.RpingFill(buf, i)
		fmt.Fprintf(&b, "%s%s\n", prefix, rdmacm.CString(buf))
	}
	return b.String()
}

func TestRping(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	b := p.B.IP.String()
	for _, tc := range []struct {
		name   string
		server []string
		client []string
		pings  int
		size   int
	}{
		{"default", []string{"-s", "-v"}, []string{"-c", "-v", "-V", "-C", "3", "-a", b}, 3, 64},
		{"bound", []string{"-s", "-v", "-a", b, "-p", "7200"}, []string{"-c", "-vV", "-C", "70", "-a", b, "-p", "7200", "-I", p.A.IP.String()}, 70, 64},
		{"big", []string{"-svS", "65535"}, []string{"-cvVC", "5", "-S65535", "-a", b}, 5, 65535},
		{"small", []string{"-s", "-v", "-S", "23"}, []string{"-c", "-v", "-V", "-C", "60", "-S", "23", "-a", b}, 60, 23},
		{"self-qp", []string{"-s", "-q", "-v"}, []string{"-q", "-c", "-v", "-C", "2", "-a", b}, 2, 64},
		// The server READs the client's -S bytes into its own -S bytes.
		{"server-bigger", []string{"-s", "-v", "-S", "100"}, []string{"-c", "-v", "-V", "-C", "4", "-a", b}, 4, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, rc := cmServerClient(t, p, append([]string{"rping"}, tc.server...), append([]string{"rping"}, tc.client...), cmtest.ServerLinger)
			cmtest.WantRun(t, "client", rc, 0, rpingLines("ping data: ", tc.pings, tc.size), "client DISCONNECT EVENT...\n")
			cmtest.WantRun(t, "server", rs, 0, rpingLines("server ping data: ", tc.pings, tc.size),
				"server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n")
		})
	}
}

// runLive is runIn with the output readable while the tool runs.
func runLive(ctx context.Context, h *netns.Host, args ...string) (stdout *clitest.SyncBuffer, res <-chan clitest.Result) {
	var out clitest.SyncBuffer
	c := make(chan clitest.Result, 1)
	go func() {
		var errb clitest.SyncBuffer
		err := h.Do(func() error { return runCmd(ctx, args, &out, &errb) })
		c <- clitest.Result{Err: err, Stdout: out.String(), Stderr: errb.String()}
	}()
	return &out, c
}

// waitLines waits until out has n lines.
func waitLines(t *testing.T, out *clitest.SyncBuffer, n int, res <-chan clitest.Result) {
	t.Helper()
	deadline := time.Now().Add(clitest.Slowdown * 30 * time.Second)
	for strings.Count(out.String(), "\n") < n {
		select {
		case r := <-res:
			t.Fatalf("ended after %d lines: %v\nstdout:\n%s\nstderr:\n%s", strings.Count(r.Stdout, "\n"), r.Err, r.Stdout, r.Stderr)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d lines after 30s, want %d", strings.Count(out.String(), "\n"), n)
		}
	}
}

// checkPings checks that out is pings 0..k-1 for some k >= min, and
// returns k.
func checkPings(t *testing.T, who, prefix, out string, least int) int {
	t.Helper()
	k := strings.Count(out, "\n")
	if want := rpingLines(prefix, k, 64); out != want || k < least {
		t.Errorf("%s: %d lines, want at least %d pings:\n%s", who, k, least, out)
	}
	return k
}

// rping -C 0 pings until stopped: a client stopped (SIGINT: its context
// ends) disconnects, and the server ends well; a server stopped does the
// same for the client, which, as rping, ends with status 0.
func TestRpingInterrupted(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	b := p.B.IP.String()
	listened := cmtest.ListenHook(t)

	t.Run("client", func(t *testing.T) {
		sc, _ := startServer(t, p.B, listened, "rping", "-s", "-v")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out, cc := runLive(ctx, p.A, "rping", "-c", "-v", "-V", "-a", b)
		waitLines(t, out, 200, cc)
		cancel()
		rc := <-cc
		if base.ExitCode(rc.Err) != rdmacm.ExitInterrupted || rc.Stderr != "" {
			t.Errorf("client: exit %d, stderr %q", base.ExitCode(rc.Err), rc.Stderr)
		}
		k := checkPings(t, "client", "ping data: ", rc.Stdout, 200)
		rs := <-sc
		if n := checkPings(t, "server", "server ping data: ", rs.Stdout, k); n > k+1 || base.ExitCode(rs.Err) != 0 ||
			!strings.HasPrefix(rs.Stderr, "server DISCONNECT EVENT...\nwait for RDMA_") || !strings.HasSuffix(rs.Stderr, " state 10\n") ||
			strings.Count(rs.Stderr, "\n") != 2 {
			t.Errorf("server: exit %d, %d pings (client %d), stderr %q", base.ExitCode(rs.Err), n, k, rs.Stderr)
		}
	})

	t.Run("server", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sout, sc := runLive(ctx, p.B, "rping", "-s", "-v")
		select {
		case <-listened:
		case <-time.After(clitest.Slowdown * 30 * time.Second):
			t.Fatal("the server never listened")
		}
		cc := runIn(context.Background(), p.A, "rping", "-c", "-v", "-V", "-a", b)
		waitLines(t, sout, 100, sc)
		cancel()
		rs := <-sc
		if base.ExitCode(rs.Err) != rdmacm.ExitInterrupted || rs.Stderr != "" {
			t.Errorf("server: exit %d, stderr %q", base.ExitCode(rs.Err), rs.Stderr)
		}
		k := checkPings(t, "server", "server ping data: ", rs.Stdout, 100)
		rc := <-cc
		if n := checkPings(t, "client", "ping data: ", rc.Stdout, k-1); n > k || base.ExitCode(rc.Err) != 0 ||
			!strings.HasPrefix(rc.Stderr, "client DISCONNECT EVENT...\nwait for RDMA_WRITE_") || !strings.HasSuffix(rc.Stderr, " state 10\n") ||
			strings.Count(rc.Stderr, "\n") != 2 {
			t.Errorf("client: exit %d, %d pings (server %d), stderr %q", base.ExitCode(rc.Err), n, k, rc.Stderr)
		}
	})
}

// rping -P serves client after client until stopped. (Clients at once
// would need a device each; one interface has one xroce device.)
func TestRpingPersistent(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	b := p.B.IP.String()
	sc, stop := startServer(t, p.B, cmtest.ListenHook(t), "rping", "-s", "-P", "-v")
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*30*time.Second)
	defer cancel()
	for i, n := range []int{3, 300, 2} {
		if i > 0 {
			// A new xroce client has the QPN of the last one, whose
			// connection the server's CM keeps in time-wait for about a
			// second; a REQ from that QPN meanwhile is refused as stale
			// (REJ 10), where the kernel's CM would accept it.
			time.Sleep(1500 * time.Millisecond)
		}
		rc := <-runIn(ctx, p.A, "rping", "-c", "-v", "-V", "-a", b, "-C", fmt.Sprint(n))
		cmtest.WantRun(t, fmt.Sprintf("client %d", i), rc, 0, rpingLines("ping data: ", n, 64), "client DISCONNECT EVENT...\n")
	}
	stop()
	rs := <-sc
	want := rpingLines("server ping data: ", 3, 64) + rpingLines("server ping data: ", 300, 64) + rpingLines("server ping data: ", 2, 64)
	cmtest.WantRun(t, "server", rs, rdmacm.ExitInterrupted, want, strings.Repeat("server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n", 3))
}

// The real binary: rping -C 0 pings until SIGINT, then disconnects; the
// server, rping's own -d lines showing it listens, ends with status 0.
func TestRpingBinarySIGINT(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	bin := filepath.Join(t.TempDir(), "xroce")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/xroce/xroce/cmd/xroce").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var sout, serr, cout, cerr clitest.SyncBuffer
	srv := p.B.Command(bin, "rping", "-d", "-s")
	srv.Stdout, srv.Stderr = &sout, &serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	sdone := make(chan error, 1)
	go func() { sdone <- srv.Wait() }()
	deadline := time.Now().Add(clitest.Slowdown * 30 * time.Second)
	for !strings.Contains(sout.String(), "rdma_listen\n") {
		if time.Now().After(deadline) {
			t.Fatalf("the server never listened:\n%s%s", sout.String(), serr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.HasPrefix(sout.String(), "server\ncreated cm_id 0x") {
		t.Errorf("server's -d lines:\n%s", sout.String())
	}
	cli := p.A.Command(bin, "rping", "-c", "-v", "-a", p.B.IP.String())
	cli.Stdout, cli.Stderr = &cout, &cerr
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	defer cli.Process.Kill()
	for strings.Count(cout.String(), "\n") < 100 {
		if time.Now().After(deadline) {
			t.Fatalf("no pings:\n%s%s", cout.String(), cerr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cli.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cli.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != rdmacm.ExitInterrupted || cerr.String() != "" {
		t.Errorf("client: %v, stderr %q", err, cerr.String())
	}
	checkPings(t, "client", "ping data: ", cout.String(), 100)
	select {
	case err := <-sdone:
		if err != nil || !strings.HasPrefix(serr.String(), "server DISCONNECT EVENT...\nwait for RDMA_") {
			t.Errorf("server: %v\nstderr:\n%s", err, serr.String())
		}
	case <-time.After(clitest.Slowdown * 30 * time.Second):
		t.Errorf("the server did not end")
	}
}

// A client whose -S is above the server's: the server's READ does not fit
// its buffer (a local protection error, status 4, as on rxe); it says so
// and disconnects, and the client, disconnected, ends with status 0, as
// rping's does.
func TestRpingSizeMismatch(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	rs, rc := cmServerClient(t, p, []string{"rping", "-s", "-v"}, []string{"rping", "-c", "-v", "-C", "2", "-S", "100", "-a", p.B.IP.String()}, cmtest.ServerLinger)
	cmtest.WantRun(t, "server", rs, 255, "", "cq completion failed status 4\nwait for RDMA_READ_COMPLETE state 11\nrping server failed: -1\nserver DISCONNECT EVENT...\n")
	cmtest.WantRun(t, "client", rc, 0, "", "client DISCONNECT EVENT...\nwait for RDMA_WRITE_ADV state 10\n")
}
