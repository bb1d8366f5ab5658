//go:build linux

package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/roce"
)

// A client whose server's CM has no listener on the port gets REJ 8
// (invalid service ID) and says so, as the originals do.
func TestRpingUcmatoseRdmaClientRejected(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	b := p.B.IP.String()
	sc, stop := startServer(t, p.B, cmtest.ListenHook(t), "rping", "-s", "-p", "7174")
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
		cmtest.WantRun(t, strings.Join(tc.args, " "), <-runIn(ctx, p.A, tc.args...), tc.code, tc.stdout, tc.stderr)
	}
	// The server was not disturbed: a right client still gets through,
	// and the server ends with it.
	rc := <-runIn(ctx, p.A, "rping", "-c", "-a", b, "-C", "2", "-V")
	cmtest.WantRun(t, "client", rc, 0, "", "client DISCONNECT EVENT...\n")
	cmtest.WantRun(t, "server", <-sc, 0, "", "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n")
	stop()
}

// A peer that never answers (no CM at all at the address): the client
// gives up after its bounded wait instead of hanging.
func TestRpingUcmatoseRdmaClientUnanswered(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	cmtest.ShortPeerTimeout(t)
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
		cmtest.WantRun(t, strings.Join(tc.args, " "), <-runIn(ctx, p.A, tc.args...), tc.code, tc.stdout, tc.stderr)
		cmtest.CheckGaveUp(t, fmt.Sprintf("%q", tc.args), start)
	}
}

// fakeServer is an rdma_cm server in h that accepts one connection on
// port, posts one receive and then, vanish, closes its device as a
// machine that died would (no DREQ, nothing answers), or else stays
// silent. It returns once it listens.
func fakeServer(t *testing.T, h *netns.Host, port uint16, vanish bool) {
	t.Helper()
	d := cmtest.OpenCMIn(t, h)
	l, err := d.Agent.Listen(netip.AddrPortFrom(netip.Addr{}, port), nil)
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
		pd, qp, err := cmtest.NewRCQP(d)
		if err != nil {
			return
		}
		mr, _ := pd.RegMR(make([]byte, 4096), roce.AccessLocalWrite)
		cm.PrepareQP(qp)
		qp.PostRecv(&roce.RecvWR{SGL: []roce.SGE{mr.SGE(0, 4096)}})
		if _, err := req.Accept(ctx, qp, nil); err == nil && vanish {
			d.Dev.Close()
		}
	}()
}

// A server that dies or goes silent after the connection is up: the
// clients say so after their bounded wait and end with an error status.
func TestRpingUcmatoseRdmaClientPeerGone(t *testing.T) {
	cmtest.ShortPeerTimeout(t)
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
				cmtest.WantRun(t, strings.Join(args, " "), r, tc.code, tc.stdout, stderr)
				cmtest.CheckGaveUp(t, "the client", start)
			})
		}
	}
}

// A client that dies once connected: the servers say so after their
// bounded wait instead of waiting for ever.
func TestRpingUcmatoseRdmaServerClientGone(t *testing.T) {
	cmtest.ShortPeerTimeout(t)
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
			sc, _ := startServer(t, p.B, cmtest.ListenHook(t), tc.args...)
			d := cmtest.OpenCMIn(t, p.A)
			_, qp, err := cmtest.NewRCQP(d)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*30*time.Second)
			defer cancel()
			if _, err := d.Agent.Dial(ctx, netip.AddrPortFrom(p.B.IP, tc.port), qp, &cm.DialOptions{Param: rdmacm.RpingConnParam()}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			d.Dev.Close() // gone: no DREQ, no ACK, nothing
			select {
			case r := <-sc:
				cmtest.WantRun(t, tc.args[0], r, tc.code, tc.stdout, tc.stderr)
			case <-ctx.Done():
				t.Fatal("the server still waits")
			}
			cmtest.CheckGaveUp(t, "the server", start)
		})
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
		d := cmtest.OpenCMIn(t, p.B)
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
			l, err := d.Agent.Listen(netip.AddrPortFrom(netip.Addr{}, tc.port), nil)
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
		listened := cmtest.ListenHook(t)
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
			d := cmtest.OpenCMIn(t, p.A)
			_, qp, err := cmtest.NewRCQP(d)
			if err != nil {
				t.Fatal(err)
			}
			c, err := d.Agent.Dial(ctx, netip.AddrPortFrom(p.B.IP, tc.port), qp,
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

// Servers waiting for a client stop on SIGINT (their context's end) with
// the status of a process SIGINT killed.
func TestRpingUcmatoseUdaddyRdmaServerInterrupted(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	listened := cmtest.ListenHook(t)
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
			cmtest.WantRun(t, strings.Join(tc.args, " "), r, rdmacm.ExitInterrupted, tc.stdout, "")
		case <-time.After(clitest.Slowdown * 30 * time.Second):
			t.Fatalf("%q did not stop", tc.args)
		}
	}
}

// xroce help of a clone of a C tool prints what the tool's -h prints on
// stdout (its usage, which the tool's own tests check), with no failure,
// where the tool's -h has its status.
func TestHelpClones(t *testing.T) {
	for _, name := range []string{"rping", "ucmatose", "udaddy", "rdma_server", "rdma_client"} {
		var usage, out, errb bytes.Buffer
		if err := Run(context.Background(), []string{name, "-h"}, &usage, &errb); !Reported(err) || usage.Len() == 0 {
			t.Errorf("%s -h: %v, stdout %q", name, err, usage.String())
		}
		if err := Run(context.Background(), []string{"help", name}, &out, &errb); err != nil || out.String() != usage.String() {
			t.Errorf("help %s: %v\n%s\nwant:\n%s", name, err, out.String(), usage.String())
		}
	}
}
