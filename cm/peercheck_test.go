package cm

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xroce/xroce/mad"
)

// establishedPair connects a to b's listener on the simulated network and
// returns a's and b's comm IDs and the QPNs of a's and b's ends.
func establishedPair(t *testing.T, s *simNet, a, b *simNode) (aID, bID, aQPN, bQPN uint32) {
	t.Helper()
	if err := b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471)); err != nil {
		t.Fatal(err)
	}
	aID = s.connect(a, b, nil)
	s.run(time.Second)
	if a.e.State(aID) != StateEstablished || b.has(EventEstablished) != 1 {
		t.Fatalf("not established: %v, b's events %+v", a.e.State(aID), b.events)
	}
	bID = b.events[0].ID
	// simNode accepts with its peer's QPN + 0x100; connectWith's QPN is 0x11.
	return aID, bID, 0x11, 0x11 + 0x100
}

// forge is a CM message of attr from the attacker's address to n, its
// body filled by fill.
func forge(n *simNode, from netip.Addr, attr mad.AttrID, fill func(body []byte)) {
	var m [mad.Size]byte
	mm := mad.MAD(m[:])
	mm.EncodeCM(0x77, attr, 0)
	fill(mm.Body())
	n.e.Input(n.net.now, m[:], &Peer{Addr: from, Local: n.addr})
}

// TestForeignSenderChangesNothing: a host that is not a connection's
// peer but knows (or guesses) its comm IDs and QPNs sends every message
// that could end or change it, to both ends. Nothing changes: each is
// counted as unmatched and the connection stays established with no
// event raised; the same DREQ from the real peer then ends it.
func TestForeignSenderChangesNothing(t *testing.T) {
	s := newSimNet(t)
	a, b := s.node("198.18.0.1", 1), s.node("198.18.0.2", 2)
	evil := netip.MustParseAddr("198.18.0.66")
	aID, bID, aQPN, bQPN := establishedPair(t, s, a, b)
	aEvents, bEvents := len(a.events), len(b.events)
	unmatchedA, unmatchedB := a.e.Stats().RxUnmatched.Load(), b.e.Stats().RxUnmatched.Load()

	// Each message as the peer would send it, to the end it names.
	for _, tc := range []struct {
		to             *simNode
		attr           mad.AttrID
		local, remote  uint32 // the sender's and the receiver's comm IDs
		receiverQPN    uint32
		rejected, mraD uint8
	}{
		{b, mad.AttrDREQ, aID, bID, bQPN, 0, 0},
		{a, mad.AttrDREQ, bID, aID, aQPN, 0, 0},
		{b, mad.AttrDREP, aID, bID, 0, 0, 0},
		{a, mad.AttrDREP, bID, aID, 0, 0, 0},
		{b, mad.AttrREJ, aID, bID, 0, mad.MsgOther, 0},
		{a, mad.AttrREJ, bID, aID, 0, mad.MsgOther, 0},
		{a, mad.AttrREJ, 0, aID, 0, mad.MsgREQ, 0},
		{b, mad.AttrRTU, aID, bID, 0, 0, 0},
		{a, mad.AttrMRA, bID, aID, 0, 0, mad.MsgREQ},
		{b, mad.AttrMRA, aID, bID, 0, 0, mad.MsgREP},
	} {
		forge(tc.to, evil, tc.attr, func(body []byte) {
			switch tc.attr {
			case mad.AttrDREQ:
				mad.DREQ(body).Encode(&mad.DREQFields{LocalCommID: tc.local, RemoteCommID: tc.remote, RemoteQPN: tc.receiverQPN})
			case mad.AttrDREP:
				mad.DREP(body).Encode(&mad.DREPFields{LocalCommID: tc.local, RemoteCommID: tc.remote})
			case mad.AttrREJ:
				mad.REJ(body).Encode(&mad.REJFields{LocalCommID: tc.local, RemoteCommID: tc.remote, MsgRejected: tc.rejected, Reason: mad.RejConsumerDefined})
			case mad.AttrRTU:
				mad.RTU(body).Encode(&mad.RTUFields{LocalCommID: tc.local, RemoteCommID: tc.remote})
			case mad.AttrMRA:
				mad.MRA(body).Encode(&mad.MRAFields{LocalCommID: tc.local, RemoteCommID: tc.remote, MsgMRAed: tc.mraD, ServiceTimeout: 31})
			}
		})
		s.run(s.now + time.Second)
		if a.e.State(aID) != StateEstablished || b.e.State(bID) != StateEstablished {
			t.Fatalf("after a forged %v to %v: a %v, b %v", tc.attr, tc.to.addr, a.e.State(aID), b.e.State(bID))
		}
	}
	if len(a.events) != aEvents || len(b.events) != bEvents {
		t.Fatalf("forged messages raised events: a %+v, b %+v", a.events[aEvents:], b.events[bEvents:])
	}
	if da, db := a.e.Stats().RxUnmatched.Load()-unmatchedA, b.e.Stats().RxUnmatched.Load()-unmatchedB; da != 5 || db != 5 {
		t.Fatalf("unmatched: a %d, b %d, want 5 each", da, db)
	}

	// A REQ from elsewhere naming a's QP and CA GUID is stale (REJ 10 to
	// its sender), and does not end a's connection.
	dreqs := s.sent[5]
	forge(b, evil, mad.AttrREQ, func(body []byte) {
		mad.REQ(body).Encode(&mad.REQFields{LocalCommID: 0x5a5a5a5a, ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7471),
			LocalCAGUID: a.e.cfg.GUID, LocalQPN: aQPN, PKey: 0xffff, PathMTU: 3, MaxCMRetries: 3})
	})
	if n := len(s.queue); n == 0 || s.queue[n-1].to != evil || mad.REJ(mad.MAD(s.queue[n-1].b[:]).Body()).Reason() != mad.RejStaleConn {
		t.Fatalf("a stale REQ from elsewhere got no REJ 10 back (queue %d)", n)
	}
	s.run(s.now + time.Second)
	if s.sent[5] != dreqs || a.e.State(aID) != StateEstablished || b.e.State(bID) != StateEstablished {
		t.Fatalf("a stale REQ from elsewhere: %d DREQs, a %v, b %v", s.sent[5]-dreqs, a.e.State(aID), b.e.State(bID))
	}

	// The real peer's DREQ ends it.
	if err := a.e.Disconnect(s.now, aID, nil); err != nil {
		t.Fatal(err)
	}
	s.run(s.now + time.Second)
	if b.has(EventDisconnectRequest) != 1 || a.has(EventDisconnected) != 1 {
		t.Fatalf("the peer's own DREQ: a %+v, b %+v", a.events, b.events)
	}
}

// TestREQPKey: a REQ whose P_Key is not in RoCE's table (0xFFFF, found by
// its low 15 bits) is refused with REJ 12 carrying the GID it was sent
// to, before the listener hears of it; the default P_Key and its
// limited-member form connect.
func TestREQPKey(t *testing.T) {
	for _, tc := range []struct {
		pkey uint16
		ok   bool
	}{{0xffff, true}, {0x7fff, true}, {0x0000, false}, {0x8000, false}, {0x1234, false}, {0xfffe, false}} {
		s := newSimNet(t)
		a, b := s.node("198.18.0.1", 1), s.node("198.18.0.2", 2)
		b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471))
		r := ConnectRequest{PacketLifeTime: PacketLifeTime, REQ: mad.REQFields{
			ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7471), LocalQPN: 0x11, StartingPSN: 1,
			RemoteCMResponseTimeout: ResponseTimeout, LocalCMResponseTimeout: ResponseTimeout, MaxCMRetries: MaxCMRetries,
			PathMTU: 3, PKey: tc.pkey, RetryCount: 7, RNRRetryCount: 7, PrimaryLocalACKTimeout: 14,
		}}
		var rej *Event
		id, err := a.e.Connect(s.now, &Peer{Addr: b.addr, Local: a.addr, MAC: b.mac}, &r)
		if err != nil {
			t.Fatal(err)
		}
		s.run(time.Second)
		for i := range a.events {
			if a.events[i].Type == EventRejected {
				rej = &a.events[i]
			}
		}
		if tc.ok {
			if a.e.State(id) != StateEstablished || b.e.Stats().RxBadPKey.Load() != 0 {
				t.Errorf("P_Key %#04x: %v, want established", tc.pkey, a.e.State(id))
			}
			continue
		}
		gid := b.addr.As16()
		switch {
		case rej == nil || rej.Reason != mad.RejInvalidGID:
			t.Errorf("P_Key %#04x: events %+v, want REJ 12", tc.pkey, a.events)
		case string(rej.ARI[:16]) != string(gid[:]):
			t.Errorf("P_Key %#04x: ARI % x, want the GID % x", tc.pkey, rej.ARI, gid)
		case b.has(EventRequest) != 0 || b.e.Conns() != 0 || b.e.Stats().RxBadPKey.Load() != 1:
			t.Errorf("P_Key %#04x: the listener heard of it (%d requests, %d connections, %d counted)",
				tc.pkey, b.has(EventRequest), b.e.Conns(), b.e.Stats().RxBadPKey.Load())
		}
	}
}

// TestPeerWaitsBounded: the waits a peer's fields choose are bounded by
// MaxPeerWait. A REQ asking for the longest CM response time-out (2^23
// ms) and 15 retries, whose REP is never answered, is gone within 16
// MaxPeerWaits, not 15 × 2.3 hours; an MRA asking for the longest service
// time-out delays the REQ's resend by at most MaxPeerWait.
func TestPeerWaitsBounded(t *testing.T) {
	s := newSimNet(t)
	b := s.node("198.18.0.2", 2)
	b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471))
	evil := netip.MustParseAddr("198.18.0.66")
	forge(b, evil, mad.AttrREQ, func(body []byte) {
		mad.REQ(body).Encode(&mad.REQFields{LocalCommID: 9, ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7471),
			LocalCAGUID: 66, LocalQPN: 0x33, PKey: 0xffff, PathMTU: 3, MaxCMRetries: 15,
			LocalCMResponseTimeout: 31, RemoteCMResponseTimeout: 31, PrimaryLocalACKTimeout: 31})
	})
	s.run(time.Second)
	if b.e.State(b.events[0].ID) != StateRepSent {
		t.Fatalf("accepted REQ in %v, want REP_SENT", b.e.State(b.events[0].ID))
	}
	s.run(16 * MaxPeerWait)
	if b.e.Conns() != 0 || b.has(EventUnreachable) != 1 || len(b.e.timers) != 0 {
		t.Fatalf("after 16 MaxPeerWaits: %d connections, events %+v", b.e.Conns(), b.events)
	}

	// a's REQ to a peer that answers with one MRA asking for 2^23 ms more.
	a := s.node("198.18.0.1", 1)
	id := s.connectWith(a, &simNode{addr: evil}, PacketLifeTime, ResponseTimeout, nil)
	forge(a, evil, mad.AttrMRA, func(body []byte) {
		mad.MRA(body).Encode(&mad.MRAFields{RemoteCommID: id, MsgMRAed: mad.MsgREQ, ServiceTimeout: 31})
	})
	if a.e.State(id) != StateMRAReqRcvd {
		t.Fatalf("after the MRA: %v", a.e.State(id))
	}
	reqs := s.sent[0]
	s.run(s.now + MaxPeerWait + 2*ms(PacketLifeTime) + ms(ResponseTimeout))
	if s.sent[0] != reqs+1 {
		t.Fatalf("%d REQs resent within MaxPeerWait and the REQ's time-out after the MRA, want 1", s.sent[0]-reqs)
	}
}
