package qp

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/xroce/xroce/bth"
)

// exchange moves what each engine of p sent to the other at p.now, hook
// first seeing (and possibly changing) each frame, from side 0 or 1. It
// reports whether anything moved.
func (p *memPair) exchange(hook func(from int, b []byte)) bool {
	moved := false
	for i := range 2 {
		o := p.out[i]
		if len(o.q) == 0 {
			continue
		}
		moved = true
		if hook != nil {
			for _, b := range o.q {
				hook(i, b)
			}
		}
		p.e[1-i].Input(o.q, p.now)
		o.free = append(o.free, o.q...)
		o.q = o.q[:0]
	}
	return moved
}

// run polls both engines and moves frames, advancing p.now to the next
// deadline when nothing moves, until both are idle or until stop.
func (p *memPair) run(hook func(from int, b []byte), stop time.Duration) {
	for p.now < stop {
		d := min(p.e[0].Poll(p.now), p.e[1].Poll(p.now))
		if p.exchange(hook) {
			continue
		}
		if d == Never {
			return
		}
		p.now = max(d, p.now+time.Nanosecond)
	}
}

func decodeFrame(t *testing.T, b []byte) *bth.Frame {
	t.Helper()
	var f bth.Frame
	if err := f.Decode(b); err != nil {
		t.Fatalf("sent frame does not decode: %v", err)
	}
	if !f.VerifyICRC() {
		t.Fatalf("sent frame %v has a bad ICRC", f.Opcode())
	}
	return &f
}

// TestECNSent checks the TOS of everything a QP sends: ECT(0) with the
// traffic class's DSCP unless the traffic class has ECN bits or NoECT is
// set, on data frames and ACKs alike.
func TestECNSent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		noECT bool
		class uint8
		want  uint8
	}{
		{"default", false, 0, 0x02},
		{"DSCP 26", false, 26 << 2, 0x6a},
		{"ECT(1) kept", false, 26<<2 | 1, 0x69},
		{"CE kept", false, 3, 0x03},
		{"NoECT", true, 0, 0x00},
		{"NoECT DSCP 26", true, 26 << 2, 0x68},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newMemPairWith(t, MTU1024, EngineConfig{CC: CCConfig{NoECT: tc.noECT}})
			for i, q := range p.q {
				av := simAV(i)
				av.TrafficClass = tc.class
				q.setAV(&av)
			}
			seen := map[bth.Opcode]int{}
			_ = p.q[0].PostSend(&writeWR)
			_ = p.q[0].PostSend(&readWR)
			p.run(func(from int, b []byte) {
				f := decodeFrame(t, b)
				seen[f.Opcode()]++
				if f.Opcode() != bth.OpCNP && f.IPv4.TOS() != tc.want {
					t.Errorf("%v from %d: TOS %#x, want %#x", f.Opcode(), from, f.IPv4.TOS(), tc.want)
				}
			}, time.Second)
			if seen[bth.RCWriteFirst] == 0 || seen[bth.RCAck] == 0 || seen[bth.RCReadResponseFirst] == 0 {
				t.Fatalf("frames seen: %v", seen)
			}
		})
	}
}

// cnpPayload is the UDP payload of a CNP to destQP without its ICRC, as
// in Mellanox's example (CC.md §1): 81 00 ff ff 40 00 00 d2, PSN 0, 16
// zero bytes.
func cnpPayload(destQP uint32) []byte {
	b := make([]byte, bth.BTHSize+bth.CNPReservedSize)
	copy(b, []byte{0x81, 0, 0xff, 0xff, 0x40})
	b[5], b[6], b[7] = byte(destQP>>16), byte(destQP>>8), byte(destQP)
	return b
}

// feedCE writes 64 KiB from side 0 and gives its data frames to side 1
// one by one, every gap, CE-marked, polling side 1 after each; it returns
// the frames side 1 sent.
func feedCE(t *testing.T, p *memPair, gap time.Duration) [][]byte {
	_ = p.q[0].PostSend(&SendWR{Opcode: WRRDMAWrite, SGL: []SGE{{Addr: localBase, Length: 64 << 10, LKey: localKey}},
		RemoteAddr: remBase, RKey: remoteKey})
	p.e[0].Poll(p.now)
	data := p.out[0].q
	p.out[0].q = nil
	if len(data) != 64 {
		t.Fatalf("%d data frames, want 64", len(data))
	}
	var out [][]byte
	for _, b := range data {
		if !bth.MarkCE(b) {
			t.Fatal("MarkCE: the data frame is not ECN-capable")
		}
		p.e[1].Input([][]byte{b}, p.now)
		p.e[1].Poll(p.now)
		for _, x := range p.out[1].q {
			out = append(out, bytes.Clone(x))
		}
		p.out[1].q = p.out[1].q[:0]
		p.now += gap
	}
	return out
}

// TestNotificationPoint: CE-marked data frames make the receiver send
// CNPs to the sender's QP, at most one per interval per QP: a burst of CE
// over a duration D gives ⌈D/interval⌉ (CC.md §6 item 2).
func TestNotificationPoint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cc       CCConfig
		gap      time.Duration
		wantCNPs int
	}{
		{"4 µs default", CCConfig{}, 200 * time.Nanosecond, 4}, // 64 × 200 ns = 12.8 µs: at 0, 4, 8, 12 µs
		{"10 µs", CCConfig{CNPInterval: 10 * time.Microsecond}, 200 * time.Nanosecond, 2},
		{"every frame", CCConfig{CNPInterval: -1}, 200 * time.Nanosecond, 64},
		{"sparse", CCConfig{}, 5 * time.Microsecond, 64}, // every frame opens a new interval
		{"NP off", CCConfig{NoCNP: true}, 200 * time.Nanosecond, 0},
		{"DSCP 26", CCConfig{CNPDSCP: 26}, 200 * time.Nanosecond, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newMemPairWith(t, MTU1024, EngineConfig{CC: tc.cc})
			out := feedCE(t, p, tc.gap)
			cnps := 0
			dscp := uint8(48)
			if tc.cc.CNPDSCP != 0 {
				dscp = uint8(tc.cc.CNPDSCP)
			}
			for _, b := range out {
				f := decodeFrame(t, b)
				if f.Opcode() != bth.OpCNP {
					continue
				}
				cnps++
				udp := f.Packet()[bth.IPv4Size+bth.UDPSize:]
				if want := cnpPayload(p.q[0].QPN()); !bytes.Equal(udp[:len(want)], want) || len(udp) != len(want)+bth.ICRCSize {
					t.Fatalf("CNP UDP payload\n% x\nwant\n% x + ICRC", udp, want)
				}
				if tos := f.IPv4.TOS(); tos != dscp<<2|2 {
					t.Errorf("CNP TOS %#x, want DSCP %d ECT(0) = %#x", tos, dscp, dscp<<2|2)
				}
				if len(b) != 74 || f.UDP.SrcPort() != p.q[1].UDPSourcePort() || f.SrcIP() != ipB || f.DstIP() != ipA {
					t.Errorf("CNP: %d bytes, sport %#x, %v → %v; want 74, %#x, %v → %v", len(b), f.UDP.SrcPort(),
						f.SrcIP(), f.DstIP(), p.q[1].UDPSourcePort(), ipB, ipA)
				}
			}
			if cnps != tc.wantCNPs {
				t.Errorf("%d CNPs, want %d", cnps, tc.wantCNPs)
			}
			s := p.q[1].Stats()
			if s.RxCE.Load() != 64 || s.TxCNP.Load() != uint64(tc.wantCNPs) || p.e[1].Stats().TxCNP.Load() != uint64(tc.wantCNPs) {
				t.Errorf("receiver stats: RxCE %d TxCNP %d (engine %d), want 64, %d", s.RxCE.Load(), s.TxCNP.Load(),
					p.e[1].Stats().TxCNP.Load(), tc.wantCNPs)
			}
			// The CNPs reach the sender's reaction point.
			p.e[0].Input(out, p.now)
			a := p.q[0].Stats()
			if a.RxCNP.Load() != uint64(tc.wantCNPs) || a.RxBadCNP.Load() != 0 || p.q[0].DCQCN().Limited() != (tc.wantCNPs > 0) {
				t.Errorf("sender: RxCNP %d RxBadCNP %d limited %v; want %d, 0, %v", a.RxCNP.Load(), a.RxBadCNP.Load(),
					p.q[0].DCQCN().Limited(), tc.wantCNPs, tc.wantCNPs > 0)
			}
		})
	}
}

// TestNoCNPForCEOnAcks: CE on ACKs (and on CNPs) is counted nowhere and
// answered with nothing; CE on data of the other direction is.
func TestNoCNPForCEOnAcks(t *testing.T) {
	p := newMemPairWith(t, MTU1024, EngineConfig{CC: CCConfig{CNPInterval: -1}})
	for range 4 {
		_ = p.q[0].PostSend(&readWR) // READ responses from 1 are data
		_ = p.q[0].PostSend(&writeWR)
	}
	p.run(func(from int, b []byte) {
		var f bth.Frame
		if f.Decode(b) == nil && (f.Opcode() == bth.RCAck || f.Opcode() == bth.OpCNP || f.Opcode().Transport() == bth.RC && from == 1) {
			bth.MarkCE(b)
		}
	}, time.Second)
	a, b := p.q[0].Stats(), p.q[1].Stats()
	if b.TxCNP.Load() != 0 || b.RxCE.Load() != 0 {
		t.Errorf("side 1 got only CE-marked ACKs and CNPs: RxCE %d, TxCNP %d, want 0, 0", b.RxCE.Load(), b.TxCNP.Load())
	}
	if a.RxCE.Load() == 0 || a.TxCNP.Load() != a.RxCE.Load() || b.RxCNP.Load() != a.TxCNP.Load() {
		t.Errorf("side 0: RxCE %d TxCNP %d (CE on READ responses); side 1 RxCNP %d", a.RxCE.Load(), a.TxCNP.Load(), b.RxCNP.Load())
	}
	if p.cq[0].bad != 0 || p.cq[0].n != 8 {
		t.Errorf("completions: %d (%d bad), want 8", p.cq[0].n, p.cq[0].bad)
	}
}

// TestCNPValidation sends CNPs that name no QP of the engine, come from
// another host or carry another partition's P_Key: each is counted in
// RxBadCNP and dropped, and only the valid one reaches DCQCN.
func TestCNPValidation(t *testing.T) {
	p := newMemPair(t, MTU1024)
	a := p.q[0]
	build := func(tune func(*bth.FrameFields)) []byte {
		ff := bth.FrameFields{SrcMAC: simMACs[1], DstMAC: simMACs[0], SrcIP: ipB, DstIP: ipA, TTL: 64, TOS: 0xc2,
			SrcPort: 0xf000, BTH: bth.CNPFields(0xffff, a.QPN())}
		if tune != nil {
			tune(&ff)
		}
		buf := make([]byte, 128)
		n, err := bth.Build(buf, &ff, nil)
		if err != nil {
			t.Fatal(err)
		}
		return buf[:n]
	}
	bad := [][]byte{
		build(func(ff *bth.FrameFields) { ff.BTH.DestQP = 0x999 }),
		build(func(ff *bth.FrameFields) { ff.SrcIP = netip.MustParseAddr("198.18.0.99") }),
		build(func(ff *bth.FrameFields) { ff.BTH.PKey = 0x1234 }),
	}
	p.e[0].Input(bad, 0)
	if a.DCQCN().Limited() || p.e[0].Stats().RxBadCNP.Load() != 3 || p.e[0].Stats().RxDropped.Load() != 3 || a.Stats().RxBadCNP.Load() != 2 {
		t.Errorf("bad CNPs: limited %v, engine RxBadCNP %d RxDropped %d, QP RxBadCNP %d; want false, 3, 3, 2",
			a.DCQCN().Limited(), p.e[0].Stats().RxBadCNP.Load(), p.e[0].Stats().RxDropped.Load(), a.Stats().RxBadCNP.Load())
	}
	// A CNP with BECN clear, or with the QP's own P_Key, is still one.
	good := [][]byte{build(nil), build(func(ff *bth.FrameFields) { ff.BTH.BECN = false })}
	p.e[0].Input(good, 0)
	if !a.DCQCN().Limited() || a.Stats().RxCNP.Load() != 2 || p.e[0].Stats().RxDropped.Load() != 3 {
		t.Errorf("good CNPs: limited %v RxCNP %d RxDropped %d, want true, 2, 3", a.DCQCN().Limited(), a.Stats().RxCNP.Load(),
			p.e[0].Stats().RxDropped.Load())
	}
	// A CNP is never answered, whatever its ECN bits.
	ce := build(func(ff *bth.FrameFields) { ff.TOS = 0xc3 })
	p.e[0].Input([][]byte{ce}, 0)
	p.e[0].Poll(0)
	if len(p.out[0].q) != 0 || a.Stats().RxCE.Load() != 0 {
		t.Errorf("a CE-marked CNP got %d frames in answer, RxCE %d", len(p.out[0].q), a.Stats().RxCE.Load())
	}
}

// TestPacerStaticRate writes 1 MiB with a static rate limit: after the
// burst, data frames leave at exactly the rate (on the wire: frame plus
// 24 bytes), the Poll deadline being the next send time.
func TestPacerStaticRate(t *testing.T) {
	for _, rate := range []int64{100 * Mb, 1 * gbps, 10 * gbps} {
		t.Run(fmt.Sprint(rate/Mb, "Mbps"), func(t *testing.T) {
			p := newMemPair(t, MTU4096)
			if err := p.q[0].SetRateLimit(rate, 16<<10); err != nil {
				t.Fatal(err)
			}
			var at []time.Duration
			var size []int
			_ = p.q[0].PostSend(&writeWR) // warm up, unmeasured
			p.run(nil, time.Minute)
			start := p.now
			_ = p.q[0].PostSend(&writeWR)
			p.run(func(from int, b []byte) {
				if from == 0 {
					at = append(at, p.now)
					size = append(size, len(b))
				}
			}, time.Minute)
			if len(at) != 256 || p.cq[0].n != 2 {
				t.Fatalf("%d data frames, %d completions; want 256, 2", len(at), p.cq[0].n)
			}
			// From the 16th frame on (past the burst), frame i leaves one
			// wire time of frame i-1 after it.
			for i := 16; i < len(at); i++ {
				want := at[i-1] + wireTime(int64(size[i-1]+wireOverhead), rate)
				if d := at[i] - want; d < -time.Nanosecond || d > time.Nanosecond {
					t.Fatalf("frame %d sent at %v, want %v (+%v)", i, at[i]-start, want-start, d)
				}
			}
			if got := int64(p.q[0].Stats().Rate.Load()); got != rate {
				t.Errorf("Stats().Rate = %d, want %d", got, rate)
			}
		})
	}
}

// TestPacerReadResponses: a READ's responses are paced by the responder's
// limit, since they are its data.
func TestPacerReadResponses(t *testing.T) {
	p := newMemPair(t, MTU1024)
	const rate = 1 * gbps
	if err := p.q[1].SetRateLimit(rate, 1); err != nil {
		t.Fatal(err)
	}
	_ = p.q[0].PostSend(&readWR) // 64 KiB: 64 responses
	var at []time.Duration
	var size []int
	p.run(func(from int, b []byte) {
		if from == 1 && bth.Opcode(b[bth.EthernetSize+bth.IPv4Size+bth.UDPSize]) != bth.RCAck {
			at = append(at, p.now)
			size = append(size, len(b))
		}
	}, time.Minute)
	if p.cq[0].n != 1 || p.cq[0].bad != 0 || len(at) != 64 {
		t.Fatalf("READ completions: %d (%d bad), %d responses", p.cq[0].n, p.cq[0].bad, len(at))
	}
	// The tolerance is one packet: the first two go at once, the third
	// when the tolerance allows, and from then on each leaves one wire
	// time after the one before.
	for i := 3; i < len(at); i++ {
		want := at[i-1] + wireTime(int64(size[i-1]+wireOverhead), rate)
		if d := at[i] - want; d < -time.Nanosecond || d > time.Nanosecond {
			t.Fatalf("response %d sent %v after the first, want %v", i, at[i]-at[0], want-at[0])
		}
	}
}

// TestPacedSendAllocs: a paced QP's send path allocates nothing either.
func TestPacedSendAllocs(t *testing.T) {
	p := newMemPair(t, MTU4096)
	if err := p.q[0].SetRateLimit(10*gbps, 0); err != nil {
		t.Fatal(err)
	}
	one := func() {
		_ = p.q[0].PostSend(&writeWR)
		p.run(nil, p.now+time.Second)
	}
	one()
	if a := testing.AllocsPerRun(20, one); a != 0 {
		t.Errorf("paced 1 MiB WRITE: %v allocations, want 0", a)
	}
	if p.cq[0].n != 22 || p.cq[0].bad != 0 {
		t.Errorf("completions %d (bad %d), want 22", p.cq[0].n, p.cq[0].bad)
	}
}

// TestDCQCNPacing: CNPs cut the sender's rate and it then sends at the
// DCQCN rate.
func TestDCQCNPacing(t *testing.T) {
	// No increase events: the rate stays where the cut put it.
	params := DefaultDCQCN()
	params.TimeReset, params.ByteReset = time.Hour, 0
	p := newMemPairWith(t, MTU4096, EngineConfig{LineRate: 10 * gbps, CC: CCConfig{DCQCN: &params}})
	a := p.q[0]
	// Two CNPs, 10 µs apart: the limiter, then a cut with α decayed for
	// 10 µs.
	cnp := func() []byte {
		buf := make([]byte, 128)
		ff := bth.FrameFields{SrcMAC: simMACs[1], DstMAC: simMACs[0], SrcIP: ipB, DstIP: ipA, TTL: 64, TOS: 0xc2,
			SrcPort: 0xf000, BTH: bth.CNPFields(0xffff, a.QPN())}
		n, _ := bth.Build(buf, &ff, nil)
		return buf[:n]
	}
	p.e[0].Input([][]byte{cnp()}, 0)
	p.now = 10 * time.Microsecond
	p.e[0].Input([][]byte{cnp()}, p.now)
	p.now = 13 * time.Microsecond
	var at []time.Duration
	_ = a.PostSend(&writeWR)
	p.run(func(from int, b []byte) {
		if from == 0 {
			at = append(at, p.now)
		}
	}, p.now+10*time.Millisecond)
	r := int64(a.Stats().Rate.Load())
	if a.Stats().RateCuts.Load() != 1 || r < 5*gbps || r > 6*gbps {
		t.Fatalf("after one cut: %d cuts, rate %d, want 1 cut to about 5.1 Gb/s", a.Stats().RateCuts.Load(), r)
	}
	// No increase runs here, so the lowest rate is the one after the cut.
	if l := a.Stats().RateLowest.Load(); l != uint64(r) {
		t.Errorf("RateLowest %d, want the rate after the cut, %d", l, r)
	}
	frame := int64(MaxFrameLen(MTU4096)) // about the data frames' size
	got := at[200] - at[100]
	want := wireTime(100*(frame+wireOverhead), r)
	if got < want*9/10 || got > want*11/10 {
		t.Errorf("100 frames took %v at DCQCN's rate %d b/s, want about %v", got, r, want)
	}
}
