package qp_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/xroce/xroce/qp"
)

// wire is an Output that queues frames for the other engine.
type wire struct{ frames [][]byte }

func (w *wire) Alloc() []byte  { return make([]byte, qp.MaxFrameLen(qp.MTU4096)) }
func (w *wire) Send(f []byte)  { w.frames = append(w.frames, f) }
func (w *wire) take() [][]byte { f := w.frames; w.frames = nil; return f }
func (c *printCQ) Complete(wc *qp.WC) {
	fmt.Printf("%s: %v %v %d bytes\n", c.name, wc.Opcode, wc.Status, wc.ByteLen)
}

type printCQ struct{ name string }

// mem is a Memory with one region per key, all access allowed.
type mem map[uint32][]byte

func (m mem) get(key uint32, addr uint64, n uint32) ([]byte, bool) {
	b := m[key]
	if addr > uint64(len(b)) || uint64(n) > uint64(len(b))-addr {
		return nil, false
	}
	return b[addr : addr+uint64(n) : addr+uint64(n)], true
}
func (m mem) Local(k uint32, a uint64, n uint32, _ qp.Access) ([]byte, bool)  { return m.get(k, a, n) }
func (m mem) Remote(k uint32, a uint64, n uint32, _ qp.Access) ([]byte, bool) { return m.get(k, a, n) }
func (m mem) Invalidate(uint32) bool                                          { return false }

// Two engines back to back: one RC QP each, brought to RTS, one SEND.
func Example() {
	ips := [2]netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")}
	var (
		wires [2]*wire
		eng   [2]*qp.Engine
		qps   [2]*qp.QP
		mems  = [2]mem{{1: []byte("hello, RoCE")}, {1: make([]byte, 64)}}
	)
	for i := range 2 {
		wires[i] = &wire{}
		eng[i], _ = qp.NewEngine(qp.EngineConfig{Out: wires[i], LocalIPs: []netip.Addr{ips[i]}})
		qps[i], _ = eng[i].CreateQP(qp.Config{Type: qp.RC, QPN: uint32(0x11 + i), Mem: mems[i],
			SendCQ: &printCQ{fmt.Sprint("send cq ", i)}, RecvCQ: &printCQ{fmt.Sprint("recv cq ", i)}})
	}
	for i, q := range qps {
		must(q.Modify(&qp.Attr{State: qp.StateInit, PKey: 0xffff, Port: 1, AccessFlags: qp.AccessRemoteWrite},
			qp.AttrState|qp.AttrPKey|qp.AttrPort|qp.AttrAccessFlags))
		must(q.Modify(&qp.Attr{State: qp.StateRTR, PathMTU: qp.MTU1024, DestQPN: qps[1-i].QPN(), RQPSN: 100,
			MaxDestRdAtomic: 1, MinRNRTimer: 12, AV: qp.AddressVector{SrcIP: ips[i], DstIP: ips[1-i]}},
			qp.AttrState|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer|qp.AttrAV))
		must(q.Modify(&qp.Attr{State: qp.StateRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxRdAtomic))
	}
	must(qps[1].PostRecv(&qp.RecvWR{ID: 1, SGL: []qp.SGE{{Addr: 0, Length: 64, LKey: 1}}}))
	must(qps[0].PostSend(&qp.SendWR{ID: 2, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGL: []qp.SGE{{Addr: 0, Length: 11, LKey: 1}}}))
	var now time.Duration
	for range 4 { // the SEND, then its ACK
		for i := range 2 {
			eng[i].Poll(now)
			eng[1-i].Input(wires[i].take(), now)
		}
		now += time.Microsecond
	}
	fmt.Printf("%q\n", mems[1][1][:11])
	// Output:
	// recv cq 1: RECV SUCCESS 11 bytes
	// send cq 0: SEND SUCCESS 0 bytes
	// "hello, RoCE"
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
