//go:build linux

package cli

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/roce"
)

// listenHook makes the tools signal on the returned channel each time one
// listens, for the rest of the test.
func listenHook(t *testing.T) <-chan struct{} {
	t.Helper()
	c := make(chan struct{}, 16)
	h := func() { c <- struct{}{} }
	testHookListen.Store(&h)
	t.Cleanup(func() { testHookListen.Store(nil) })
	return c
}

// serverLinger is how long cmServerClient's callers let a server end on
// its own once its client is done (it has then seen the client's DREQ or
// the end of its data, and needs only to tear down): long enough for a
// busy machine, so that only a server that would not end is cancelled.
const serverLinger = 30 * time.Second

// cmServerClient runs server (its arguments) in B, waits until it
// listens, runs client in A and returns both results. The server is
// cancelled once the client is done if it has not ended within linger.
func cmServerClient(t *testing.T, p *netns.Pair, server, client []string, linger time.Duration) (rs, rc clitest.Result) {
	t.Helper()
	listened := listenHook(t)
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	sc := runIn(sctx, p.B, server...)
	select {
	case <-listened:
	case r := <-sc:
		t.Fatalf("%q ended before listening: %v\nstdout:\n%s\nstderr:\n%s", server, r.Err, r.Stdout, r.Stderr)
	case <-ctx.Done():
		t.Fatalf("%q never listened", server)
	}
	rc = <-runIn(ctx, p.A, client...)
	select {
	case rs = <-sc:
	case <-time.After(linger):
		scancel()
		rs = <-sc
	}
	return rs, rc
}

// wantRun checks a run's exit status and its exact stdout and stderr.
func wantRun(t *testing.T, who string, r clitest.Result, code int, stdout, stderr string) {
	t.Helper()
	if got := ExitCode(r.Err); got != code || r.Stdout != stdout || r.Stderr != stderr {
		t.Errorf("%s: exit %d (%v), want %d\nstdout:\n%s\nwant:\n%s\nstderr:\n%s\nwant:\n%s", who, got, r.Err, code, r.Stdout, stdout, r.Stderr, stderr)
	}
}

// openCMIn opens the device of h's interface and its CM agent, closed
// when the test ends.
func openCMIn(t *testing.T, h *netns.Host) *cmDevice {
	t.Helper()
	var d *cmDevice
	if err := h.Do(func() (err error) { d, err = openCM(os.Stderr, "test", h.Ifname); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// newRCQP makes an RC QP on d, with a CQ of 16 entries for both queues,
// and returns it and its PD.
func newRCQP(d *cmDevice) (*roce.PD, *roce.QP, error) {
	pd, err := d.dev.AllocPD()
	if err != nil {
		return nil, nil, err
	}
	cq, err := d.dev.CreateCQ(16)
	if err != nil {
		return nil, nil, err
	}
	qp, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq})
	return pd, qp, err
}

// shortPeerTimeout makes cmPeerTimeout one second until the test ends.
func shortPeerTimeout(t *testing.T) {
	d := cmPeerTimeout
	t.Cleanup(func() { cmPeerTimeout = d })
	cmPeerTimeout = time.Second
}

// gaveUpLimit bounds how long a tool may take to give up on a silent or
// missing peer under shortPeerTimeout, from its start: its waits are then
// a second or two, and a busy machine may stretch them and the setup
// around them many times over; a tool that waited the default
// cmPeerTimeout (30 s, and twice that to connect) or for ever instead
// runs past it.
const gaveUpLimit = 30 * time.Second

// checkGaveUp fails t when a run that began at start took gaveUpLimit or
// longer to give up.
func checkGaveUp(t *testing.T, what string, start time.Time) {
	t.Helper()
	if d := time.Since(start); d >= gaveUpLimit {
		t.Errorf("%s took %v to give up: not the bounded wait of shortPeerTimeout", what, d)
	}
}

// rpingLines are the -v lines of pings 0..n-1 of size bytes.
func rpingLines(prefix string, n, size int) string {
	var b strings.Builder
	buf := make([]byte, size)
	for i := range n {
		rpingFill(buf, i)
		fmt.Fprintf(&b, "%s%s\n", prefix, cstring(buf))
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
			rs, rc := cmServerClient(t, p, append([]string{"rping"}, tc.server...), append([]string{"rping"}, tc.client...), serverLinger)
			wantRun(t, "client", rc, 0, rpingLines("ping data: ", tc.pings, tc.size), "client DISCONNECT EVENT...\n")
			wantRun(t, "server", rs, 0, rpingLines("server ping data: ", tc.pings, tc.size),
				"server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n")
		})
	}
}

const (
	ucmatoseServerOut = "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\n" +
		"data transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	ucmatoseClientOut = "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\n" +
		"data transfers complete\ntest complete\nreturn status 0\n"
)

// cmatestCase is a run of ucmatose or udaddy against itself: the flags of
// the server (on B's interface, named with -d) and of the client, and
// what each prints on stdout; both end with status 0, nothing on stderr.
type cmatestCase struct {
	name           string
	server, client []string
	sout, cout     string
}

// testCmatest runs tool's cases, the server in p.B, the client in p.A.
func testCmatest(t *testing.T, p *netns.Pair, tool string, cases []cmatestCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs, rc := cmServerClient(t, p, append([]string{tool, "-d", p.B.Ifname}, tc.server...),
				append([]string{tool}, tc.client...), serverLinger)
			wantRun(t, "client", rc, 0, tc.cout, "")
			wantRun(t, "server", rs, 0, tc.sout, "")
		})
	}
}

func TestUcmatose(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	b := p.B.IP.String()
	testCmatest(t, p, "ucmatose", []cmatestCase{
		{"default", nil, []string{"-s", b}, ucmatoseServerOut, ucmatoseClientOut},
		{"many", []string{"-c", "4", "-C", "50", "-S", "3000", "-p", "7500", "-b", b},
			[]string{"-s", b, "-c", "4", "-C50", "-S3000", "-p", "7500", "-b", p.A.IP.String(), "-t", "0x20"},
			ucmatoseServerOut, ucmatoseClientOut},
		{"ib-port-space", []string{"-P", "ib", "-f", "ip", "-m"}, []string{"-P", "ib", "-f", "ip", "-s", b, "-m"},
			strings.Replace(ucmatoseServerOut, "cmatose: disconnecting", "migrating to new event channel\ncmatose: disconnecting", 1),
			strings.Replace(ucmatoseClientOut, "test complete", "migrating to new event channel\ntest complete", 1)},
		{"no-data", []string{"-S", "0"}, []string{"-s", b, "-S", "0"},
			"cmatose: starting server\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n",
			"cmatose: starting client\ncmatose: connecting\ntest complete\nreturn status 0\n"},
	})
}

// The server's DREQs may come in any order: a server that disconnects
// the connection it accepted last first, and waits for its DREP before
// the next DREQ, gets every DREP from xroce ucmatose's client, as from
// cmatose, which answers each DISCONNECTED as it comes.
func TestUcmatoseClientDisconnectOrder(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	const conns = 3
	d := openCMIn(t, p.B)
	l, err := d.agent.Listen(netip.AddrPortFrom(netip.Addr{}, 7471), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		var accepted []*cm.Conn
		defer func() {
			for _, c := range accepted {
				c.Close()
			}
		}()
		for range conns {
			req, err := l.Accept(ctx)
			if err != nil {
				served <- err
				return
			}
			_, qp, err := newRCQP(d)
			if err == nil {
				err = cm.PrepareQP(qp)
			}
			var c *cm.Conn
			if err == nil {
				c, err = req.Accept(ctx, qp, nil)
			}
			if err != nil {
				served <- err
				return
			}
			accepted = append(accepted, c)
		}
		for i := len(accepted) - 1; i >= 0; i-- {
			if err := accepted[i].Disconnect(ctx); err != nil {
				served <- fmt.Errorf("connection %d accepted: %w", i, err)
				return
			}
		}
		served <- nil
	}()
	rc := <-runIn(ctx, p.A, "ucmatose", "-s", p.B.IP.String(), "-c", fmt.Sprint(conns), "-S", "0")
	wantRun(t, "client", rc, 0, "cmatose: starting client\ncmatose: connecting\ntest complete\nreturn status 0\n", "")
	if err := <-served; err != nil {
		t.Errorf("server: %v", err)
	}
	if i, _ := cm.AttrIndex(mad.AttrDREP); d.agent.Stats().Rx[i].Load() != conns {
		t.Errorf("server got %d DREPs, want %d", d.agent.Stats().Rx[i].Load(), conns)
	}
}

func TestRdmaServerClient(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	b := p.B.IP.String()
	for _, tc := range []struct {
		name           string
		server, client []string
	}{
		{"default", nil, []string{"-s", b}},
		{"port", []string{"-p", "7600", "-s", b}, []string{"-p7600", "-s", b, "-d", p.A.Ifname}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, rc := cmServerClient(t, p, append([]string{"rdma_server"}, tc.server...), append([]string{"rdma_client"}, tc.client...), serverLinger)
			wantRun(t, "client", rc, 0, "rdma_client: start\nrdma_client: end 0\n", "")
			wantRun(t, "server", rs, 0, "rdma_server: start\nrdma_server: end 0\n", "")
		})
	}
}

// startServer runs args in h until the test ends (or stop is called) and
// waits until it listens.
func startServer(t *testing.T, h *netns.Host, listened <-chan struct{}, args ...string) (res <-chan clitest.Result, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sc := runIn(ctx, h, args...)
	select {
	case <-listened:
	case r := <-sc:
		t.Fatalf("%q ended before listening: %v\nstdout:\n%s\nstderr:\n%s", args, r.Err, r.Stdout, r.Stderr)
	case <-time.After(clitest.Slowdown * 30 * time.Second):
		t.Fatalf("%q never listened", args)
	}
	return sc, cancel
}

// A client whose server's CM has no listener on the port gets REJ 8
// (invalid service ID) and says so, as the originals do.
func TestRpingUcmatoseRdmaClientRejected(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	b := p.B.IP.String()
	sc, stop := startServer(t, p.B, listenHook(t), "rping", "-s", "-p", "7174")
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"rping", "-c", "-a", b, "-p", "7175", "-C", "1"}, 255, "",
			"cma event RDMA_CM_EVENT_REJECTED, error 8\nwait for CONNECTED state 4\nconnect error -1\n"},
		{[]string{"ucmatose", "-s", b}, 8,
			"cmatose: starting client\ncmatose: connecting\ncmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\ntest complete\nreturn status 8\n", ""},
		{[]string{"ucmatose", "-s", b, "-c", "3"}, 8,
			"cmatose: starting client\ncmatose: connecting\ncmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\ntest complete\nreturn status 8\n", ""},
		{[]string{"rdma_client", "-s", b}, 255, "rdma_client: start\nrdma_client: end -1\n", "rdma_connect: Connection refused\n"},
	} {
		wantRun(t, strings.Join(tc.args, " "), <-runIn(ctx, p.A, tc.args...), tc.code, tc.stdout, tc.stderr)
	}
	// The server was not disturbed: a right client still gets through,
	// and the server ends with it.
	rc := <-runIn(ctx, p.A, "rping", "-c", "-a", b, "-C", "2", "-V")
	wantRun(t, "client", rc, 0, "", "client DISCONNECT EVENT...\n")
	wantRun(t, "server", <-sc, 0, "", "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n")
	stop()
}

// A peer that never answers (no CM at all at the address): the client
// gives up after its bounded wait instead of hanging.
func TestRpingUcmatoseRdmaClientUnanswered(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	shortPeerTimeout(t)
	b := p.B.IP.String()
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"rping", "-c", "-a", b}, 255, "",
			"cma event RDMA_CM_EVENT_UNREACHABLE, error -110\nwait for CONNECTED state 4\nconnect error -1\n"},
		{[]string{"ucmatose", "-s", b}, 146,
			"cmatose: starting client\ncmatose: connecting\ncmatose: event: RDMA_CM_EVENT_UNREACHABLE, error: -110\ntest complete\nreturn status -110\n", ""},
		{[]string{"rdma_client", "-s", b}, 255, "rdma_client: start\nrdma_client: end -1\n", "rdma_connect: Connection timed out\n"},
	} {
		start := time.Now()
		wantRun(t, strings.Join(tc.args, " "), <-runIn(ctx, p.A, tc.args...), tc.code, tc.stdout, tc.stderr)
		checkGaveUp(t, fmt.Sprintf("%q", tc.args), start)
	}
}

// runLive is runIn with the output readable while the tool runs.
func runLive(ctx context.Context, h *netns.Host, args ...string) (stdout *clitest.SyncBuffer, res <-chan clitest.Result) {
	var out clitest.SyncBuffer
	c := make(chan clitest.Result, 1)
	go func() {
		var errb clitest.SyncBuffer
		err := h.Do(func() error { return Run(ctx, args, &out, &errb) })
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
	listened := listenHook(t)

	t.Run("client", func(t *testing.T) {
		sc, _ := startServer(t, p.B, listened, "rping", "-s", "-v")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out, cc := runLive(ctx, p.A, "rping", "-c", "-v", "-V", "-a", b)
		waitLines(t, out, 200, cc)
		cancel()
		rc := <-cc
		if ExitCode(rc.Err) != exitInterrupted || rc.Stderr != "" {
			t.Errorf("client: exit %d, stderr %q", ExitCode(rc.Err), rc.Stderr)
		}
		k := checkPings(t, "client", "ping data: ", rc.Stdout, 200)
		rs := <-sc
		if n := checkPings(t, "server", "server ping data: ", rs.Stdout, k); n > k+1 || ExitCode(rs.Err) != 0 ||
			!strings.HasPrefix(rs.Stderr, "server DISCONNECT EVENT...\nwait for RDMA_") || !strings.HasSuffix(rs.Stderr, " state 10\n") ||
			strings.Count(rs.Stderr, "\n") != 2 {
			t.Errorf("server: exit %d, %d pings (client %d), stderr %q", ExitCode(rs.Err), n, k, rs.Stderr)
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
		if ExitCode(rs.Err) != exitInterrupted || rs.Stderr != "" {
			t.Errorf("server: exit %d, stderr %q", ExitCode(rs.Err), rs.Stderr)
		}
		k := checkPings(t, "server", "server ping data: ", rs.Stdout, 100)
		rc := <-cc
		if n := checkPings(t, "client", "ping data: ", rc.Stdout, k-1); n > k || ExitCode(rc.Err) != 0 ||
			!strings.HasPrefix(rc.Stderr, "client DISCONNECT EVENT...\nwait for RDMA_WRITE_") || !strings.HasSuffix(rc.Stderr, " state 10\n") ||
			strings.Count(rc.Stderr, "\n") != 2 {
			t.Errorf("client: exit %d, %d pings (server %d), stderr %q", ExitCode(rc.Err), n, k, rc.Stderr)
		}
	})
}

// rping -P serves client after client until stopped. (Clients at once
// would need a device each; one interface has one xroce device.)
func TestRpingPersistent(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	b := p.B.IP.String()
	sc, stop := startServer(t, p.B, listenHook(t), "rping", "-s", "-P", "-v")
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
		wantRun(t, fmt.Sprintf("client %d", i), rc, 0, rpingLines("ping data: ", n, 64), "client DISCONNECT EVENT...\n")
	}
	stop()
	rs := <-sc
	want := rpingLines("server ping data: ", 3, 64) + rpingLines("server ping data: ", 300, 64) + rpingLines("server ping data: ", 2, 64)
	wantRun(t, "server", rs, exitInterrupted, want, strings.Repeat("server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n", 3))
}

// fakeServer is an rdma_cm server in h that accepts one connection on
// port, posts one receive and then, vanish, closes its device as a
// machine that died would (no DREQ, nothing answers), or else stays
// silent. It returns once it listens.
func fakeServer(t *testing.T, h *netns.Host, port uint16, vanish bool) {
	t.Helper()
	d := openCMIn(t, h)
	l, err := d.agent.Listen(netip.AddrPortFrom(netip.Addr{}, port), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			return
		}
		pd, qp, err := newRCQP(d)
		if err != nil {
			return
		}
		mr, _ := pd.RegMR(make([]byte, 4096), roce.AccessLocalWrite)
		cm.PrepareQP(qp)
		qp.PostRecv(&roce.RecvWR{SGL: []roce.SGE{mr.SGE(0, 4096)}})
		if _, err := req.Accept(ctx, qp, nil); err == nil && vanish {
			d.dev.Close()
		}
	}()
}

// A server that dies or goes silent after the connection is up: the
// clients say so after their bounded wait and end with an error status.
func TestRpingUcmatoseRdmaClientPeerGone(t *testing.T) {
	shortPeerTimeout(t)
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()
	for _, vanish := range []bool{false, true} {
		for _, tc := range []struct {
			args           []string
			code           int
			stdout, stderr string
		}{
			{[]string{"rping", "-c", "-v", "-a"}, 255, "",
				"rping: nothing from the peer for 1s: giving up (is it still there?)\nwait for RDMA_WRITE_ADV state 11\nrping client failed: -1\n"},
			{[]string{"ucmatose", "-s"}, 146, "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\n" +
				"cmatose: nothing from the peer for 1s: giving up (is it still there?)\ntest complete\nreturn status -110\n", ""},
			{[]string{"rdma_client", "-s"}, 255, "rdma_client: start\nrdma_client: end -1\n",
				"rdma_client: nothing from the peer for 1s: giving up (is it still there?)\nrdma_get_recv_comp: Connection timed out\n"},
		} {
			t.Run(fmt.Sprintf("%s/vanish=%v", tc.args[0], vanish), func(t *testing.T) {
				p := netns.NewT(t, netns.Config{})
				port := map[string]uint16{"rping": 7174, "ucmatose": 7471, "rdma_client": 7471}[tc.args[0]]
				fakeServer(t, p.B, port, vanish)
				start := time.Now()
				args := append(tc.args, p.B.IP.String())
				// No DISCONNECT EVENT even when the server stays: an
				// application that has gone silent does not disconnect,
				// and its CM leaves rping's DREQ unanswered until then
				// (rdma_cm's DREQ_RCVD).
				stderr := tc.stderr
				r := <-runIn(ctx, p.A, args...)
				if vanish {
					// The server may die before it acknowledges the
					// client's SEND: then the send is what times out.
					r.Stderr = strings.Replace(r.Stderr, "rdma_get_send_comp", "rdma_get_recv_comp", 1)
				}
				wantRun(t, strings.Join(args, " "), r, tc.code, tc.stdout, stderr)
				checkGaveUp(t, "the client", start)
			})
		}
	}
}

// A client that dies once connected: the servers say so after their
// bounded wait instead of waiting for ever.
func TestRpingUcmatoseRdmaServerClientGone(t *testing.T) {
	shortPeerTimeout(t)
	silent := func(tool string) string {
		return tool + ": nothing from the peer for 1s: giving up (is it still there?)\n"
	}
	for _, tc := range []struct {
		args           []string
		port           uint16
		code           int
		stdout, stderr string
	}{
		{[]string{"rping", "-s", "-v"}, 7174, 255, "",
			silent("rping") + "wait for RDMA_READ_ADV state 11\nrping server failed: -1\n"},
		{[]string{"ucmatose"}, 7471, 146, "cmatose: starting server\ninitiating data transfers\ncompleting sends\n" +
			silent("cmatose") + "test complete\nreturn status -110\n", ""},
		{[]string{"rdma_server"}, 7471, 255, "rdma_server: start\nrdma_server: end -1\n",
			silent("rdma_server") + "rdma_get_recv_comp: Connection timed out\n"},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			p := netns.NewT(t, netns.Config{})
			sc, _ := startServer(t, p.B, listenHook(t), tc.args...)
			d := openCMIn(t, p.A)
			_, qp, err := newRCQP(d)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*30*time.Second)
			defer cancel()
			if _, err := d.agent.Dial(ctx, netip.AddrPortFrom(p.B.IP, tc.port), qp, &cm.DialOptions{Param: rpingConnParam()}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			d.dev.Close() // gone: no DREQ, no ACK, nothing
			select {
			case r := <-sc:
				wantRun(t, tc.args[0], r, tc.code, tc.stdout, tc.stderr)
			case <-ctx.Done():
				t.Fatal("the server still waits")
			}
			checkGaveUp(t, "the server", start)
		})
	}
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
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitInterrupted || cerr.String() != "" {
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

// What each tool asks for in its REQ (seen by a listening CM) and
// answers in its REP (seen by a dialing one): the originals' connection
// parameters.
func TestRpingUcmatoseRdmaServerClientConnParams(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	type param struct{ rr, id, retry, rnr uint8 }
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()

	t.Run("REQ", func(t *testing.T) {
		d := openCMIn(t, p.B)
		b := p.B.IP.String()
		for _, tc := range []struct {
			args []string
			port uint16
			want param
		}{
			{[]string{"rping", "-c", "-a", b}, 7174, param{1, 1, 7, 7}},
			{[]string{"rping", "-c", "-q", "-a", b, "-p", "7000"}, 7000, param{1, 1, 7, 7}},
			{[]string{"ucmatose", "-s", b}, 7471, param{1, 1, 5, 0}},
			{[]string{"rdma_client", "-s", b, "-p", "7472"}, 7472, param{128, 128, 7, 7}},
		} {
			l, err := d.agent.Listen(netip.AddrPortFrom(netip.Addr{}, tc.port), nil)
			if err != nil {
				t.Fatal(err)
			}
			cc := runIn(ctx, p.A, tc.args...)
			req, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := param{req.Param.ResponderResources, req.Param.InitiatorDepth, req.Param.RetryCount, req.Param.RNRRetryCount}
			if got != tc.want || req.Local != netip.AddrPortFrom(p.B.IP, tc.port) || req.Remote.Addr() != p.A.IP {
				t.Errorf("%q: REQ %+v from %v to %v, want %+v", tc.args, got, req.Remote, req.Local, tc.want)
			}
			req.Reject(nil)
			if r := <-cc; r.Err == nil {
				t.Errorf("%q: rejected, yet %v", tc.args, r.Err)
			}
			l.Close()
		}
	})

	t.Run("REP", func(t *testing.T) {
		listened := listenHook(t)
		for _, tc := range []struct {
			args []string
			port uint16
			want param // the REP's depths, crossed back to the dialer's view, and RNR retry
		}{
			{[]string{"rping", "-s"}, 7174, param{3, 2, 0, 7}},
			{[]string{"rping", "-s", "-q"}, 7174, param{1, 1, 0, 7}},
			{[]string{"ucmatose"}, 7471, param{3, 2, 0, 7}},
			{[]string{"rdma_server"}, 7471, param{3, 2, 0, 7}},
		} {
			sc, stop := startServer(t, p.B, listened, tc.args...)
			d := openCMIn(t, p.A)
			_, qp, err := newRCQP(d)
			if err != nil {
				t.Fatal(err)
			}
			c, err := d.agent.Dial(ctx, netip.AddrPortFrom(p.B.IP, tc.port), qp,
				&cm.DialOptions{Param: &cm.ConnParam{ResponderResources: 3, InitiatorDepth: 2, RetryCount: 7, RNRRetryCount: 7}})
			if err != nil {
				t.Fatalf("%q: %v", tc.args, err)
			}
			pr := c.Param()
			if got := (param{pr.ResponderResources, pr.InitiatorDepth, 0, pr.RNRRetryCount}); got != tc.want {
				t.Errorf("%q: REP %+v, want %+v", tc.args, got, tc.want)
			}
			c.Close()
			d.Close()
			stop()
			<-sc
		}
	})
}

// A client whose -S is above the server's: the server's READ does not fit
// its buffer (a local protection error, status 4, as on rxe); it says so
// and disconnects, and the client, disconnected, ends with status 0, as
// rping's does.
func TestRpingSizeMismatch(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	rs, rc := cmServerClient(t, p, []string{"rping", "-s", "-v"}, []string{"rping", "-c", "-v", "-C", "2", "-S", "100", "-a", p.B.IP.String()}, serverLinger)
	wantRun(t, "server", rs, 255, "", "cq completion failed status 4\nwait for RDMA_READ_COMPLETE state 11\nrping server failed: -1\nserver DISCONNECT EVENT...\n")
	wantRun(t, "client", rc, 0, "", "client DISCONNECT EVENT...\nwait for RDMA_WRITE_ADV state 10\n")
}

// Servers waiting for a client stop on SIGINT (their context's end) with
// the status of a process SIGINT killed.
func TestRpingUcmatoseUdaddyRdmaServerInterrupted(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	listened := listenHook(t)
	for _, tc := range []struct {
		args   []string
		stdout string
	}{
		{[]string{"rping", "-s"}, ""},
		{[]string{"rping", "-s", "-P"}, ""},
		{[]string{"ucmatose", "-c", "2"}, "cmatose: starting server\n"},
		{[]string{"udaddy", "-d", p.B.Ifname, "-c", "2"}, "udaddy: starting server\n"},
		{[]string{"rdma_server"}, "rdma_server: start\n"},
	} {
		sc, stop := startServer(t, p.B, listened, tc.args...)
		stop()
		select {
		case r := <-sc:
			wantRun(t, strings.Join(tc.args, " "), r, exitInterrupted, tc.stdout, "")
		case <-time.After(clitest.Slowdown * 30 * time.Second):
			t.Fatalf("%q did not stop", tc.args)
		}
	}
}
