package conform

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/qp"
)

// The responder under test in these tests is package qp's engine, on a
// fake clock, behind a Wire that can make it deliberately wrong: hooks
// that change what it receives (in) and what it sends (out).

var (
	puppetIP  = netip.MustParseAddr("198.18.0.1")
	targetIP  = netip.MustParseAddr("198.18.0.2")
	puppetMAC = [6]byte{2, 0, 0, 0, 0, 1}
	targetMAC = [6]byte{2, 0, 0, 0, 0, 2}
)

const (
	puppetQPN = 0x4242
	targetQPN = 0x11
	regionVA  = 0x100000
	regionKey = 0x1234
	recvKey   = 0x77
	recvVA    = 0x800000
)

// framer builds the puppet's frames, as rogue.Peer does.
type framer struct{}

func (framer) Build(ff bth.FrameFields, payload []byte) []byte {
	ff.SrcMAC, ff.DstMAC = puppetMAC, targetMAC
	ff.SrcIP, ff.DstIP, ff.TTL, ff.SrcPort = puppetIP, targetIP, 64, 0xC0DE
	buf := make([]byte, ff.FrameLen(len(payload)))
	n, err := bth.Build(buf, &ff, payload)
	if err != nil {
		panic(err)
	}
	return buf[:n]
}

// region is a Memory of one remote region and one local receive buffer.
type region struct {
	remote []byte
	access qp.Access // what the region grants remotely
	local  []byte
}

func (m *region) Local(k uint32, a uint64, n uint32, _ qp.Access) ([]byte, bool) {
	if k != recvKey || a < recvVA || a-recvVA+uint64(n) > uint64(len(m.local)) {
		return nil, false
	}
	a -= recvVA
	return m.local[a : a+uint64(n)], true
}

func (m *region) Remote(k uint32, a uint64, n uint32, acc qp.Access) ([]byte, bool) {
	if k != regionKey || acc&^m.access != 0 || a < regionVA || a-regionVA+uint64(n) > uint64(len(m.remote)) {
		return nil, false
	}
	a -= regionVA
	return m.remote[a : a+uint64(n)], true
}

func (m *region) Invalidate(uint32) bool { return false }

type nullCQ struct{}

func (nullCQ) Complete(*qp.WC) {}

// setup is a responder's configuration.
type setup struct {
	name   string
	access qp.Access // of the region (the QP allows everything)
	recvs  int       // receives posted, of recvLen bytes
	// ud: a UD QP that answers each message it receives with a SEND to
	// its sender, as ibv_ud_pingpong's server does.
	ud bool
}

const recvLen = 4096

var setups = []setup{
	{"write-read-atomic", qp.AccessRemoteWrite | qp.AccessRemoteRead | qp.AccessRemoteAtomic, 0, false},
	{"write-only+recv", qp.AccessRemoteWrite, 8, false},
	{"ud-pingpong", 0, 8, true},
}

// udQKey is the Q_Key of the ud-pingpong setup (ibv_ud_pingpong's).
const udQKey = 0x11111111

// sim is a Wire to a qp engine's QP.
type sim struct {
	t      testing.TB
	e      *qp.Engine
	q      *qp.QP
	now    time.Duration
	out    []Frame
	in     func(s *sim, f []byte) [][]byte // what reaches the engine of a puppet's frame
	outF   func(s *sim, f []byte) [][]byte // what reaches the wire of the engine's frame
	target Target
	state  map[string]int // the wrong responders' memory
	batch  bool           // Send gives the engine all frames in one Input
	echo   []qp.WC        // ud: receives to answer
}

// udEcho is the ud setup's receive CQ: each message received is answered
// after the engine's round (echoes).
type udEcho struct{ s *sim }

func (c udEcho) Complete(wc *qp.WC) {
	if wc.Status == qp.WCSuccess && wc.Opcode == qp.WCRecv {
		c.s.echo = append(c.s.echo, *wc)
	}
}

// echoes answers the ud setup's receives with a SEND to their sender and
// posts each receive again.
func (s *sim) echoes() {
	for _, wc := range s.echo {
		av := &qp.AddressVector{SrcIP: targetIP, DstIP: puppetIP, SrcMAC: targetMAC, DstMAC: puppetMAC}
		if err := s.q.PostSend(&qp.SendWR{Opcode: qp.WRSend, SGL: []qp.SGE{{Addr: recvVA, Length: 8, LKey: recvKey}},
			AV: av, RemoteQPN: wc.SrcQP, RemoteQKey: udQKey}); err != nil {
			s.t.Fatal(err)
		}
		if err := s.q.PostRecv(&qp.RecvWR{ID: wc.ID, SGL: []qp.SGE{{Addr: recvVA + wc.ID*recvLen, Length: recvLen, LKey: recvKey}}}); err != nil {
			s.t.Fatal(err)
		}
	}
	s.echo = s.echo[:0]
}

// emit is where the engine's frames go (its qp.Output is output{s}).
func (s *sim) emit(f []byte) {
	frames := [][]byte{f}
	if s.outF != nil {
		frames = s.outF(s, f)
	}
	for _, g := range frames {
		s.out = append(s.out, Frame{At: s.now + 10*time.Microsecond, Data: g})
	}
}

func newSim(t testing.TB, su setup) *sim {
	s := &sim{t: t, state: map[string]int{}}
	var err error
	if s.e, err = qp.NewEngine(qp.EngineConfig{Out: output{s}, LocalIPs: []netip.Addr{targetIP}}); err != nil {
		t.Fatal(err)
	}
	mem := &region{remote: make([]byte, 16384), access: su.access, local: make([]byte, recvLen*max(su.recvs, 1))}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if su.ud {
		s.q, err = s.e.CreateQP(qp.Config{Type: qp.UD, QPN: targetQPN, Mem: mem, SendCQ: nullCQ{}, RecvCQ: udEcho{s}})
		must(err)
		must(s.q.Modify(&qp.Attr{State: qp.StateInit, PKey: 0xffff, Port: 1, QKey: udQKey}, qp.AttrState|qp.AttrPKey|qp.AttrPort|qp.AttrQKey))
		for i := range su.recvs {
			must(s.q.PostRecv(&qp.RecvWR{ID: uint64(i), SGL: []qp.SGE{{Addr: recvVA + uint64(i*recvLen), Length: recvLen, LKey: recvKey}}}))
		}
		must(s.q.Modify(&qp.Attr{State: qp.StateRTR}, qp.AttrState))
		must(s.q.Modify(&qp.Attr{State: qp.StateRTS, SQPSN: 5000}, qp.AttrState|qp.AttrSQPSN))
		s.target = Target{QPN: targetQPN, MTU: 1024, UD: true, QKey: udQKey, RecvPosted: true, RecvLen: recvLen}
		return s
	}
	if s.q, err = s.e.CreateQP(qp.Config{Type: qp.RC, QPN: targetQPN, Mem: mem, SendCQ: nullCQ{}, RecvCQ: nullCQ{}}); err != nil {
		t.Fatal(err)
	}
	q := s.q
	must(q.Modify(&qp.Attr{State: qp.StateInit, PKey: 0xffff, Port: 1,
		AccessFlags: qp.AccessRemoteWrite | qp.AccessRemoteRead | qp.AccessRemoteAtomic | qp.AccessLocalWrite},
		qp.AttrState|qp.AttrPKey|qp.AttrPort|qp.AttrAccessFlags))
	for i := range su.recvs {
		must(q.PostRecv(&qp.RecvWR{ID: uint64(i), SGL: []qp.SGE{{Addr: recvVA + uint64(i*recvLen), Length: recvLen, LKey: recvKey}}}))
	}
	must(q.Modify(&qp.Attr{State: qp.StateRTR, PathMTU: qp.MTU1024, DestQPN: puppetQPN, RQPSN: 1000,
		MaxDestRdAtomic: 4, MinRNRTimer: 12,
		AV: qp.AddressVector{SrcIP: targetIP, DstIP: puppetIP, SrcMAC: targetMAC, DstMAC: puppetMAC}},
		qp.AttrState|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer|qp.AttrAV))
	must(q.Modify(&qp.Attr{State: qp.StateRTS, SQPSN: 5000, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
		qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxRdAtomic))
	var allows Ops
	for _, a := range []struct {
		q qp.Access
		o Ops
	}{{qp.AccessRemoteWrite, OpWrite}, {qp.AccessRemoteRead, OpRead}, {qp.AccessRemoteAtomic, OpAtomic}} {
		if su.access&a.q != 0 {
			allows |= a.o
		}
	}
	s.target = Target{QPN: targetQPN, PSN: 1000, MTU: 1024, VA: regionVA, RKey: regionKey, Len: 16384, Allows: allows,
		Denies:     (OpWrite | OpRead | OpAtomic) &^ allows,
		RecvPosted: su.recvs > 0, RecvLen: recvLen, MinRNRTimer: 12, MaxDestRdAtomic: 4}
	return s
}

func (s *sim) Now() time.Duration { return s.now }

// Send hands the puppet's frames to the engine one at a time, as they
// arrive on a wire where each takes its time (batch: all in one Input,
// as a busy receive ring would).
func (s *sim) Send(frames [][]byte) error {
	var in [][]byte
	for _, f := range frames {
		if s.in != nil {
			in = append(in, s.in(s, f)...)
		} else {
			in = append(in, f)
		}
	}
	if s.batch {
		s.e.Input(in, s.now)
		s.echoes()
		s.e.Poll(s.now)
		return nil
	}
	for _, f := range in {
		s.e.Input([][]byte{f}, s.now)
		s.echoes()
		s.e.Poll(s.now)
	}
	return nil
}

func (s *sim) Receive(deadline time.Duration) ([]Frame, error) {
	for range 1000 {
		if len(s.out) > 0 {
			got := s.out
			s.out = nil
			s.now = max(s.now, got[len(got)-1].At)
			return got, nil
		}
		next := s.e.Poll(s.now)
		if len(s.out) > 0 {
			continue
		}
		if next >= deadline || next <= s.now {
			s.now = max(s.now, deadline)
			return nil, nil
		}
		s.now = next
	}
	s.t.Fatal("the simulated responder never settles")
	return nil, nil
}

// output is the engine's qp.Output: the sim's Send is the Wire's.
type output struct{ s *sim }

func (o output) Alloc() []byte { return make([]byte, qp.MaxFrameLen(qp.MTU4096)) }
func (o output) Send(f []byte) { o.s.emit(f) }

// run runs c against a fresh sim of su with the given wrongs.
func runSim(t testing.TB, c *Check, su setup, w wrong) Result {
	s := newSim(t, su)
	s.in, s.outF = w.in, w.out
	tgt := s.target
	return Run(s, c, &tgt, framer{}, puppetQPN)
}

// wrong is a deliberately wrong responder: hooks on the way in and out.
type wrong struct {
	name    string
	in, out func(s *sim, f []byte) [][]byte
	fails   []string // the checks it must make FAIL
}

// edit decodes frame, lets fn change its fields, and builds it again
// with a good ICRC.
func edit(frame []byte, fn func(f *bth.Frame, ff *bth.FrameFields)) []byte {
	var f bth.Frame
	if f.Decode(frame) != nil {
		return frame
	}
	var ff bth.FrameFields
	f.Fields(&ff)
	fn(&f, &ff)
	buf := make([]byte, ff.FrameLen(len(f.Payload)))
	n, err := bth.Build(buf, &ff, f.Payload)
	if err != nil {
		panic(err)
	}
	return buf[:n]
}

// patchBTH changes the BTH flags byte of an untagged IPv4 frame and
// fixes the ICRC.
func patchBTH(frame []byte, fn func(flags byte) byte) []byte {
	g := append([]byte(nil), frame...)
	g[14+20+8+1] = fn(g[14+20+8+1])
	c, _ := bth.ICRC(g[14:])
	binary.LittleEndian.PutUint32(g[len(g)-4:], c)
	return g
}

func one(f []byte) [][]byte { return [][]byte{f} }

// nak answers frame with an ACKNOWLEDGE of syndrome syn for its PSN, as
// the engine would send it.
func nak(frame []byte, syn bth.Syndrome) []byte {
	return edit(frame, func(f *bth.Frame, ff *bth.FrameFields) {
		ff.SrcMAC, ff.DstMAC, ff.SrcIP, ff.DstIP = ff.DstMAC, ff.SrcMAC, ff.DstIP, ff.SrcIP
		ff.BTH = bth.BTHFields{Opcode: bth.RCAck, PKey: 0xffff, DestQP: puppetQPN, PSN: f.BTH.PSN()}
		ff.AETH = bth.AETHFields{Syndrome: syn}
		f.Payload = nil
	})
}

func swapSyndrome(from, to bth.Syndrome) func(s *sim, f []byte) [][]byte {
	return func(s *sim, f []byte) [][]byte {
		return one(edit(f, func(fr *bth.Frame, ff *bth.FrameFields) {
			if fr.AETH != nil && ff.AETH.Syndrome == from {
				ff.AETH.Syndrome = to
			}
		}))
	}
}

// seen tracks the PSNs of requests, for the wrongs about duplicates.
func (s *sim) seen(f *bth.Frame) bool {
	k := "psn" + f.BTH.PSN().String()
	dup := s.state[k] > 0
	s.state[k]++
	return dup
}

var wrongs = []wrong{
	{name: "NAKs every packet of a gap", fails: []string{"resp.psn-gap"},
		out: func(s *sim, f []byte) [][]byte {
			var fr bth.Frame
			if fr.Decode(f) == nil && fr.AETH != nil && fr.AETH.Syndrome() == bth.NakPSNSeqError {
				return [][]byte{f, f}
			}
			return one(f)
		}},
	{name: "ignores duplicates", fails: []string{"resp.dup-reack", "resp.dup-read", "resp.dup-atomic"},
		in: func(s *sim, f []byte) [][]byte {
			var fr bth.Frame
			if fr.Decode(f) == nil && s.seen(&fr) {
				return nil
			}
			return one(f)
		}},
	{name: "replays a duplicate READ without checking its RETH", fails: []string{"resp.dup-read"},
		in: func(s *sim, f []byte) [][]byte {
			var fr bth.Frame
			if fr.Decode(f) == nil && fr.Opcode() == bth.RCReadRequest && s.seen(&fr) {
				return one(edit(f, func(_ *bth.Frame, ff *bth.FrameFields) {
					ff.RETH = bth.RETHFields{VA: regionVA, RKey: regionKey, DMALen: 64}
				}))
			}
			return one(f)
		}},
	{name: "executes a duplicate atomic again", fails: []string{"resp.dup-atomic"},
		in: func(s *sim, f []byte) [][]byte {
			var fr bth.Frame
			if fr.Decode(f) != nil {
				return one(f)
			}
			psn := int(fr.BTH.PSN())
			if fr.Opcode() == bth.RCFetchAdd && s.seen(&fr) {
				s.state["moved"] = psn
				next := s.state["next"]
				s.state["next"]++
				return one(edit(f, func(_ *bth.Frame, ff *bth.FrameFields) { ff.BTH.PSN = bth.PSN(next) }))
			}
			s.state["next"] = max(s.state["next"], psn+1)
			return one(f)
		},
		out: func(s *sim, f []byte) [][]byte {
			return one(edit(f, func(fr *bth.Frame, ff *bth.FrameFields) {
				if fr.Opcode() == bth.RCAtomicAck && s.state["moved"] != 0 && int(fr.BTH.PSN()) == s.state["next"]-1 {
					ff.BTH.PSN = bth.PSN(s.state["moved"])
				}
			}))
		}},
	{name: "never ACKs", fails: []string{"resp.ackreq"},
		out: func(s *sim, f []byte) [][]byte {
			var fr bth.Frame
			if fr.Decode(f) == nil && isAck(&Answer{Frame: fr}) {
				return nil
			}
			return one(f)
		}},
	{name: "counts packets in the MSN", fails: []string{"resp.msn"},
		in: func(s *sim, f []byte) [][]byte {
			s.state["packets"]++
			return one(f)
		},
		out: func(s *sim, f []byte) [][]byte {
			return one(edit(f, func(fr *bth.Frame, ff *bth.FrameFields) {
				if fr.AETH != nil {
					ff.AETH.MSN = bth.PSN(s.state["packets"])
				}
			}))
		}},
	{name: "remote access errors as remote operational errors",
		fails: []string{"resp.rkey-invalid", "resp.va-out-of-bounds", "resp.access-denied"},
		out:   swapSyndrome(bth.NakRemoteAccessError, bth.NakRemoteOpError)},
	{name: "invalid requests as remote access errors",
		fails: []string{"resp.atomic-misaligned", "resp.first-not-mtu", "resp.middle-not-mtu", "resp.last-too-long", "resp.middle-without-first", "resp.send-too-long"},
		out:   swapSyndrome(bth.NakInvalidRequest, bth.NakRemoteAccessError)},
	{name: "drops the READ beyond its resources", fails: []string{"resp.rd-atomic-limit"},
		in: func(s *sim, f []byte) [][]byte {
			var fr bth.Frame
			if fr.Decode(f) == nil && fr.Opcode() == bth.RCReadRequest && fr.BTH.PSN() == 1004 {
				return nil
			}
			return one(f)
		}},
	{name: "loses the oldest READ's response when over its resources", fails: []string{"resp.rd-atomic-limit"},
		out: func(s *sim, f []byte) [][]byte {
			var fr bth.Frame
			if fr.Decode(f) == nil && fr.Opcode().IsReadResponse() && fr.BTH.PSN() == 1000 {
				return nil
			}
			return one(f)
		}},
	{name: "RNR NAKs with another timer", fails: []string{"resp.rnr"},
		out: func(s *sim, f []byte) [][]byte {
			return one(edit(f, func(fr *bth.Frame, ff *bth.FrameFields) {
				if fr.AETH != nil && fr.AETH.Syndrome().IsRNRNak() {
					ff.AETH.Syndrome = bth.RNRNakSyndrome(1)
				}
			}))
		}},
	{name: "checks the R_Key of zero-length WRITEs", fails: []string{"resp.zero-length"},
		in: func(s *sim, f []byte) [][]byte {
			var fr bth.Frame
			if fr.Decode(f) == nil && fr.RETH != nil && fr.RETH.DMALen() == 0 && fr.RETH.RKey() != regionKey {
				s.out = append(s.out, Frame{At: s.now, Data: nak(f, bth.NakRemoteAccessError)})
				return nil
			}
			return one(f)
		}},
	{name: "does not check the ICRC", fails: []string{"resp.bad-icrc"},
		in: func(s *sim, f []byte) [][]byte {
			g := append([]byte(nil), f...)
			c, _ := bth.ICRC(g[14:])
			binary.LittleEndian.PutUint32(g[len(g)-4:], c)
			return one(g)
		}},
	{name: "does not check the P_Key", fails: []string{"resp.bad-pkey"},
		in: func(s *sim, f []byte) [][]byte {
			return one(edit(f, func(_ *bth.Frame, ff *bth.FrameFields) { ff.BTH.PKey = 0xffff }))
		}},
	{name: "does not check TVer", fails: []string{"resp.bad-tver"},
		in: func(s *sim, f []byte) [][]byte { return one(patchBTH(f, func(b byte) byte { return b &^ 0x0f })) }},
	{name: "does not check PadCnt", fails: []string{"resp.bad-padcnt"},
		in: func(s *sim, f []byte) [][]byte {
			var fr bth.Frame
			if fr.Decode(f) != nil && len(f) > 14+20+8+12 {
				return one(patchBTH(f, func(b byte) byte { return b &^ 0x30 }))
			}
			return one(f)
		}},
	{name: "drops CE-marked requests", fails: []string{"resp.cnp"},
		in: func(s *sim, f []byte) [][]byte {
			if ceMarked(f) {
				return nil
			}
			return one(f)
		}},
	{name: "sends its CNP to another QP", fails: []string{"resp.cnp"}, out: cnpTo(puppetQPN ^ 1)},
	{name: "takes UD SENDs whatever their Q_Key", fails: []string{"resp.ud-qkey"},
		in: func(s *sim, f []byte) [][]byte {
			return one(edit(f, func(fr *bth.Frame, ff *bth.FrameFields) {
				if fr.DETH != nil {
					ff.DETH.QKey = udQKey
				}
			}))
		}},
	{name: "takes frames to any QP", fails: []string{"resp.unknown-qp"},
		in: func(s *sim, f []byte) [][]byte {
			return one(edit(f, func(_ *bth.Frame, ff *bth.FrameFields) { ff.BTH.DestQP = targetQPN }))
		}},
}

// ceMarked reports whether an IPv4 frame's ECN field says Congestion
// Experienced.
func ceMarked(f []byte) bool { return len(f) > 15 && f[15]&3 == 3 }

// cnpTo sends the engine's CNPs to QP qpn instead (nil, a negative
// qpn: drops them, as a responder without a notification point).
func cnpTo(qpn int64) func(s *sim, f []byte) [][]byte {
	return func(s *sim, f []byte) [][]byte {
		var fr bth.Frame
		if fr.Decode(f) != nil || fr.Opcode() != bth.OpCNP {
			return one(f)
		}
		if qpn < 0 {
			return nil
		}
		return one(edit(f, func(_ *bth.Frame, ff *bth.FrameFields) { ff.BTH.DestQP = uint32(qpn) }))
	}
}
