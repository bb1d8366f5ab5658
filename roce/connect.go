package roce

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/xroce/xroce/bth"
)

// Endpoint is what each side of a connection tells the other: enough to
// bring a QP to RTS towards it, and optionally a memory region to use.
type Endpoint struct {
	LID  uint16     // 0 on RoCE
	QPN  uint32     // 24-bit QP number
	PSN  uint32     // 24-bit first PSN the side sends
	GID  netip.Addr // the side's GID (IPv4-mapped or IPv6)
	MTU  MTU        // the side's active MTU; 0 means unknown (1024 assumed)
	RKey uint32     // optional remote key
	Addr uint64     // optional remote address
	QKey uint32     // UD Q_Key
}

// ConnectOptions are the attributes Connect sets. Zero values mean the
// defaults of ibv_rc_pingpong.
type ConnectOptions struct {
	// GIDIndex is the GID LocalEndpoint advertises: i > 0 is GID i; 0
	// means the first IPv4-mapped GID, or GID 0 (link-local) if none.
	GIDIndex    int
	Access      Access // remote operations allowed to the peer; 0 means remote read, write and atomic
	Timeout     int    // local ACK timeout, 4.096 µs × 2^Timeout; 0 means 14 (67 ms), < 0 means wait forever
	RetryCnt    int    // 0 means 7 (forever, as rxe); < 0 means no retry
	RNRRetry    int    // 0 means 7 (forever); < 0 means no retry
	MinRNRTimer uint8  // RNR timer code sent in RNR NAKs; 0 means 12 (0.64 ms)
	MaxRdAtomic uint8  // READs and atomics this side has outstanding as requester (max_rd_atomic); 0 means 16
	QKey        uint32 // UD Q_Key; 0 means 0x11111111

	// MaxDestRdAtomic is how many of the peer's READs and atomics this
	// side keeps responder resources for (max_dest_rd_atomic); 0 means
	// the same as MaxRdAtomic. perftest sets the requester's depth from
	// the peer's advertised out_reads and the responder's from its own.
	MaxDestRdAtomic uint8
	// HopLimit is the IPv4 TTL or IPv6 hop limit of the QP's packets; 0
	// means 64. ibv_rc_pingpong sends with 1.
	HopLimit uint8
	// TrafficClass is the IPv4 TOS or IPv6 traffic class of the QP's
	// packets (DSCP and ECN bits, as on the wire); 0 by default. ECN bits
	// 0 are sent as ECT(0) unless Config.CC.NoECT (qp.CCConfig).
	TrafficClass uint8
}

func (o ConnectOptions) withDefaults() ConnectOptions {
	if o.Access == 0 {
		o.Access = AccessRemoteRead | AccessRemoteWrite | AccessRemoteAtomic | AccessLocalWrite
	}
	pick := func(v, def int) int {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	o.Timeout, o.RetryCnt, o.RNRRetry = pick(o.Timeout, 14), pick(o.RetryCnt, 7), pick(o.RNRRetry, 7)
	if o.MinRNRTimer == 0 {
		o.MinRNRTimer = 12
	}
	if o.MaxRdAtomic == 0 {
		o.MaxRdAtomic = 16
	}
	if o.MaxDestRdAtomic == 0 {
		o.MaxDestRdAtomic = o.MaxRdAtomic
	}
	if o.QKey == 0 {
		o.QKey = 0x11111111
	}
	return o
}

// LocalEndpoint describes q for its peer: QPN, the given first PSN, the
// GID that opts.GIDIndex selects and the device's active MTU.
func (q *QP) LocalEndpoint(psn uint32, opts ConnectOptions) (Endpoint, error) {
	d := q.w.d
	e := Endpoint{QPN: q.qpn, PSN: psn & bth.PSNMask, MTU: d.info.ActiveMTU}
	if opts.GIDIndex != 0 {
		g, err := d.GID(opts.GIDIndex)
		e.GID = g
		return e, err
	}
	for _, g := range d.gids {
		if g.Is4In6() {
			e.GID = g
			return e, nil
		}
	}
	g, err := d.GID(0)
	e.GID = g
	return e, err
}

// Connect moves q from RESET to RTS towards remote (RC and UC), or to RTS
// for UD (remote is not used then but for the Q_Key), resolving the peer's
// MAC with Resolve. local is what was sent to the peer (its PSN is the
// first PSN q sends); when its GID is one of the device's GIDs of the
// peer's address family, it is the source address of q's packets (the
// address the peer expects them from), else the one Resolve picks. The
// path MTU is the smaller of both sides' MTUs.
func (q *QP) Connect(ctx context.Context, local, remote Endpoint, opts ConnectOptions) error {
	o := opts.withDefaults()
	init := Attr{State: StateInit, PKey: 0xffff, Port: 1, AccessFlags: o.Access, QKey: o.QKey}
	if q.Type() == UD {
		if err := q.Modify(&init, AttrState|AttrPKey|AttrPort|AttrQKey); err != nil {
			return err
		}
		if err := q.Modify(&Attr{State: StateRTR}, AttrState); err != nil {
			return err
		}
		return q.Modify(&Attr{State: StateRTS, SQPSN: bth.PSN(local.PSN & bth.PSNMask)}, AttrState|AttrSQPSN)
	}
	av, err := q.w.d.Resolve(ctx, remote.GID)
	if err != nil {
		return fmt.Errorf("connect qp %#x: %w", q.qpn, err)
	}
	if src, ok := q.w.d.sourceFor(local.GID, av.DstIP); ok {
		av.SrcIP = src
	}
	av.HopLimit, av.TrafficClass = o.HopLimit, o.TrafficClass
	mtu := q.w.d.info.ActiveMTU
	if remote.MTU != 0 && remote.MTU < mtu {
		mtu = remote.MTU
	}
	if err := q.Modify(&init, AttrState|AttrPKey|AttrPort|AttrAccessFlags); err != nil {
		return err
	}
	rtr := Attr{
		State: StateRTR, AV: av, PathMTU: mtu, DestQPN: remote.QPN, RQPSN: bth.PSN(remote.PSN & bth.PSNMask),
		MaxDestRdAtomic: o.MaxDestRdAtomic, MinRNRTimer: o.MinRNRTimer,
	}
	mask := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
	if q.Type() == RC {
		mask |= AttrMaxDestRdAtomic | AttrMinRNRTimer
	}
	if err := q.Modify(&rtr, mask); err != nil {
		return err
	}
	rts := Attr{
		State: StateRTS, SQPSN: bth.PSN(local.PSN & bth.PSNMask), Timeout: uint8(o.Timeout),
		RetryCnt: uint8(o.RetryCnt), RNRRetry: uint8(o.RNRRetry), MaxRdAtomic: o.MaxRdAtomic,
	}
	mask = AttrState | AttrSQPSN
	if q.Type() == RC {
		mask |= AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic
	}
	return q.Modify(&rts, mask)
}

// sourceFor returns gid, unmapped, if it is one of the device's GIDs and
// of dst's address family: the source address a QP that advertised gid
// should send from.
func (d *Device) sourceFor(gid, dst netip.Addr) (netip.Addr, bool) {
	if !gid.IsValid() {
		return netip.Addr{}, false
	}
	g := gid.Unmap().WithZone("")
	if g.Is4() != dst.Unmap().Is4() {
		return netip.Addr{}, false
	}
	for _, a := range d.local {
		if a.WithZone("") == g {
			return g, true
		}
	}
	return netip.Addr{}, false
}
