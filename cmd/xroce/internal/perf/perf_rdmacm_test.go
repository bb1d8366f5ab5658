//go:build linux

package perf

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/internal/perftest"
	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/roce"
)

// cmQP is what a test sees of one data QP of a run with -R.
type cmQP struct {
	qpn  uint32
	attr roce.Attr
	rem  perftest.Dest // the address the peer sent for it
	same bool          // the connection's QP is the test's QP
	// UD: where the QP sends (nil, 0, 0 when it has not learnt it).
	av         *roce.AddressVector
	rqpn, qkey uint32
}

// cmSide is what a test sees of one side of a run with -R: its data QPs
// once connected, and its CM's counters and connections once closed.
type cmSide struct {
	qps      []cmQP
	tx, rx   map[mad.AttrID]uint64
	ended    int // data connections ended (Done) at the close
	errs     []error
	ctlState roce.QPState // the control QP's, once connected
}

// cmRecorder records both sides of one run with -R through perfCMHook.
type cmRecorder struct {
	mu    sync.Mutex
	sides map[bool]*cmSide // by server
}

func recordCM(t *testing.T) *cmRecorder {
	rec := &cmRecorder{sides: map[bool]*cmSide{}}
	perfCMHook = rec.hook
	t.Cleanup(func() { perfCMHook = nil })
	return rec
}

func (c *cmRecorder) hook(r *perfRun, stage string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sides[r.server]
	if s == nil {
		s = &cmSide{}
		c.sides[r.server] = s
	}
	switch stage {
	case "connected":
		s.ctlState = r.cm.ctl.qp.State()
		for i, conn := range r.cm.data {
			a, _ := conn.QP().Query()
			s.qps = append(s.qps, cmQP{qpn: conn.QP().QPN(), attr: a, same: conn.QP() == r.qps[i].qp})
		}
		if r.o.conn == "UD" { // no connections: SIDR told the QPs where to send
			for _, p := range r.qps {
				a, _ := p.qp.Query()
				s.qps = append(s.qps, cmQP{qpn: p.qp.QPN(), attr: a, same: true, av: p.av, rqpn: p.rqpn, qkey: p.qkey})
			}
		}
	case "closed":
		for i := range s.qps {
			s.qps[i].rem = r.rem[i]
		}
		st := r.cm.agent.Stats()
		s.tx, s.rx = map[mad.AttrID]uint64{}, map[mad.AttrID]uint64{}
		for _, a := range []mad.AttrID{mad.AttrREQ, mad.AttrREP, mad.AttrRTU, mad.AttrREJ, mad.AttrDREQ, mad.AttrDREP,
			mad.AttrSIDRREQ, mad.AttrSIDRREP} {
			i, _ := cm.AttrIndex(a)
			s.tx[a], s.rx[a] = st.Tx[i].Load(), st.Rx[i].Load()
		}
		for _, conn := range r.cm.data {
			select {
			case <-conn.Done():
				s.ended++
			default:
			}
			s.errs = append(s.errs, conn.Err())
		}
	}
}

// runInBuf is runIn with the run's stdout readable while it runs.
func runInBuf(ctx context.Context, h *netns.Host, out *clitest.SyncBuffer, args ...string) <-chan clitest.Result {
	c := make(chan clitest.Result, 1)
	go func() {
		var errb clitest.SyncBuffer
		err := h.Do(func() error { return runCmd(ctx, args, out, &errb) })
		c <- clitest.Result{Err: err, Stdout: out.String(), Stderr: errb.String()}
	}()
	return c
}

// cmClientServer runs a perf server with -R in B and, once it says it
// waits (it listens on the port then), a client in A towards B.
func cmClientServer(t *testing.T, p *netns.Pair, server, client []string) (rs, rc clitest.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*30*time.Second)
	defer cancel()
	var sout clitest.SyncBuffer
	sc := runInBuf(ctx, p.B, &sout, server...)
	for !strings.Contains(sout.String(), "Waiting for client to connect") {
		select {
		case r := <-sc:
			t.Fatalf("server ended before listening: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
		case <-time.After(5 * time.Millisecond):
		}
	}
	rc = <-runIn(ctx, p.A, append(client, p.B.IP.String())...)
	if rc.Err != nil {
		cancel()
	}
	rs = <-sc
	return rs, rc
}

// TestPerfRdmaCM: xroce perf -R against xroce perf -R, each test, with
// one and with four data QPs. Besides the result rows and perftest's -R
// banner, it checks that the QPs were connected by rdma_cm: one REQ, REP
// and RTU per data QP and one for the control connection, the QPs at RTS
// towards each other with the attributes rdma_cm gives (no READs for
// write and send, 16 both ways for read and atomics, the server's RNR
// timer 12), and every data connection ended by a DREQ.
func TestPerfRdmaCM(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	for i, tc := range []struct {
		test  string
		flags []string
		sizes []int
		iters int
		qps   int
	}{
		{"write_bw", []string{"-n", "200"}, []int{65536}, 200, 1},
		{"write_bw", []string{"-n", "100", "-s", "4096", "-q", "4"}, []int{4096}, 400, 4},
		{"read_bw", []string{"-n", "100", "-s", "10000", "-q", "4"}, []int{10000}, 400, 4},
		{"send_bw", []string{"-n", "200", "-s", "4096"}, []int{4096}, 200, 1},
		{"send_bw", []string{"-n", "100", "-s", "1000", "-q", "4", "--retry_count", "5"}, []int{1000}, 400, 4},
		{"atomic_bw", []string{"-n", "200"}, []int{8}, 200, 1},
		{"write_lat", []string{"-n", "200"}, []int{2}, 200, 1},
		{"read_lat", []string{"-n", "100", "-s", "100"}, []int{100}, 100, 1},
		{"send_lat", []string{"-n", "100", "-s", "64", "-T", "32"}, []int{64}, 100, 1},
	} {
		t.Run(fmt.Sprintf("%s%q", tc.test, tc.flags), func(t *testing.T) {
			rec := recordCM(t)
			port := 18700 + i
			flags := append([]string{tc.test, "-R", "-p", fmt.Sprint(port), "-timeout", "10s", "-stat-dir", ""}, tc.flags...)
			rs, rc := cmClientServer(t, p, append([]string{"perf", "-d", p.B.Ifname}, flags...),
				append([]string{"perf", "-d", p.A.Ifname}, flags...))
			hdr := perftest.ResultBW
			if strings.HasSuffix(tc.test, "_lat") {
				hdr = perftest.ResultLat
			}
			checkPerf(t, "client", rc, hdr, tc.sizes, tc.iters)
			if tc.test == "read_lat" {
				checkPerf(t, "server", rs, "", nil, 0) // perftest's read_lat server prints no table
			} else {
				// The others print their own result, or the client's.
				checkPerf(t, "server", rs, hdr, tc.sizes, tc.iters)
			}
			checkCMBanner(t, rc.Stdout, rs.Stdout, tc.qps, slices.Contains(tc.flags, "-T"))
			rec.check(t, tc.test, tc.qps)
			t.Logf("client:\n%s\nserver:\n%s", rc.Stdout, rs.Stdout)
		})
	}
}

// checkCMBanner checks perftest -R's banner and address lines: rdma_cm
// QPs ON, the server's lines about the client's QPs, every address
// printed as a SEND test's (no RKey or VAddr).
func checkCMBanner(t *testing.T, client, server string, qps int, tos bool) {
	t.Helper()
	ex := " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm"
	if tos {
		ex += " \tTOS    : 32"
	}
	if !strings.Contains(client, ex+"\n"+perftest.ResultLine) {
		t.Errorf("client banner lacks %q:\n%s", ex, client)
	}
	want := ex + "\n" + perftest.ResultLine + " Waiting for client rdma_cm QP to connect\n" +
		" Please run the same command with the IB/RoCE interface IP\n" + perftest.ResultLine
	if !strings.Contains(server, want) {
		t.Errorf("server banner lacks %q:\n%s", want, server)
	}
	for who, out := range map[string]string{"client": client, "server": server} {
		if n := len(perfAddrRE.FindAllString(out, -1)); n != 2*qps || strings.Contains(out, "RKey") {
			t.Errorf("%s: %d address lines (want %d), or with RKey:\n%s", who, n, 2*qps, out)
		}
		if !strings.Contains(out, fmt.Sprintf(" Number of qps   : %d\t", qps)) {
			t.Errorf("%s: banner without %d QPs", who, qps)
		}
	}
}

// check checks what the hook saw of both sides.
func (c *cmRecorder) check(t *testing.T, test string, qps int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, sv := c.sides[false], c.sides[true]
	if cl == nil || sv == nil || len(cl.qps) != qps || len(sv.qps) != qps || cl.tx == nil || sv.tx == nil {
		t.Fatalf("the hook saw client %+v, server %+v; want %d data QPs each, connected and closed", cl, sv, qps)
	}
	if cl.ctlState != roce.StateRTS || sv.ctlState != roce.StateRTS {
		t.Errorf("control QPs in %v (client), %v (server), want RTS", cl.ctlState, sv.ctlState)
	}
	depth := uint8(0)
	if test == "read_bw" || test == "read_lat" || test == "atomic_bw" {
		depth = perfOutReads
	}
	for side, s := range map[string]*cmSide{"client": cl, "server": sv} {
		peer := cl
		if s == cl {
			peer = sv
		}
		for i, q := range s.qps {
			a := q.attr
			if !q.same || a.State != roce.StateRTS || a.DestQPN != peer.qps[i].qpn || q.rem.QPN != a.DestQPN {
				t.Errorf("%s QP %d (%#x): %v towards %#x, the peer's QP %d is %#x and it sent %#x (same QP %v)",
					side, i, q.qpn, a.State, a.DestQPN, i, peer.qps[i].qpn, q.rem.QPN, q.same)
			}
			if a.MaxRdAtomic != depth || a.MaxDestRdAtomic != depth {
				t.Errorf("%s QP %d: max_rd_atomic %d, max_dest_rd_atomic %d; want %d both (rdma_cm's)", side, i, a.MaxRdAtomic, a.MaxDestRdAtomic, depth)
			}
			if read := a.AccessFlags&roce.AccessRemoteRead != 0; read != (depth > 0) {
				t.Errorf("%s QP %d: access %v: remote READ %v, want %v", side, i, a.AccessFlags, read, depth > 0)
			}
			if a.RQPSN != peer.qps[i].attr.SQPSN {
				t.Errorf("%s QP %d: expects PSN %#x, the peer sends from %#x", side, i, a.RQPSN, peer.qps[i].attr.SQPSN)
			}
		}
	}
	for i, q := range sv.qps {
		if q.attr.MinRNRTimer != perfMinRNRTimer {
			t.Errorf("server QP %d: RNR timer %d, want %d (perftest's)", i, q.attr.MinRNRTimer, perfMinRNRTimer)
		}
	}
	n := uint64(qps + 1) // and the control connection
	if cl.tx[mad.AttrREQ] != n || sv.rx[mad.AttrREQ] != n || sv.tx[mad.AttrREP] != n || cl.rx[mad.AttrREP] != n ||
		cl.tx[mad.AttrRTU] != n || sv.rx[mad.AttrRTU] != n || cl.tx[mad.AttrREJ]+sv.tx[mad.AttrREJ] != 0 {
		t.Errorf("CM messages: client sent %v, received %v; server sent %v, received %v; want %d REQ, REP, RTU and no REJ",
			cl.tx, cl.rx, sv.tx, sv.rx, n)
	}
	if dreqs := cl.tx[mad.AttrDREQ] + sv.tx[mad.AttrDREQ]; dreqs < uint64(qps) || cl.ended != qps || sv.ended != qps {
		t.Errorf("%d DREQs, %d and %d of %d data connections ended (client, server)", dreqs, cl.ended, sv.ended, qps)
	}
	t.Logf("CM messages: client sent %v, received %v; server sent %v, received %v", cl.tx, cl.rx, sv.tx, sv.rx)
	for i := range qps {
		if e := cl.errs[i]; e != nil && !errors.Is(e, cm.ErrDisconnected) {
			t.Errorf("client data connection %d ended with %v", i, e)
		}
		if e := sv.errs[i]; e != nil && !errors.Is(e, cm.ErrDisconnected) {
			t.Errorf("server data connection %d ended with %v", i, e)
		}
	}
}

// TestPerfRdmaCMErrors: an -R client whose server listens elsewhere is
// refused (REJ "invalid service ID") and says so, rather than waiting out
// its timeout (which would say something else); an -R server nobody
// connects to gives up after the timeout.
func TestPerfRdmaCMErrors(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()
	// The server's CM answers the client's REQ for another port. Both
	// have a timeout longer than a busy machine takes to get there: the
	// server waits for the client, and the REJ must be what ends it.
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	var sout clitest.SyncBuffer
	sc := runInBuf(sctx, p.B, &sout, "perf", "write_bw", "-R", "-d", p.B.Ifname, "-p", "18720", "-timeout", "60s", "-stat-dir", "")
	for !strings.Contains(sout.String(), "Waiting for client to connect") {
		select {
		case rs := <-sc:
			t.Fatalf("server ended before waiting for a client: %v\n%s%s", rs.Err, rs.Stdout, rs.Stderr)
		case <-time.After(5 * time.Millisecond):
		}
	}
	r := <-runIn(ctx, p.A, "perf", "write_bw", "-R", "-d", p.A.Ifname, "-p", "18721", "-timeout", "60s", "-stat-dir", "", p.B.IP.String())
	if r.Err == nil || base.ExitCode(r.Err) != 1 || !strings.Contains(r.Err.Error(), "nothing listens on port 18721 (is the server running, with -R?)") {
		t.Errorf("client of a port nobody listens on: %v", r.Err)
	}
	scancel()
	<-sc
	rs := <-runIn(ctx, p.B, "perf", "write_bw", "-R", "-d", p.B.Ifname, "-p", "18722", "-timeout", "2s", "-stat-dir", "")
	if rs.Err == nil || !strings.Contains(rs.Err.Error(), "no client connected to rdma_cm port 18722 within the timeout") {
		t.Errorf("server nobody connects to: %v", rs.Err)
	}
}

// TestPerfRdmaCMUD: xroce perf -R -c UD against itself, send_bw with one
// and three QPs and send_lat with a TOS. Besides the result rows and the
// banner, it checks that the QPs were found with SIDR and not connected:
// one SIDR_REQ and SIDR_REP per data QP in rdma_cm's UDP port space, one
// REQ, REP and RTU (the control connection), each client QP sending to
// the server's QP of its rank with rdma_cm's Q_Key; in send_lat the
// server answering the client's QP at the address (and TOS) its first
// datagram came from.
func TestPerfRdmaCMUD(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	for i, tc := range []struct {
		test  string
		flags []string
		size  int
		iters int
		qps   int
	}{
		{"send_bw", []string{"-n", "200", "-s", "1000"}, 1000, 200, 1},
		{"send_bw", []string{"-n", "100", "-s", "512", "-q", "3"}, 512, 300, 3},
		{"send_lat", []string{"-n", "100", "-s", "64", "-T", "32"}, 64, 100, 1},
	} {
		t.Run(fmt.Sprintf("%s%q", tc.test, tc.flags), func(t *testing.T) {
			rec := recordCM(t)
			port := 18730 + i
			flags := append([]string{tc.test, "-R", "-c", "UD", "-p", fmt.Sprint(port), "-timeout", "10s", "-stat-dir", ""}, tc.flags...)
			rs, rc := cmClientServer(t, p, append([]string{"perf", "-d", p.B.Ifname}, flags...),
				append([]string{"perf", "-d", p.A.Ifname}, flags...))
			hdr := perftest.ResultBW
			if tc.test == "send_lat" {
				hdr = perftest.ResultLat
			}
			checkPerf(t, "client", rc, hdr, []int{tc.size}, tc.iters)
			checkPerf(t, "server", rs, hdr, []int{tc.size}, tc.iters)
			tos := slices.Contains(tc.flags, "-T")
			checkCMBanner(t, rc.Stdout, rs.Stdout, tc.qps, tos)
			if !strings.Contains(rc.Stdout, " Connection type : UD") {
				t.Errorf("client banner without UD:\n%s", rc.Stdout)
			}
			rec.checkUD(t, tc.qps, tc.test == "send_lat", tos)
			t.Logf("client:\n%s\nserver:\n%s", rc.Stdout, rs.Stdout)
		})
	}
}

// checkUD checks what the hook saw of both sides of a run with -c UD.
func (c *cmRecorder) checkUD(t *testing.T, qps int, lat, tos bool) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, sv := c.sides[false], c.sides[true]
	if cl == nil || sv == nil || len(cl.qps) != qps || len(sv.qps) != qps || cl.tx == nil || sv.tx == nil {
		t.Fatalf("the hook saw client %+v, server %+v; want %d data QPs each, connected and closed", cl, sv, qps)
	}
	for side, s := range map[string]*cmSide{"client": cl, "server": sv} {
		for i, q := range s.qps {
			if q.attr.State != roce.StateRTS || q.attr.QKey != mad.RDMAUDPQKey {
				t.Errorf("%s QP %d (%#x): %v, Q_Key %#x; want RTS with rdma_cm's %#x", side, i, q.qpn, q.attr.State, q.attr.QKey, mad.RDMAUDPQKey)
			}
		}
	}
	for i, q := range cl.qps {
		if q.av == nil || q.rqpn != sv.qps[i].qpn || q.qkey != mad.RDMAUDPQKey {
			t.Errorf("client QP %d sends to QP %#x with Q_Key %#x (address %v); the server's QP %d is %#x", i, q.rqpn, q.qkey, q.av, i, sv.qps[i].qpn)
		} else if tos && q.av.TrafficClass != 32 {
			t.Errorf("client QP %d sends with TOS %d, want 32", i, q.av.TrafficClass)
		}
	}
	for i, q := range sv.qps {
		switch {
		case !lat && q.av != nil:
			t.Errorf("server QP %d of a bandwidth test learnt an address %v: no datagram should have told it", i, q.av)
		case lat && (q.av == nil || q.rqpn != cl.qps[i].qpn || q.qkey != mad.RDMAUDPQKey):
			t.Errorf("server QP %d sends to QP %#x with Q_Key %#x (address %v); the client's QP is %#x", i, q.rqpn, q.qkey, q.av, cl.qps[i].qpn)
		// The server learns the TOS from the datagrams: DSCP 8 (-T 32)
		// and the ECT(0) xroce adds to it.
		case lat && (q.av.DstIP != cl.qps[i].av.SrcIP || q.av.SrcIP != cl.qps[i].av.DstIP || tos && q.av.TrafficClass != 32|2):
			t.Errorf("server QP %d answers %v from %v with TOS %d; the client sends from %v to %v", i, q.av.DstIP, q.av.SrcIP, q.av.TrafficClass, cl.qps[i].av.SrcIP, cl.qps[i].av.DstIP)
		}
	}
	n := uint64(qps)
	if cl.tx[mad.AttrSIDRREQ] < n || sv.rx[mad.AttrSIDRREQ] < n || sv.tx[mad.AttrSIDRREP] < n || cl.rx[mad.AttrSIDRREP] < n ||
		cl.tx[mad.AttrREQ] != 1 || sv.tx[mad.AttrREP] != 1 || cl.tx[mad.AttrRTU] != 1 || cl.tx[mad.AttrREJ]+sv.tx[mad.AttrREJ] != 0 {
		t.Errorf("CM messages: client sent %v, received %v; server sent %v, received %v; want %d SIDR_REQ and SIDR_REP, "+
			"one REQ, REP and RTU (the control connection), no REJ", cl.tx, cl.rx, sv.tx, sv.rx, n)
	}
	t.Logf("CM messages: client sent %v, received %v; server sent %v, received %v", cl.tx, cl.rx, sv.tx, sv.rx)
}

// TestPerfRdmaCMUDNoListener: a -c UD client whose server runs RC finds
// nothing in the UDP port space: it asks again (SIDR status "service ID
// not supported") until the timeout, then says so.
func TestPerfRdmaCMUDNoListener(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	rec := recordCM(t)
	flags := []string{"send_bw", "-R", "-n", "10", "-p", "18740", "-timeout", "1s", "-stat-dir", ""}
	rs, rc := cmClientServer(t, p, append([]string{"perf", "-d", p.B.Ifname}, flags...),
		append([]string{"perf", "-d", p.A.Ifname, "-c", "UD"}, flags...))
	if rc.Err == nil || base.ExitCode(rc.Err) != 1 || !strings.Contains(rc.Err.Error(), "nothing listens on UDP port 18740 (is the server running, with -R -c UD?)") {
		t.Errorf("UD client of an RC server: %v", rc.Err)
	}
	if rs.Err == nil {
		t.Errorf("RC server of a UD client: no error")
	}
	t.Logf("client: %v\nserver: %v", rc.Err, rs.Err)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if cl := rec.sides[false]; cl == nil || cl.tx[mad.AttrSIDRREQ] < 2 {
		t.Errorf("the client's CM: %+v; want SIDR requests sent again", cl)
	}
}
