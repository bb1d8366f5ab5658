//go:build linux

package pingpong

import (
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/netns"
)

// runIn runs xroce pingpong with args, which start with "pingpong", in h's
// namespace, in the background.
func runIn(ctx context.Context, h *netns.Host, args ...string) <-chan clitest.Result {
	return clitest.RunIn(ctx, h, Cmd, args...)
}

// clientServer runs xroce pingpong as a server in p's B and a client in A.
func clientServer(t *testing.T, p *netns.Pair, port int, server, client []string) (rs, rc clitest.Result) {
	t.Helper()
	return clitest.ClientServer(t, p, port, Cmd, server, client)
}

var (
	ppLocalRE  = regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}[,:] GID ::ffff:198\.18\.0\.[12]$`)
	ppRemoteRE = regexp.MustCompile(`(?m)^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:198\.18\.0\.[12]$`)
	ppBytesRE  = regexp.MustCompile(`(?m)^(\d+) bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec$`)
)

func checkPingpong(t *testing.T, who string, r clitest.Result, size, iters int) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", who, r.Err, r.Stdout, r.Stderr)
	}
	for _, re := range []*regexp.Regexp{ppLocalRE, ppRemoteRE, ppBytesRE, clitest.ItersRE} {
		if !re.MatchString(r.Stdout) {
			t.Errorf("%s: no line matching %q in:\n%s", who, re, r.Stdout)
		}
	}
	if m := ppBytesRE.FindStringSubmatch(r.Stdout); m != nil && m[1] != fmt.Sprint(2*size*iters) {
		t.Errorf("%s: %s bytes, want %d", who, m[1], 2*size*iters)
	}
	if m := clitest.ItersRE.FindStringSubmatch(r.Stdout); m != nil && m[1] != fmt.Sprint(iters) {
		t.Errorf("%s: %s iters, want %d", who, m[1], iters)
	}
}

func TestPingpong(t *testing.T) {
	// MTU 3000: RoCE MTU 2048, for ud_pingpong's default size.
	p := netns.NewT(t, netns.Config{MTU: 3000})
	for i, tc := range []struct {
		name  string
		flags []string
		size  int
		iters int
	}{
		{"rc", []string{"-c"}, 4096, 1000},
		{"rc-1", []string{"-c", "-s", "1", "-n", "200"}, 1, 200},
		{"rc-big", []string{"-c", "-s", "65536", "-m", "512", "-n", "100", "-r", "10"}, 65536, 100},
		{"rc-events", []string{"-c", "-e", "-s", "3000", "-n", "300"}, 3000, 300},
		{"ud", []string{"--ud", "-c"}, 2048, 1000},
		{"ud-small", []string{"--ud", "-c", "-s", "64", "-n", "300", "-e"}, 64, 300},
		{"ud-mtu", []string{"--ud", "-c", "-s", "1024", "-n", "300"}, 1024, 300},
		{"uc", []string{"--uc", "-c", "-s", "3000", "-n", "300"}, 3000, 300},
		{"srq", []string{"--srq", "-c", "-n", "1000"}, 4096, 1000},
		{"srq-2", []string{"--srq", "-q", "2", "-s", "100", "-n", "500", "-e"}, 100, 500},
		{"rc-mtu2048", []string{"-c", "-m", "2048", "-s", "10000", "-n", "300"}, 10000, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := 18515 + i
			flags := append([]string{"pingpong", "-d"}, tc.flags...)
			flags = append(flags, "-p", fmt.Sprint(port), "-timeout", "10s")
			cli := append([]string{"pingpong", "-d", p.A.Ifname}, flags[2:]...)
			srv := append([]string{"pingpong", "-d", p.B.Ifname}, flags[2:]...)
			rs, rc := clientServer(t, p, port, srv, cli)
			checkPingpong(t, "server", rs, tc.size, tc.iters)
			checkPingpong(t, "client", rc, tc.size, tc.iters)
			t.Logf("client:\n%s", rc.Stdout)
		})
	}
}

// The client's bytes on the wire, as an ibv_rc_pingpong server sees them,
// and a peer that sends a zero GID (rc_pingpong without -g).
func TestPingpongWire(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A fake rc_pingpong server in B.
	var ln net.Listener
	if err := p.B.Do(func() (err error) { ln, err = net.Listen("tcp", ":18560"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		b := make([]byte, 52)
		if _, err := io.ReadFull(c, b); err != nil {
			got <- err.Error()
			return
		}
		c.Write([]byte("0000:000077:123456:00000000000000000000ffffc6120002\x00"))
		done := make([]byte, 5)
		_, err = io.ReadFull(c, done)
		got <- string(b) + string(done) + fmt.Sprint(err)
	}()
	r := <-runIn(ctx, p.A, "pingpong", "-d", p.A.Ifname, "-p", "18560", "-n", "1", "-timeout", "1s", p.B.IP.String())
	wire := <-got
	// LID 0, a random QPN (at least 0x11), a PSN, the GID.
	want := regexp.MustCompile(`^0000:[0-9a-f]{6}:[0-9a-f]{6}:00000000000000000000ffffc6120001\x00done\x00<nil>$`)
	if !want.MatchString(wire) {
		t.Errorf("the client sent %q", wire)
	}
	if r.Err == nil || !strings.Contains(r.Err.Error(), "no completion") {
		t.Errorf("client against a fake server: %v, want no completion", r.Err)
	}

	// rc_pingpong without -g sends a zero GID: our server says what to do.
	sc := runIn(ctx, p.B, "pingpong", "-d", p.B.Ifname, "-p", "18561", "-timeout", "2s")
	clitest.WaitListen(t, p.B, 18561, sc)
	if err := p.A.Do(func() error {
		c, err := net.Dial("tcp", p.B.IP.String()+":18561")
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("0000:000077:123456:00000000000000000000000000000000\x00"))
		io.Copy(io.Discard, c)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rs := <-sc
	if rs.Err == nil || !strings.Contains(rs.Err.Error(), "sent no GID: give it one with -g") {
		t.Errorf("server with a zero-GID client: %v", rs.Err)
	}
}
