//go:build linux

package conform

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/device"
	"github.com/xroce/xroce/conform"
	"github.com/xroce/xroce/internal/perftest"
	"github.com/xroce/xroce/internal/rogue"
)

// conformServeTools are the tools whose client xroce conform --serve
// answers: perftest's bandwidth tests, whose clients keep many requests
// outstanding.
var conformServeTools = []string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw"}

// checkServe checks the options of --serve.
func (o *conformOptions) checkServe(pos []string) error {
	i := slices.IndexFunc(conformTools, func(t conformTool) bool { return t.name == o.serve })
	switch {
	case o.via != "":
		return base.Usagef("conform: --via and --serve exclude each other")
	case len(pos) != 0:
		return base.Usagef("conform: --serve takes no HOST (the device under test connects), got %q", pos)
	case i < 0 || !slices.Contains(conformServeTools, o.serve):
		return base.Usagef("conform: --serve %q: want one of %v", o.serve, conformServeTools)
	case o.dev == "":
		return base.Usagef("conform: -d names the interface towards the device under test")
	case o.qps < 1 || o.qps > 256:
		return base.Usagef("conform: -q %d: want 1..256", o.qps)
	case o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 && o.mtu != 4096:
		return base.Usagef("conform: -m %d: want 256, 512, 1024, 2048 or 4096", o.mtu)
	case o.peerTimeout < 0 || o.peerTimeout > 31:
		return base.Usagef("conform: -peer-timeout %d: want 0..31", o.peerTimeout)
	case o.peerRetry < -1 || o.peerRetry > 7:
		return base.Usagef("conform: -peer-retry %d: want 0..7, or -1 for unknown", o.peerRetry)
	}
	o.tool = conformTools[i]
	return o.checkCommon()
}

// peerTemplate is the requester every QP of the tool's client is, but for
// its numbers.
func (o *conformOptions) peerTemplate(mtu int) conform.Peer {
	p := conform.Peer{MTU: mtu, Size: o.size, Timeout: uint8(o.peerTimeout), RetryKnown: o.peerRetry >= 0}
	if p.RetryKnown {
		p.RetryCnt = uint8(o.peerRetry)
	}
	switch o.tool.verb {
	case perftest.Write:
		p.Traffic = conform.TrafficWrite
	case perftest.Read:
		p.Traffic = conform.TrafficRead
	case perftest.Send:
		p.Traffic = conform.TrafficSend
	case perftest.Atomic:
		p.Traffic, p.Size = conform.TrafficAtomic, 8
	}
	return p
}

// serveSession is one connection from the tool's client: the exchange,
// and the puppet's server answering its QPs.
type serveSession struct {
	toolConn
	srv *conform.Server
}

// serveAccept waits for the client's connection and runs the exchange:
// the server makes its QPs and answers them from then on.
func serveAccept(ctx context.Context, o *conformOptions, pl *puppetLink, qpnBase uint32) (*serveSession, error) {
	actx, cancel := context.WithTimeout(ctx, o.wait)
	tcp, err := device.Dial(actx, "", o.port, "conform")
	cancel()
	if err != nil {
		return nil, err
	}
	s := &serveSession{toolConn: newToolConn(o, tcp)}
	if err := s.start(pl, qpnBase); err != nil {
		tcp.Close()
		return nil, fmt.Errorf("conform: %s exchange with %s: %w", o.tool.name, s.remote, err)
	}
	return s, nil
}

// start runs perftest's exchange as its server does and makes the
// puppet's QPs.
func (s *serveSession) start(pl *puppetLink, qpnBase uint32) error {
	o := s.o
	s.tcp.SetDeadline(time.Now().Add(o.timeout))
	defer s.tcp.SetDeadline(time.Time{})
	vmac, err := neighborMAC(o.dev, s.remote)
	if err != nil {
		return err
	}
	peer := &rogue.Peer{Link: pl.link, MAC: pl.mac, IP: s.local, VictimMAC: vmac, VictimIP: s.remote}
	if s.srv, err = conform.NewServer(rogue.NewPuppet(peer), conform.ServerConfig{IP: s.local, PeerIP: s.remote, MAC: pl.mac, PeerMAC: vmac}); err != nil {
		return err
	}
	s.pc = perftest.NewConn(s.tcp, false)
	cycle, mtu, err := perftestStart(s.pc, o.mtu)
	if err != nil {
		return err
	}
	s.mtu = mtu
	gid := netip.AddrFrom16(s.local.As16()).As16()
	// perftest moves each request's address on by its size within its
	// cycle buffer: offer twice that.
	region := 2 * max(o.size, cycle)
	for i := range o.qps {
		va, rkey := s.srv.Region(region)
		s.my = append(s.my, perftest.Dest{OutReads: 16, QPN: qpnBase + uint32(i), PSN: rand.Uint32() & 0xffffff, RKey: rkey, VAddr: va, GID: gid})
	}
	s.rem = make([]perftest.Dest, o.qps)
	// Once the client's addresses are in, the puppet's QPs go to RTS
	// (with their receives posted, for send) before the barriers.
	return perftestAddresses(s.pc, s.my, s.rem, o.tool.verb == perftest.Send, func() error {
		tmpl := o.peerTemplate(s.mtu)
		for i := range s.my {
			p := tmpl
			p.QPN, p.PSN = s.rem[i].QPN, bth.PSN(s.rem[i].PSN&bth.PSNMask)
			c := conform.ServeQP{QPN: s.my[i].QPN, PSN: bth.PSN(s.my[i].PSN), Peer: p}
			if o.tool.verb == perftest.Send {
				c.Recvs, c.RecvLen = 512, o.size
			}
			if err := s.srv.AddQP(c); err != nil {
				return err
			}
		}
		return nil
	})
}

// finish ends the exchange as perftest's server does once the client's
// run is over: a barrier and the results (not for send), then the last
// exchange. It runs beside the server's loop, bounded by the linger.
func (s *serveSession) finish() error {
	s.tcp.SetDeadline(time.Now().Add(s.o.linger))
	return s.endExchange()
}

// end lets the client end its run (answering it until it closes, up to
// the linger), then closes the connection. A client still sending then
// gets a fatal NAK on each QP, so that it exits rather than retry for
// ever.
func (s *serveSession) end() {
	done := make(chan error, 1)
	if s.dead {
		done <- errors.New("a fatal check ran")
	} else {
		go func() { done <- s.finish() }()
	}
	var ended bool
	s.srv.Serve(s.o.linger+time.Second, func() bool {
		select {
		case err := <-done:
			ended = err == nil
			return true
		default:
			return false
		}
	})
	s.tcp.Close()
	if !ended || s.dead {
		s.srv.Abort(2 * time.Second)
	}
}

// conformServe runs the requester checks: sessions of the tool's client,
// one QP per check.
func conformServe(ctx context.Context, e *base.Env, o *conformOptions) error {
	checks, pl, progress, err := o.start(e)
	if err != nil {
		return err
	}
	defer pl.Close()
	rep := Report{Tool: o.tool.name + " (client)", Host: fmt.Sprintf("port %d", o.port)}
	fmt.Fprintf(progress, "xroce conform: serving %s on port %d on %s, %d checks of its client's requester\n", o.tool.name, o.port, o.dev, len(checks))
	base := uint32(0x100000 + rand.IntN(0xe00000))
	var s *serveSession
	defer func() {
		if s != nil {
			s.end()
		}
	}()
	sessions := 0
	for i, c := range checks {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if tmpl := o.peerTemplate(o.mtu); !tmpl.Has(c.PeerNeeds) {
			r := conform.NewServeTrial(c, &tmpl, nil).Result()
			rep.Results = append(rep.Results, r)
			fmt.Fprintf(progress, "  [%2d/%d] %-26s %-5v %s\n", i+1, len(checks), c.Name, r.Verdict, r.Observed)
			continue
		}
		if s != nil && (s.dead || s.next >= len(s.my)) {
			s.end()
			s = nil
		}
		if s == nil {
			sessions++
			if s, err = serveAccept(ctx, o, pl, base+uint32(sessions*o.qps)); err != nil {
				return err
			}
			if sessions == 1 {
				fmt.Fprintf(progress, "  client %s, path MTU %d\n", s.remote, s.mtu)
			}
			// Let its run start before the first check.
			if err := s.srv.Serve(200*time.Millisecond, nil); err != nil {
				return fmt.Errorf("conform: %w", err)
			}
		}
		qpn := s.my[s.next].QPN
		s.next++
		r := s.srv.Run(c, qpn)
		rep.Results = append(rep.Results, r)
		fmt.Fprintf(progress, "  [%2d/%d] %-26s %-5v %5.2f s  QP %#06x\n", i+1, len(checks), c.Name, r.Verdict, r.Duration.Seconds(), s.rem[s.next-1].QPN)
		if o.verbose && !o.json {
			conformDiagram(e.Stdout, &r, s.local, s.remote)
		}
		if c.Fatal && r.Verdict != conform.Skip {
			s.dead = true
		}
	}
	if s != nil {
		s.end()
		s = nil
	}
	return o.finish(e, pl, &rep)
}
