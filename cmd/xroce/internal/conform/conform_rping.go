//go:build linux

package conform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/conform"
	"github.com/xroce/xroce/internal/rogue"
	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/nic"
	"github.com/xroce/xroce/qp"
)

// cmSession is one RDMA CM connection the puppet made itself to an rping
// server (rping -s -P on the device under test): a cm.Engine whose MADs
// go out of the puppet's socket as UD SENDs to QP 1 and whose answers the
// puppet's socket hands back. The REQ names the puppet's QP; the REP
// gives the server's QPN and, as its Starting PSN, the first PSN it
// expects (IBTA §12.7.9: a Starting PSN is what its sender receives).
// rping's server posts a receive of its 16-byte info message and offers
// no region (its go-ahead messages are zeros, never its buffer's key), so
// the target is the QP and that receive.
type cmSession struct {
	eng     *cm.Engine
	pup     *rogue.Puppet
	gsi     *rogue.Peer // the puppet's QP 1 towards the server's QP 1
	id      uint32
	self    uint32
	psn     uint32
	rep     mad.REPFields
	replied bool
	err     error
}

// SendMAD implements cm.Output: the MAD as a UD SEND ONLY from QP 1 to
// the server's QP 1, with the GSI's well-known Q_Key, as CM MADs travel on
// RoCE v2.
func (s *cmSession) SendMAD(_ *cm.Peer, m mad.MAD) {
	f := s.gsi.Build(bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.UDSendOnly, DestQP: qp.GSIQPN},
		DETH: bth.DETHFields{QKey: qp.GSIQKey, SrcQP: qp.GSIQPN}}, m)
	if err := s.gsi.Send(f); err != nil && s.err == nil {
		s.err = err
	}
}

// Event implements cm.Handler: the REP, or why there is none.
func (s *cmSession) Event(ev *cm.Event) {
	switch ev.Type {
	case cm.EventReply:
		s.rep, s.replied = ev.REP.Fields(), true
		s.rep.PrivateData = nil
	case cm.EventRejected:
		s.err = fmt.Errorf("rejected: %v", ev.Reason)
	case cm.EventUnreachable:
		s.err = errors.New("no answer to the REQ")
	}
}

// Received implements cm.Handler: the puppet's QP never tells.
func (s *cmSession) Received(uint32) bool { return false }

// cmDialRping connects the puppet's QP self to the rping server at
// o.host:o.port over RDMA CM, as rping's client does (responder
// resources and initiator depth 1, retry and RNR retry 7), and sends the
// RTU once the REP came. It returns the session and the target.
func cmDialRping(ctx context.Context, o *conformOptions, pl *puppetLink, self uint32) (*cmSession, conform.Target, error) {
	var t conform.Target
	host, err := netip.ParseAddr(o.host)
	if err != nil {
		return nil, t, fmt.Errorf("conform: --via rping: HOST %q: want an IP address", o.host)
	}
	host = host.Unmap()
	local, vmac, err := cmNeighbor(ctx, o, host)
	if err != nil {
		return nil, t, fmt.Errorf("conform: %w", err)
	}
	peer := &rogue.Peer{Link: pl.link, MAC: pl.mac, IP: local, QPN: self, VictimMAC: vmac, VictimIP: host}
	gsi := *peer
	gsi.QPN, gsi.VictimQPN = qp.GSIQPN, qp.GSIQPN
	s := &cmSession{pup: rogue.NewPuppet(peer), gsi: &gsi, self: self, psn: rand.Uint32() & bth.PSNMask}
	if s.eng, err = cm.NewEngine(cm.Config{GUID: cm.GUID(pl.mac), Out: s, Handler: s}); err != nil {
		return nil, t, err
	}
	sport := uint16(rand.IntN(0x4000) + 0xc000)
	var priv [mad.REQPrivateSize]byte
	mad.CMAHeader(priv[:mad.CMAHeaderSize]).Encode(local, host, sport)
	gidOf := func(a netip.Addr) [16]byte { return a.As16() } // IPv4 maps into ::ffff:0:0/96
	req := cm.ConnectRequest{PacketLifeTime: cm.PacketLifeTime, REQ: mad.REQFields{
		ServiceID: mad.ServiceID(mad.PortSpaceTCP, uint16(o.port)), LocalQPN: self,
		ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: cm.ResponseTimeout,
		StartingPSN: s.psn, LocalCMResponseTimeout: cm.ResponseTimeout, RetryCount: 7, PKey: 0xffff,
		PathMTU: uint8(mtuCode(o.mtu)), RNRRetryCount: 7, MaxCMRetries: 3,
		PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xffff,
		PrimaryLocalGID: gidOf(local), PrimaryRemoteGID: gidOf(host), PrimaryHopLimit: 64,
		PrimaryLocalACKTimeout: 18, PrivateData: priv[:],
	}}
	cmPeer := &cm.Peer{Addr: host, Local: local, MAC: vmac}
	if s.id, err = s.eng.Connect(s.pup.Now(), cmPeer, &req); err != nil {
		return nil, t, err
	}
	deadline := s.pup.Now() + o.timeout
	var f bth.Frame
	for !s.replied && s.err == nil {
		if ctx.Err() != nil {
			return nil, t, ctx.Err()
		}
		now := s.pup.Now()
		if now > deadline {
			return nil, t, fmt.Errorf("conform: rping at %v port %d: no REP within %v", host, o.port, o.timeout)
		}
		next := min(s.eng.Poll(now), deadline, now+100*time.Millisecond)
		got, err := s.pup.Receive(next)
		if err != nil {
			return nil, t, err
		}
		for _, g := range got {
			if f.Decode(g.Data) != nil || f.Opcode() != bth.UDSendOnly || f.BTH.DestQP() != qp.GSIQPN {
				continue
			}
			from := &cm.Peer{Addr: f.SrcIP().Unmap(), Local: f.DstIP().Unmap(), MAC: vmac}
			s.eng.Input(g.At, f.Payload, from)
		}
	}
	if s.err != nil {
		return nil, t, fmt.Errorf("conform: rping at %v port %d: %w", host, o.port, s.err)
	}
	if err := s.eng.Establish(s.pup.Now(), s.id, nil); err != nil {
		return nil, t, err
	}
	t = o.template()
	t.QPN, t.PSN, t.MTU = s.rep.LocalQPN, bth.PSN(s.rep.StartingPSN&bth.PSNMask), o.mtu
	t.MaxDestRdAtomic = int(s.rep.ResponderResources)
	t.MinRNRTimer = 0 // the kernel's CM gives rping's QP timer code 0 (655.36 ms), which Target cannot name
	return s, t, nil
}

// close disconnects: a DREQ, and the DREP (or the server's own DREQ,
// after a check that broke the QP) answered for a short while.
func (s *cmSession) close() {
	if s.eng.Disconnect(s.pup.Now(), s.id, nil) != nil {
		return
	}
	end := s.pup.Now() + 200*time.Millisecond
	var f bth.Frame
	for s.pup.Now() < end {
		got, err := s.pup.Receive(min(s.eng.Poll(s.pup.Now()), end))
		if err != nil {
			return
		}
		for _, g := range got {
			if f.Decode(g.Data) == nil && f.Opcode() == bth.UDSendOnly && f.BTH.DestQP() == qp.GSIQPN {
				s.eng.Input(g.At, f.Payload, &cm.Peer{Addr: f.SrcIP().Unmap(), Local: f.DstIP().Unmap(), MAC: s.gsi.VictimMAC})
			}
		}
	}
}

// cmNeighbor returns the local address towards host and host's Ethernet
// address: with no TCP exchange to make the kernel resolve it, nic's
// resolver has the kernel do it (a datagram to the discard port).
func cmNeighbor(ctx context.Context, o *conformOptions, host netip.Addr) (netip.Addr, [6]byte, error) {
	r, err := nic.OpenResolver(o.dev)
	if err != nil {
		return netip.Addr{}, [6]byte{}, err
	}
	defer r.Close()
	rctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	hop, err := r.Resolve(rctx, host)
	if err != nil {
		return netip.Addr{}, hop.MAC, err
	}
	local := hop.Src
	if !local.IsValid() {
		c, err := net.Dial("udp", net.JoinHostPort(host.String(), "9"))
		if err != nil {
			return netip.Addr{}, hop.MAC, err
		}
		la, _ := netip.ParseAddrPort(c.LocalAddr().String())
		c.Close()
		local = la.Addr().Unmap()
	}
	return local, hop.MAC, nil
}

// conformRunCM runs the responder checks against an rping server: a
// connection of its own for each check that the server's QP can host
// (QP numbers from base), disconnected after it.
func conformRunCM(ctx context.Context, e *base.Env, o *conformOptions, checks []*conform.Check, pl *puppetLink,
	progress io.Writer, rep *Report, base uint32) error {
	for i, c := range checks {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if o.skipUnhosted(progress, rep, c, i, len(checks)) {
			continue
		}
		self := base + uint32(i)
		s, t, err := cmDialRping(ctx, o, pl, self)
		if err != nil {
			return err
		}
		r := conform.Run(s.pup, c, &t, s.pup.Peer, self)
		s.close()
		o.reportRun(e, progress, rep, &r, i, len(checks), t.QPN, s.pup.IP, s.pup.VictimIP)
	}
	return o.finish(e, pl, rep)
}
