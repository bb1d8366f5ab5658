package qp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/link"
)

// ipSlow is the address of the slow peer in TestSlowPeersKeepGoodPeersRate:
// a second address of side B.
var ipSlow = netip.MustParseAddr("198.18.0.3")

// ackPattern is how a hostile peer answers: hold sees each frame the peer
// sends (ACKs, NAKs) and takes it or lets it go; due sends what it held
// and is due by now, and returns when it wants to be asked again (0:
// nothing held).
type ackPattern struct {
	name string
	make func(n *simNet) (hold func(b []byte) bool, due func(now time.Duration) time.Duration)
}

// The patterns of issue 28: late, slowly, never, selectively. Each one
// keeps the slow QPs' ACK timers (67 ms) from ever running out but for
// never, whose QPs time out and recover one packet at a time.
var ackPatterns = []ackPattern{
	{"late40ms", func(n *simNet) (func([]byte) bool, func(time.Duration) time.Duration) {
		// Every ACK, 40 ms late.
		type held struct {
			at time.Duration
			b  []byte
		}
		var q []held
		return func(b []byte) bool {
				q = append(q, held{n.now + 40*time.Millisecond, b})
				return true
			}, func(now time.Duration) time.Duration {
				for len(q) > 0 && q[0].at <= now {
					n.pipe[1].Transmit([][]byte{q[0].b})
					q = q[1:]
				}
				if len(q) == 0 {
					return 0
				}
				return q[0].at
			}
	}},
	{"every40ms", func(n *simNet) (func([]byte) bool, func(time.Duration) time.Duration) {
		// One ACK per QP every 40 ms, the newest: it acknowledges
		// everything the peer has had.
		latest := map[uint32][]byte{}
		var f bth.Frame
		next := 40 * time.Millisecond
		return func(b []byte) bool {
				f.Decode(b)
				if old := latest[f.BTH.DestQP()]; old != nil {
					n.pipe[1].Release([][]byte{old})
				}
				latest[f.BTH.DestQP()] = b
				return true
			}, func(now time.Duration) time.Duration {
				if now >= next {
					for k, b := range latest {
						n.pipe[1].Transmit([][]byte{b})
						delete(latest, k)
					}
					next += 40 * time.Millisecond
				}
				return next
			}
	}},
	{"never", func(n *simNet) (func([]byte) bool, func(time.Duration) time.Duration) {
		return func(b []byte) bool {
			n.pipe[1].Release([][]byte{b})
			return true
		}, func(time.Duration) time.Duration { return 0 }
	}},
	{"selective", func(n *simNet) (func([]byte) bool, func(time.Duration) time.Duration) {
		// One ACK in eight, per QP; the rest dropped.
		seen := map[uint32]int{}
		var f bth.Frame
		return func(b []byte) bool {
			f.Decode(b)
			seen[f.BTH.DestQP()]++
			if seen[f.BTH.DestQP()]%8 == 0 {
				return false
			}
			n.pipe[1].Release([][]byte{b})
			return true
		}, func(time.Duration) time.Duration { return 0 }
	}},
}

// TestSlowPeersKeepGoodPeersRate: two QPs to a good peer and eight to a
// hostile one share an engine's transmit budget over a 1 Gbit/s link.
// The hostile peer acknowledges late, slowly, never or selectively (and
// never so late that an ACK timer runs out, but for never). Under each
// pattern the good peer's QPs must keep at least 80% of the goodput they
// have when the hostile peer's QPs send nothing, measured in simulated
// time from 100 to 300 ms. Before the budget was shared between peers,
// the slow peer's QPs held the budget in flight while they waited and
// spent whatever the good QPs freed.
func TestSlowPeersKeepGoodPeersRate(t *testing.T) {
	base := runSlowPeer(t, nil)
	t.Logf("alone: good peer %.1f Mbit/s", base.good)
	for _, p := range ackPatterns {
		t.Run(p.name, func(t *testing.T) {
			r := runSlowPeer(t, &p)
			t.Logf("good peer %.1f Mbit/s (%.0f%% of alone), slow peer %.1f Mbit/s, %d timeouts",
				r.good, 100*r.good/base.good, r.slow, r.timeouts)
			if r.good < 0.8*base.good {
				t.Errorf("good peer at %.1f Mbit/s under attack, %.0f%% of its %.1f Mbit/s alone; want at least 80%%",
					r.good, 100*r.good/base.good, base.good)
			}
		})
	}
}

type slowPeerResult struct {
	good, slow float64 // goodput in Mbit/s
	timeouts   uint64
}

// runSlowPeer runs the workload of TestSlowPeersKeepGoodPeersRate with
// the hostile peer's answers shaped by p (nil: its QPs send nothing).
func runSlowPeer(t *testing.T, p *ackPattern) slowPeerResult {
	t.Helper()
	const (
		goodQPs, slowQPs = 2, 8
		depth, size      = 4, 65536
		from, to         = 100 * time.Millisecond, 300 * time.Millisecond
	)
	n := newSimNetMTU(t, 1, faults{}, MTU1024)
	b := n.ends[1]
	e, err := NewEngine(EngineConfig{Out: b, LocalIPs: []netip.Addr{simIPs[1], ipSlow}, PortMTU: MTU1024})
	if err != nil {
		t.Fatal(err)
	}
	b.e = e
	n.epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := link.Faults{Rate: 1_000_000_000, RateOverhead: 24, Delay: 20 * time.Microsecond, MaxQueueDelay: 20 * time.Millisecond}
	n.pipe[0], n.pipe[1] = link.NewPipe(link.PipeConfig{Seed: 1, MTU: 1500, MaxFrame: MaxFrameLen(MTU1024), Buffers: 8192,
		AtoB: f, BtoA: f, Clock: func() time.Time { return n.epoch.Add(n.now) }})
	n.rx = make([][]byte, 64)
	var due func(time.Duration) time.Duration
	if p != nil {
		var hold func([]byte) bool
		hold, due = p.make(n)
		var fr bth.Frame
		n.hold = func(from int, b []byte) bool {
			return from == 1 && fr.Decode(b) == nil && fr.SrcIP() == ipSlow && hold(b)
		}
	}

	a := n.ends[0]
	a.mem.add(localKey, localBase, size, AccessLocalWrite)
	b.mem.add(remoteKey, remBase, size, AccessLocalWrite|AccessRemoteWrite)
	cq := &testCQ{}
	var qps []*QP
	for i := range goodQPs + slowQPs {
		addr, timeout := simIPs[1], uint8(14) // 67 ms
		if i >= goodQPs {
			addr = ipSlow
		}
		qps = append(qps, connectPairAt(t, n, uint32(0x100+i), cq, depth, addr, timeout))
	}
	post := func(i int) {
		wr := SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGL: []SGE{{Addr: localBase, Length: size, LKey: localKey}}, RemoteAddr: remBase, RKey: remoteKey}
		if err := qps[i].PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	for i := range qps {
		if i < goodQPs || p != nil {
			for range depth {
				post(i)
			}
		}
	}
	var r slowPeerResult
	var good, slow int
	for n.now < to {
		if due != nil {
			n.alarm = due(n.now)
		}
		if !n.step() {
			t.Fatalf("hang at %v", n.now)
		}
		if in, _ := a.e.Inflight(); in > a.e.maxInflight {
			t.Fatalf("at %v: %d packets in flight, budget %d", n.now, in, a.e.maxInflight)
		}
		for _, wc := range cq.wcs {
			i := int(wc.ID)
			if i < goodQPs && wc.Status != WCSuccess {
				t.Fatalf("good QP %d: completion %v", i, wc.Status)
			}
			if wc.Status != WCSuccess {
				continue
			}
			if n.now >= from {
				if i < goodQPs {
					good += size
				} else {
					slow += size
				}
			}
			post(i)
		}
		cq.wcs = cq.wcs[:0]
	}
	if len(a.e.peers) > 2 {
		t.Errorf("%d peer accounts for 2 peers", len(a.e.peers))
	}
	secs := (to - from).Seconds()
	r.good, r.slow = float64(good)*8/secs/1e6, float64(slow)*8/secs/1e6
	r.timeouts = a.e.Stats().Timeouts.Load()
	return r
}
