package qp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/xroce/xroce/bth"
)

type capture struct {
	client, server []bth.Frame // frames in each direction, in order
	rawC, rawS     [][]byte
	all            []bth.Frame
	fromClient     []bool
}

func loadCapture(t *testing.T, name string) *capture {
	c := &capture{}
	for _, b := range readPcap(t, name) {
		var f bth.Frame
		if err := f.Decode(b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !f.VerifyICRC() {
			t.Fatalf("%s: bad ICRC in the capture", name)
		}
		fromClient := len(c.all) == 0 || f.SrcIP() == c.all[0].SrcIP()
		c.all = append(c.all, f)
		c.fromClient = append(c.fromClient, fromClient)
		if fromClient {
			c.client = append(c.client, f)
			c.rawC = append(c.rawC, b)
		} else {
			c.server = append(c.server, f)
			c.rawS = append(c.rawS, b)
		}
	}
	return c
}

// transport returns a frame's bytes from the BTH to the end of the pad.
func transport(f *bth.Frame) []byte {
	p := f.Packet()
	ip := bth.IPv4Size
	if f.IsIPv6() {
		ip = bth.IPv6Size
	}
	return p[ip+bth.UDPSize : len(p)-bth.ICRCSize]
}

// goldenQP makes a QP in RTS that plays one side of a capture.
func goldenQP(t *testing.T, out Output, mem Memory, self, peer *bth.Frame, qpn, dest uint32, rqPSN, sqPSN bth.PSN) (*Engine, *QP) {
	e, err := NewEngine(EngineConfig{Out: out, LocalIPs: []netip.Addr{self.DstIP()}})
	if err != nil {
		t.Fatal(err)
	}
	q, err := e.CreateQP(Config{Type: RC, QPN: qpn, SendCQ: &testCQ{}, RecvCQ: &testCQ{}, Mem: mem, MaxSendWR: 64})
	if err != nil {
		t.Fatal(err)
	}
	av := AddressVector{SrcIP: self.DstIP(), DstIP: self.SrcIP(), SrcMAC: [6]byte(self.DstMAC()), DstMAC: [6]byte(self.SrcMAC()), HopLimit: 64}
	for _, s := range []struct {
		a Attr
		m AttrMask
	}{
		{Attr{State: StateInit, PKey: 0xffff, Port: 1, AccessFlags: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}, AttrPKey | AttrPort | AttrAccessFlags},
		{Attr{State: StateRTR, AV: av, PathMTU: MTU1024, DestQPN: dest, RQPSN: rqPSN, MaxDestRdAtomic: 16, MinRNRTimer: 12},
			AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
		{Attr{State: StateRTS, SQPSN: sqPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic},
	} {
		if err := q.Modify(&s.a, AttrState|s.m); err != nil {
			t.Fatal(err)
		}
	}
	return e, q
}

// TestGoldenResponder plays the server of rxe captures (perftest
// ib_write_bw, ib_read_bw, ib_atomic_bw): fed the client's frames one by
// one, it must answer with exactly the transport bytes rxe sent: ACKs,
// READ responses and atomic ACKs with the same opcodes, PSNs, syndromes,
// MSNs and payload.
func TestGoldenResponder(t *testing.T) {
	for _, name := range []string{"04_write_bw_s8192.pcap", "05_read_bw_s8192.pcap", "06_atomic_bw.pcap"} {
		t.Run(name, func(t *testing.T) {
			c := loadCapture(t, name)
			first := &c.client[0]
			mem := newTestMem()
			var va uint64
			var rkey, n uint32
			switch {
			case first.RETH != nil:
				va, rkey, n = first.RETH.VA(), first.RETH.RKey(), first.RETH.DMALen()
			case first.AtomicETH != nil:
				va, rkey = first.AtomicETH.VA(), first.AtomicETH.RKey()
				end := va + 8
				for i := range c.client {
					a := c.client[i].AtomicETH.VA()
					va, end = min(va, a), max(end, a+8)
				}
				n = uint32(end - va)
			}
			r := mem.add(rkey, va, int(n), AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
			// What the server's memory held: the first READ's response data,
			// or the first atomic ACK's original value.
			off := 0
			for i := range c.server {
				s := &c.server[i]
				if s.Opcode().IsReadResponse() && off < len(r.buf) {
					off += copy(r.buf[off:], s.Payload)
				}
			}
			if first.AtomicETH != nil {
				seen := map[uint64]bool{}
				for i := range c.client {
					a := c.client[i].AtomicETH.VA()
					if !seen[a] {
						seen[a] = true
						binary.LittleEndian.PutUint64(r.buf[a-va:], c.server[i].AtomicAckETH.OrigRemoteData())
					}
				}
			}
			out := &nullOut{}
			e, _ := goldenQP(t, out, mem, first, nil, first.BTH.DestQP(), c.server[0].BTH.DestQP(), first.BTH.PSN(), 0)
			var got []bth.Frame
			for i := range c.client {
				out.sent = out.sent[:0]
				e.Input([][]byte{c.rawC[i]}, 0)
				e.Poll(0)
				for _, b := range out.sent {
					var f bth.Frame
					if err := f.Decode(b); err != nil || !f.VerifyICRC() {
						t.Fatalf("sent a bad frame: %v", err)
					}
					got = append(got, f)
				}
			}
			if len(got) != len(c.server) {
				t.Fatalf("sent %d frames, rxe sent %d", len(got), len(c.server))
			}
			for i := range got {
				g, w := transport(&got[i]), transport(&c.server[i])
				if !bytes.Equal(g, w) {
					t.Fatalf("frame %d (%v PSN %d): transport bytes\n% x\nrxe sent (%v PSN %d)\n% x", i, got[i].Opcode(), got[i].BTH.PSN(), g[:min(len(g), 48)],
						c.server[i].Opcode(), c.server[i].BTH.PSN(), w[:min(len(w), 48)])
				}
				if got[i].DstIP() != c.server[i].DstIP() || !bytes.Equal(got[i].DstMAC(), c.server[i].DstMAC()) {
					t.Fatalf("frame %d addressed to %v %v, rxe: %v %v", i, got[i].DstIP(), got[i].DstMAC(), c.server[i].DstIP(), c.server[i].DstMAC())
				}
			}
		})
	}
}

// TestGoldenRequester plays the client of the ib_write_bw capture: posting
// the same WRITEs with the same PSNs, it must send the same packets
// (opcodes, PSNs, AckReq, RETH, payload sizes) as rxe, fed rxe's ACKs.
func TestGoldenRequester(t *testing.T) {
	c := loadCapture(t, "04_write_bw_s8192.pcap")
	first := &c.client[0]
	mem := newTestMem()
	mem.add(localKey, localBase, 8192, AccessLocalWrite)
	out := &nullOut{}
	e, q := goldenQP(t, out, mem, &c.server[0], nil, c.server[0].BTH.DestQP(), first.BTH.DestQP(), 0, first.BTH.PSN())
	writes := 0
	for i := range c.client {
		if c.client[i].RETH != nil {
			writes++
		}
	}
	for i := range writes {
		wr := SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: sge(localBase, 8192),
			RemoteAddr: first.RETH.VA(), RKey: first.RETH.RKey()}
		if err := q.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	var got []bth.Frame
	si := 0
	for range 100 {
		out.sent = out.sent[:0]
		e.Poll(time.Duration(si))
		for _, b := range out.sent {
			var f bth.Frame
			if err := f.Decode(b); err != nil {
				t.Fatal(err)
			}
			got = append(got, f)
		}
		if si == len(c.server) {
			break
		}
		e.Input([][]byte{c.rawS[si]}, 0)
		si++
	}
	if len(got) != len(c.client) {
		t.Fatalf("sent %d frames, rxe sent %d", len(got), len(c.client))
	}
	for i := range got {
		g, w := &got[i], &c.client[i]
		if g.Opcode() != w.Opcode() || g.BTH.PSN() != w.BTH.PSN() || g.BTH.AckReq() != w.BTH.AckReq() ||
			g.BTH.DestQP() != w.BTH.DestQP() || len(g.Payload) != len(w.Payload) ||
			(w.RETH != nil) != (g.RETH != nil) || w.RETH != nil && !bytes.Equal(g.RETH, w.RETH) ||
			!bytes.Equal(g.BTH[:4], w.BTH[:4]) {
			t.Fatalf("frame %d: %v PSN %d AckReq %v, rxe sent %v PSN %d AckReq %v (BTH % x vs % x)", i,
				g.Opcode(), g.BTH.PSN(), g.BTH.AckReq(), w.Opcode(), w.BTH.PSN(), w.BTH.AckReq(), []byte(g.BTH), []byte(w.BTH))
		}
	}
	if n := len(q.sendCQ.(*testCQ).wcs); n != writes {
		t.Fatalf("%d completions, want %d", n, writes)
	}
}

// TestReplayReadRetries feeds our responder the requests of an rxe
// ib_read_bw client that ran with 10% loss: new READs, and retries of
// partly answered ones (a later PSN, address and length). Every request
// must be answered with the PSNs it asks for and exactly the bytes of its
// range, and the QP must stay in RTS.
func TestReplayReadRetries(t *testing.T) {
	c := loadCapture(t, "11_read_bw_loss10_resp.pcap")
	first := &c.client[0]
	va, rkey := first.RETH.VA(), first.RETH.RKey()
	mem := newTestMem()
	r := mem.add(rkey, va, int(first.RETH.DMALen()), AccessLocalWrite|AccessRemoteRead)
	for i := range r.buf {
		r.buf[i] = byte(i*7 + i>>8)
	}
	out := &nullOut{}
	e, q := goldenQP(t, out, mem, first, nil, first.BTH.DestQP(), c.server[0].BTH.DestQP(), first.BTH.PSN(), 0)
	reads, retries, gaps := 0, 0, 0
	for i := range c.client {
		f := &c.client[i]
		if f.Opcode() != bth.RCReadRequest {
			continue
		}
		reads++
		if f.RETH.VA() != va {
			retries++
		}
		gap := q.ePSN.Less(f.BTH.PSN()) // the capture lost an earlier request
		out.sent = out.sent[:0]
		e.Input([][]byte{c.rawC[i]}, 0)
		e.Poll(0)
		if gap {
			gaps++
			for _, b := range out.sent {
				var g bth.Frame
				if err := g.Decode(b); err != nil || g.Opcode() != bth.RCAck || g.AETH.Syndrome() != bth.NakPSNSeqError || g.BTH.PSN() != q.ePSN {
					t.Fatalf("request %d beyond a gap: answered %v, want a PSN sequence NAK for %d", i, g.Opcode(), q.ePSN)
				}
			}
			continue
		}
		psn, off := f.BTH.PSN(), int(f.RETH.VA()-va)
		want := int(f.RETH.DMALen())
		got := 0
		for k, b := range out.sent {
			var g bth.Frame
			if err := g.Decode(b); err != nil {
				t.Fatal(err)
			}
			if g.BTH.PSN() != psn.Add(uint32(k)) || !g.Opcode().IsReadResponse() {
				t.Fatalf("request %d (PSN %d): response %d is %v PSN %d", i, psn, k, g.Opcode(), g.BTH.PSN())
			}
			if !bytes.Equal(g.Payload, r.buf[off+got:off+got+len(g.Payload)]) {
				t.Fatalf("request %d: response %d carries the wrong bytes", i, k)
			}
			got += len(g.Payload)
		}
		if got != want {
			t.Fatalf("request %d (PSN %d, %d bytes at +%d): answered %d bytes", i, psn, want, off, got)
		}
		if q.State() != StateRTS {
			t.Fatalf("request %d: QP in %v", i, q.State())
		}
	}
	if retries == 0 || reads < 50 {
		t.Fatalf("%d reads, %d retries: the capture did not exercise retries", reads, retries)
	}
	t.Logf("%d READ requests, %d retries from the middle, %d beyond a gap", reads, retries, gaps)
}

// TestGoldenRequesterReadAtomic plays the client of the ib_read_bw and
// ib_atomic_bw captures: it must send rxe's requests (opcodes, PSNs,
// AckReq, RETH or AtomicETH) and, fed rxe's READ responses and atomic
// ACKs, complete each request with the data rxe returned.
func TestGoldenRequesterReadAtomic(t *testing.T) {
	for _, name := range []string{"05_read_bw_s8192.pcap", "06_atomic_bw.pcap"} {
		t.Run(name, func(t *testing.T) {
			c := loadCapture(t, name)
			first := &c.client[0]
			mem := newTestMem()
			local := mem.add(localKey, localBase, 8192*len(c.client), AccessLocalWrite)
			out := &nullOut{}
			e, q := goldenQP(t, out, mem, &c.server[0], nil, c.server[0].BTH.DestQP(), first.BTH.DestQP(), 0, first.BTH.PSN())
			for i := range c.client {
				f := &c.client[i]
				wr := SendWR{ID: uint64(i), Flags: SendSignaled}
				switch f.Opcode() {
				case bth.RCReadRequest:
					wr.Opcode, wr.RemoteAddr, wr.RKey = WRRDMARead, f.RETH.VA(), f.RETH.RKey()
					wr.SGL = sge(localBase+uint64(i)*8192, f.RETH.DMALen())
				case bth.RCFetchAdd:
					a := f.AtomicETH
					wr.Opcode, wr.RemoteAddr, wr.RKey, wr.CompareAdd = WRAtomicFetchAdd, a.VA(), a.RKey(), a.SwapAdd()
					wr.SGL = sge(localBase+uint64(i)*8192, 8)
				default:
					t.Fatalf("unexpected %v in the capture", f.Opcode())
				}
				if err := q.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
			}
			var got []bth.Frame
			for si := 0; ; si++ {
				out.sent = out.sent[:0]
				e.Poll(0)
				for _, b := range out.sent {
					var f bth.Frame
					if err := f.Decode(b); err != nil {
						t.Fatal(err)
					}
					got = append(got, f)
				}
				if si == len(c.server) {
					break
				}
				e.Input([][]byte{c.rawS[si]}, 0)
			}
			if len(got) != len(c.client) {
				t.Fatalf("sent %d requests, rxe sent %d", len(got), len(c.client))
			}
			for i := range got {
				if g, w := transport(&got[i]), transport(&c.client[i]); !bytes.Equal(g, w) {
					t.Fatalf("request %d: transport bytes\n% x\nrxe sent\n% x", i, g, w)
				}
			}
			wcs := q.sendCQ.(*testCQ).wcs
			if len(wcs) != len(c.client) {
				t.Fatalf("%d completions for %d requests", len(wcs), len(c.client))
			}
			// The data of each response landed in its request's buffer.
			k := 0
			for i := range c.client {
				buf := local.buf[i*8192:]
				if wcs[i].Status != WCSuccess || wcs[i].ID != uint64(i) {
					t.Fatalf("completion %d: %+v", i, wcs[i])
				}
				if c.client[i].Opcode() == bth.RCFetchAdd {
					if got := binary.LittleEndian.Uint64(buf); got != c.server[i].AtomicAckETH.OrigRemoteData() {
						t.Fatalf("FETCH_ADD %d returned %d, rxe said %d", i, got, c.server[i].AtomicAckETH.OrigRemoteData())
					}
					continue
				}
				off := 0
				for ; k < len(c.server) && off < int(c.client[i].RETH.DMALen()); k++ {
					p := c.server[k].Payload
					if !bytes.Equal(buf[off:off+len(p)], p) {
						t.Fatalf("READ %d: bytes at %d differ from rxe's response", i, off)
					}
					off += len(p)
				}
			}
		})
	}
}

// TestGoldenUCWrite plays both sides of an rxe UC ib_write_bw capture
// (1500-byte WRITEs at MTU 1024): as the client it sends rxe's packets, as
// the server it places every WRITE and sends nothing back.
func TestGoldenUCWrite(t *testing.T) {
	c := loadCapture(t, "08_uc_write_bw_s1500.pcap")
	first := &c.client[0]
	if first.Opcode() != bth.UCWriteFirst {
		t.Fatalf("capture starts with %v", first.Opcode())
	}
	// Server side.
	mem := newTestMem()
	va, n := first.RETH.VA(), int(first.RETH.DMALen())
	end := va + uint64(n)
	for i := range c.client {
		if f := &c.client[i]; f.RETH != nil {
			va, end = min(va, f.RETH.VA()), max(end, f.RETH.VA()+uint64(f.RETH.DMALen()))
		}
	}
	r := mem.add(first.RETH.RKey(), va, int(end-va), AccessLocalWrite|AccessRemoteWrite)
	out := &nullOut{}
	e, q := goldenUC(t, out, mem, first, first.BTH.DestQP(), 0x99, first.BTH.PSN(), 0)
	var want []byte
	var at uint64
	for i := range c.client {
		e.Input([][]byte{c.rawC[i]}, 0)
		e.Poll(0)
		f := &c.client[i]
		if f.Opcode() == bth.UCWriteFirst {
			want, at = want[:0], f.RETH.VA()-va
		}
		want = append(want, f.Payload...)
		if f.Opcode() == bth.UCWriteLast && !bytes.Equal(r.buf[at:at+uint64(len(want))], want) {
			t.Fatalf("WRITE ending at frame %d not placed", i)
		}
	}
	if len(out.sent) != 0 || q.State() != StateRTS || len(c.server) != 0 {
		t.Fatalf("UC server sent %d frames (rxe %d), state %v", len(out.sent), len(c.server), q.State())
	}
	// Client side.
	lmem := newTestMem()
	lmem.add(localKey, localBase, n, AccessLocalWrite)
	out = &nullOut{}
	e, q = goldenUC(t, out, lmem, &bth.Frame{}, 0x99, first.BTH.DestQP(), 0, first.BTH.PSN())
	for i := range c.client {
		if f := &c.client[i]; f.RETH != nil {
			if err := q.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, SGL: sge(localBase, uint32(n)), RemoteAddr: f.RETH.VA(), RKey: f.RETH.RKey()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.Poll(0)
	if len(out.sent) != len(c.client) {
		t.Fatalf("sent %d frames, rxe %d", len(out.sent), len(c.client))
	}
	for i, b := range out.sent {
		var g bth.Frame
		if err := g.Decode(b); err != nil {
			t.Fatal(err)
		}
		w := &c.client[i]
		if !bytes.Equal(g.BTH, w.BTH) || !bytes.Equal(g.RETH, w.RETH) || len(g.Payload) != len(w.Payload) {
			t.Fatalf("frame %d: BTH % x RETH % x, rxe BTH % x RETH % x", i, []byte(g.BTH), []byte(g.RETH), []byte(w.BTH), []byte(w.RETH))
		}
	}
}

// goldenUC makes a UC QP in RTS.
func goldenUC(t *testing.T, out Output, mem Memory, self *bth.Frame, qpn, dest uint32, rqPSN, sqPSN bth.PSN) (*Engine, *QP) {
	e, err := NewEngine(EngineConfig{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	q, err := e.CreateQP(Config{Type: UC, QPN: qpn, SendCQ: &testCQ{}, RecvCQ: &testCQ{}, Mem: mem, MaxSendWR: 64})
	if err != nil {
		t.Fatal(err)
	}
	av := simAV(1)
	if self.IPv4 != nil {
		av = AddressVector{SrcIP: self.DstIP(), DstIP: self.SrcIP(), HopLimit: 64}
	}
	for _, s := range []struct {
		a Attr
		m AttrMask
	}{
		{Attr{State: StateInit, PKey: 0xffff, Port: 1, AccessFlags: AccessRemoteWrite}, AttrPKey | AttrPort | AttrAccessFlags},
		{Attr{State: StateRTR, AV: av, PathMTU: MTU1024, DestQPN: dest, RQPSN: rqPSN}, AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN},
		{Attr{State: StateRTS, SQPSN: sqPSN}, AttrSQPSN},
	} {
		if err := q.Modify(&s.a, AttrState|s.m); err != nil {
			t.Fatal(err)
		}
	}
	return e, q
}

// TestGoldenUDReceive feeds rxe's ibv_ud_pingpong datagrams to a UD QP:
// each lands after the 40-byte GRH area (20 zero bytes and the IPv4
// header) with the sender's QP number, as ibv_ud_pingpong expects.
func TestGoldenUDReceive(t *testing.T) {
	c := loadCapture(t, "02_ud_pingpong.pcap")
	var frames []*bth.Frame
	var raws [][]byte
	for i := range c.all {
		if c.all[i].Opcode() == bth.UDSendOnly && c.fromClient[i] {
			frames = append(frames, &c.all[i])
		}
	}
	for i, b := range c.rawC {
		if c.client[i].Opcode() == bth.UDSendOnly {
			raws = append(raws, b)
		}
	}
	if len(frames) == 0 {
		t.Fatal("no UD SEND in the capture")
	}
	f0 := frames[0]
	mem := newTestMem()
	local := mem.add(localKey, localBase, 8192*len(frames), AccessLocalWrite)
	out := &nullOut{}
	e, _ := NewEngine(EngineConfig{Out: out, LocalIPs: []netip.Addr{f0.DstIP()}, PortMTU: MTU2048})
	rcq := &testCQ{}
	q, err := e.CreateQP(Config{Type: UD, QPN: f0.BTH.DestQP(), SendCQ: &testCQ{}, RecvCQ: rcq, Mem: mem, MaxRecvWR: 64})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		a Attr
		m AttrMask
	}{{Attr{State: StateInit, PKey: 0xffff, Port: 1, QKey: f0.DETH.QKey()}, AttrPKey | AttrPort | AttrQKey}, {Attr{State: StateRTR}, 0}, {Attr{State: StateRTS, SQPSN: 1}, AttrSQPSN}} {
		if err := q.Modify(&s.a, AttrState|s.m); err != nil {
			t.Fatal(err)
		}
	}
	if f0.DETH.QKey() != 0x11111111 {
		t.Fatalf("ibv_ud_pingpong Q_Key %#x", f0.DETH.QKey())
	}
	for i := range frames {
		if err := q.PostRecv(&RecvWR{ID: uint64(i), SGL: sge(localBase+uint64(i)*8192, 8192)}); err != nil {
			t.Fatal(err)
		}
	}
	e.Input(raws, 0)
	if len(rcq.wcs) != len(frames) {
		t.Fatalf("%d receive completions for %d datagrams", len(rcq.wcs), len(frames))
	}
	for i, wc := range rcq.wcs {
		f := frames[i]
		buf := local.buf[i*8192:]
		if wc.Status != WCSuccess || wc.ByteLen != uint32(40+len(f.Payload)) || wc.SrcQP != f.DETH.SrcQP() || wc.Flags&WCWithGRH == 0 {
			t.Fatalf("completion %d: %+v", i, wc)
		}
		if !bytes.Equal(buf[:20], make([]byte, 20)) || !bytes.Equal(buf[20:40], f.IPv4[:20]) || !bytes.Equal(buf[40:40+len(f.Payload)], f.Payload) {
			t.Fatalf("datagram %d: GRH area or payload wrong", i)
		}
	}
}

// TestGoldenRCPingpong feeds the SENDs of an rxe ibv_rc_pingpong client
// (4096 bytes at MTU 1024) to the engine playing the server: every message
// arrives whole, and the ACKs are rxe's, byte for byte in the transport
// headers.
func TestGoldenRCPingpong(t *testing.T) {
	c := loadCapture(t, "01_rc_pingpong.pcap")
	var sends [][]byte
	var sendFrames []*bth.Frame
	for i := range c.client {
		if c.client[i].Opcode().IsSend() {
			sends = append(sends, c.rawC[i])
			sendFrames = append(sendFrames, &c.client[i])
		}
	}
	var acks []*bth.Frame
	for i := range c.server {
		if c.server[i].Opcode() == bth.RCAck {
			acks = append(acks, &c.server[i])
		}
	}
	first := sendFrames[0]
	mem := newTestMem()
	local := mem.add(localKey, localBase, 4096*len(sends), AccessLocalWrite)
	out := &nullOut{}
	e, q := goldenQP(t, out, mem, first, nil, first.BTH.DestQP(), acks[0].BTH.DestQP(), first.BTH.PSN(), 0)
	msgs := 0
	for _, f := range sendFrames {
		if f.Opcode().IsLast() {
			msgs++
		}
	}
	for i := range msgs {
		if err := q.PostRecv(&RecvWR{ID: uint64(i), SGL: sge(localBase+uint64(i)*4096, 4096)}); err != nil {
			t.Fatal(err)
		}
	}
	var got []bth.Frame
	for _, b := range sends {
		out.sent = out.sent[:0]
		e.Input([][]byte{b}, 0)
		e.Poll(0)
		for _, s := range out.sent {
			var f bth.Frame
			if err := f.Decode(s); err != nil {
				t.Fatal(err)
			}
			got = append(got, f)
		}
	}
	if len(got) != len(acks) {
		t.Fatalf("sent %d ACKs, rxe %d", len(got), len(acks))
	}
	for i := range got {
		if g, w := transport(&got[i]), transport(acks[i]); !bytes.Equal(g, w) {
			t.Fatalf("ACK %d: % x, rxe % x", i, g, w)
		}
	}
	wcs := q.recvCQ.(*testCQ).wcs
	if len(wcs) != msgs {
		t.Fatalf("%d receive completions for %d messages", len(wcs), msgs)
	}
	off := 0
	for i, f := range sendFrames {
		m := off / 4096
		if !bytes.Equal(local.buf[off:off+len(f.Payload)], f.Payload) {
			t.Fatalf("SEND packet %d (message %d) not placed", i, m)
		}
		off += len(f.Payload)
		if f.Opcode().IsLast() {
			off = (m + 1) * 4096
		}
	}
}
