package qp

import (
	"encoding/binary"
	"testing"

	"github.com/xroce/xroce/bth"
)

// fuzzFrames turns fuzz data into frames: raw bytes when the first byte is
// even, otherwise well-formed frames (valid ICRC) whose transport fields
// come from the data, so that they reach the QPs' logic.
func fuzzFrames(t *testing.T, data []byte) [][]byte {
	if len(data) == 0 {
		return nil
	}
	if data[0]%2 == 0 {
		return [][]byte{data[1:]}
	}
	var frames [][]byte
	data = data[1:]
	for len(data) >= 16 && len(frames) < 8 {
		h := data[:16]
		data = data[16:]
		op := bth.Opcode(h[0])
		if !op.Known() {
			op = bth.Opcode(h[0] % 0x18)
		}
		qpn := []uint32{0x200, 0x201, 0x202, 0x204}[h[1]%4]
		ff := bth.FrameFields{BTH: bth.BTHFields{Opcode: op, DestQP: qpn, AckReq: h[2]&1 != 0,
			PSN: bth.PSN(500 + uint32(int8(h[3]))).Add(0)}}
		if !op.IsRequest() {
			ff.BTH.PSN = bth.PSN(9 + uint32(int8(h[3]))) // near the requester's PSNs
		}
		va := remBase + uint64(binary.BigEndian.Uint16(h[4:]))*8 - 64
		rkey := uint32(remoteKey)
		if h[6]&7 == 0 {
			rkey = uint32(h[7])
		}
		ln := uint32(binary.BigEndian.Uint16(h[8:]))
		ff.RETH = bth.RETHFields{VA: va, RKey: rkey, DMALen: ln}
		ff.AtomicETH = bth.AtomicETHFields{VA: va, RKey: rkey, SwapAdd: uint64(h[10]), Compare: uint64(h[11])}
		ff.AETH = bth.AETHFields{Syndrome: bth.Syndrome(h[12]), MSN: bth.PSN(h[13])}
		ff.DETH = bth.DETHFields{QKey: 0x11111111 ^ uint32(h[14]&1), SrcQP: 7}
		n := int(h[15]) * 8
		if n > len(data) {
			n = len(data)
		}
		payload := data[:n]
		data = data[n:]
		buf := make([]byte, ff.FrameLen(len(payload))+8)
		ff.SrcMAC, ff.DstMAC, ff.SrcIP, ff.DstIP, ff.TTL, ff.BTH.PKey = simMACs[0], simMACs[1], ipA, ipB, 64, 0xffff
		l, err := bth.Build(buf, &ff, payload)
		if err != nil {
			continue
		}
		frames = append(frames, buf[:l])
	}
	return frames
}

// FuzzInput feeds arbitrary frames to an engine whose QPs are in RTS: RC
// responders, a UC and a UD QP, and an RC requester with READs, atomics
// and SENDs outstanding. Nothing may panic, touch memory outside a region
// or break the queues' invariants.
func FuzzInput(f *testing.F) {
	seed := func(op bth.Opcode, qp byte, payload int) []byte {
		d := []byte{1, byte(op), qp, 1, 0, 8, 0, 1, 0, 1, 0, 2, 3, 0, 0, 0, byte(payload / 8)}
		return append(d, make([]byte, payload)...)
	}
	for _, op := range []bth.Opcode{bth.RCSendOnly, bth.RCSendFirst, bth.RCWriteOnly, bth.RCWriteFirst, bth.RCReadRequest,
		bth.RCFetchAdd, bth.RCCompareSwap, bth.RCAck, bth.RCReadResponseOnly, bth.RCAtomicAck, bth.UCSendOnly, bth.UDSendOnly, bth.RCSendOnlyInv} {
		for qp := range byte(4) {
			f.Add(seed(op, qp, 0))
			f.Add(seed(op, qp, 64))
		}
	}
	f.Add(append([]byte{1}, append(seed(bth.RCSendFirst, 0, 1024)[1:], seed(bth.RCSendLast, 0, 8)[1:]...)...))
	f.Add([]byte{0, 1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		v := newVictim(t)
		mk := func(typ Type, qpn uint32) *QP {
			q, err := v.e.CreateQP(Config{Type: typ, QPN: qpn, SendCQ: &testCQ{}, RecvCQ: &testCQ{}, Mem: v.mem})
			if err != nil {
				t.Fatal(err)
			}
			return q
		}
		uc, ud := mk(UC, 0x202), mk(UD, 0x204)
		walkAttrs(t, uc, UC)
		walkAttrs(t, ud, UD)
		for _, q := range []*QP{uc, ud} {
			_ = q.PostRecv(&RecvWR{ID: 1, SGL: sge(localBase+0x7000, 2048)})
		}
		// The good QP (0x201) also acts as a requester with work in flight.
		req := v.good
		_ = req.PostSend(&SendWR{Opcode: WRSend, SGL: sge(localBase, 3000), Flags: SendSignaled})
		_ = req.PostSend(&SendWR{Opcode: WRRDMARead, SGL: sge(localBase+0x1000, 2500), RemoteAddr: 0x1234, RKey: 9})
		_ = req.PostSend(&SendWR{Opcode: WRAtomicFetchAdd, SGL: sge(localBase+0x2000, 8), RemoteAddr: 0x1238, RKey: 9})
		v.e.Poll(0)
		frames := fuzzFrames(t, data)
		v.e.Input(frames, 1000)
		v.e.Poll(1000)
		v.e.Poll(1 << 40)
		for _, r := range v.mem.regions {
			if !r.guardsIntact() {
				t.Fatalf("memory outside region %d touched", r.key)
			}
		}
		for _, q := range v.e.qps {
			if int32(q.sqReq-q.sqHead) < 0 || int32(q.sqTail-q.sqReq) < 0 || q.rdOut < 0 || int32(q.rqTail-q.rqHead) < 0 {
				t.Fatalf("queue invariants broken: %s", q.debugString())
			}
		}
	})
}

func walkAttrs(t *testing.T, q *QP, typ Type) {
	p := path(typ)
	for i, s := range []State{StateInit, StateRTR, StateRTS} {
		a := fullAttr(s)
		a.AV = simAV(1)
		a.DestQPN = 0x999
		a.RQPSN = 500
		if err := q.Modify(a, AttrState|p[i]); err != nil {
			t.Fatal(err)
		}
	}
}
