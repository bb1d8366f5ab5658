package qp

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/xroce/xroce/bth"
)

// canary is what a deregistered test region holds: the engine must neither
// change it nor send it.
const canary = 0x5A

// dereg makes r's key invalid, as the verbs layer's Dereg does, and fills
// the memory with the canary.
func (r *region) dereg() {
	r.valid = false
	for i := range r.buf {
		r.buf[i] = canary
	}
}

func (r *region) untouched() bool {
	return bytes.Count(r.buf, []byte{canary}) == len(r.buf)
}

// wantNak checks that resp is exactly one NAK with syndrome syn for psn.
func wantNak(t *testing.T, resp []bth.Frame, syn bth.Syndrome, psn uint32) {
	t.Helper()
	if len(resp) != 1 || resp[0].Opcode() != bth.RCAck || resp[0].AETH.Syndrome() != syn || resp[0].BTH.PSN() != bth.PSN(psn) {
		var got []string
		for _, f := range resp {
			got = append(got, f.Opcode().String()+" "+f.AETH.Syndrome().String())
		}
		t.Fatalf("answer %v, want NAK %v for PSN %d", got, syn, psn)
	}
}

func rcFrame(t *testing.T, op bth.Opcode, psn uint32, reth bth.RETHFields, payload []byte) []byte {
	return forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: op, DestQP: 0x200, PSN: bth.PSN(psn), AckReq: op.IsLast()}, RETH: reth}, payload)
}

// A WRITE whose first packet was accepted takes no byte after the region
// is deregistered: its next packet gets NAK Remote Access Error, as a
// forged key would (the defect was a remote crash by one WRITE_MIDDLE).
func TestWriteAfterDereg(t *testing.T) {
	for _, next := range []bth.Opcode{bth.RCWriteMiddle, bth.RCWriteLast, bth.RCWriteLastImm} {
		t.Run(next.String(), func(t *testing.T) {
			v := newVictim(t)
			mtu := bytes.Repeat([]byte{0xEE}, 1024)
			n := uint32(2048)
			if next == bth.RCWriteMiddle {
				n = 3072
			}
			resp := v.input(rcFrame(t, bth.RCWriteFirst, 500, bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: n}, mtu))
			if len(resp) != 0 || !bytes.Equal(v.rem.buf[:1024], mtu) {
				t.Fatalf("WRITE_FIRST not placed: answer %d frames", len(resp))
			}
			v.rem.dereg()
			resp = v.input(forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: next, DestQP: 0x200, PSN: 501, AckReq: true}, Imm: 7}, mtu))
			wantNak(t, resp, bth.NakRemoteAccessError, 501)
			if !v.rem.untouched() {
				t.Fatal("a packet after Dereg wrote into the region")
			}
			if v.bad.State() != StateErr {
				t.Fatalf("QP in %v", v.bad.State())
			}
			for _, wc := range v.rcq[0].wcs {
				if wc.Status != WCWRFlushErr {
					t.Fatalf("receive completion %+v, want only flushes", wc)
				}
			}
			v.checkGood()
		})
	}
}

// A WRITE whose region is replaced, at the same address, by a region with
// another key after its first packet, does not land in the new region.
func TestWriteAfterReregister(t *testing.T) {
	v := newVictim(t)
	mtu := bytes.Repeat([]byte{0xEE}, 1024)
	v.input(rcFrame(t, bth.RCWriteFirst, 500, bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 2048}, mtu))
	v.rem.dereg()
	fresh := v.mem.add(remoteKey+0x100, remBase, 4096, AccessLocalWrite|AccessRemoteWrite)
	resp := v.input(rcFrame(t, bth.RCWriteLast, 501, bth.RETHFields{}, mtu))
	wantNak(t, resp, bth.NakRemoteAccessError, 501)
	if bytes.Count(fresh.buf, []byte{0}) != len(fresh.buf) {
		t.Fatal("the rest of the WRITE landed in the region registered after Dereg")
	}
}

// READ responses stop at Dereg: the one that cannot be read any more is a
// NAK Remote Access Error at its PSN, and no byte of the region leaves
// after Dereg.
func TestReadResponsesAfterDereg(t *testing.T) {
	v := newVictim(t)
	for i := range v.rem.buf {
		v.rem.buf[i] = 0x11
	}
	v.out.limited, v.out.budget = true, 2
	resp := v.input(rcFrame(t, bth.RCReadRequest, 500, bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 4096}, nil))
	if len(resp) != 2 || resp[0].Opcode() != bth.RCReadResponseFirst || resp[1].Opcode() != bth.RCReadResponseMiddle {
		t.Fatalf("%d responses before the output ran dry", len(resp))
	}
	v.rem.dereg()
	v.out.limited = false
	v.out.sent = v.out.sent[:0]
	v.e.Poll(0)
	var got []bth.Frame
	for _, b := range v.out.sent {
		var f bth.Frame
		if err := f.Decode(b); err != nil {
			t.Fatal(err)
		}
		if bytes.IndexByte(f.Payload, canary) >= 0 {
			t.Fatalf("%v disclosed memory deregistered before it was sent", f.Opcode())
		}
		got = append(got, f)
	}
	wantNak(t, got, bth.NakRemoteAccessError, 502)
	if v.bad.State() != StateErr {
		t.Fatalf("QP in %v", v.bad.State())
	}
	v.checkGood()
}

// A duplicate READ is executed again against the keys in force: after
// Dereg it is a remote access error, not a replay of the region's bytes.
func TestDuplicateReadAfterDereg(t *testing.T) {
	v := newVictim(t)
	req := rcFrame(t, bth.RCReadRequest, 500, bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 64}, nil)
	if resp := v.input(req); len(resp) != 1 || resp[0].Opcode() != bth.RCReadResponseOnly {
		t.Fatalf("READ: %d responses", len(resp))
	}
	v.rem.dereg()
	resp := v.input(req)
	wantNak(t, resp, bth.NakRemoteAccessError, 500)
	if v.bad.State() != StateErr {
		t.Fatalf("QP in %v", v.bad.State())
	}
}

// A duplicate READ must repeat the request it names: another R_Key,
// address or length is dropped, not answered with the saved data; a
// restart in its middle with VA and length moved by whole MTUs is
// answered from there.
func TestDuplicateReadMismatch(t *testing.T) {
	orig := bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 2048}
	for _, c := range []struct {
		name   string
		psn    uint32
		reth   bth.RETHFields
		answer int // responses; 0 = dropped
	}{
		{"same", 500, orig, 2},
		{"other R_Key", 500, bth.RETHFields{VA: 0x9000_0000, RKey: 3, DMALen: 2048}, 0},
		{"other address", 500, bth.RETHFields{VA: remBase + 8, RKey: remoteKey, DMALen: 2048}, 0},
		{"longer", 500, bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 4096}, 0},
		{"shorter", 500, bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 1024}, 0},
		{"restart in the middle", 501, bth.RETHFields{VA: remBase + 1024, RKey: remoteKey, DMALen: 1024}, 1},
		{"middle PSN, first address", 501, orig, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newVictim(t)
			copy(v.rem.buf, bytes.Repeat([]byte("secret"), 700))
			v.input(rcFrame(t, bth.RCReadRequest, 500, orig, nil))
			resp := v.input(rcFrame(t, bth.RCReadRequest, c.psn, c.reth, nil))
			if len(resp) != c.answer {
				t.Fatalf("%d responses, want %d", len(resp), c.answer)
			}
			if c.answer > 0 && (resp[0].BTH.PSN() != bth.PSN(c.psn) || !bytes.Equal(resp[0].Payload, v.rem.buf[(c.psn-500)*1024:][:len(resp[0].Payload)])) {
				t.Fatalf("replay starts at PSN %d with the wrong bytes", resp[0].BTH.PSN())
			}
			if c.answer == 0 && v.bad.Stats().RxInvalid.Load() != 1 {
				t.Fatalf("drop counted %d times", v.bad.Stats().RxInvalid.Load())
			}
			if v.bad.State() != StateRTS {
				t.Fatalf("QP in %v", v.bad.State())
			}
		})
	}
}

// A READ in the "behind" half of the PSN space at a PSN the responder
// never executed is dropped: spoofers without PSN knowledge get no data
// and no amplification.
func TestDuplicateReadNeverExecuted(t *testing.T) {
	v := newVictim(t)
	for _, psn := range []uint32{499, 400, 1<<24 + 500 - 1<<22} {
		resp := v.input(rcFrame(t, bth.RCReadRequest, psn&bth.PSNMask, bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 4096}, nil))
		if len(resp) != 0 {
			t.Fatalf("READ at never-executed PSN %d answered with %d frames", psn&bth.PSNMask, len(resp))
		}
	}
	if v.bad.State() != StateRTS || v.bad.Stats().Duplicates.Load() != 3 || v.bad.Stats().RxInvalid.Load() != 3 {
		t.Fatalf("QP in %v, %d duplicates, %d dropped", v.bad.State(), v.bad.Stats().Duplicates.Load(), v.bad.Stats().RxInvalid.Load())
	}
	// The same for an atomic.
	resp := v.input(forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCFetchAdd, DestQP: 0x200, PSN: 450},
		AtomicETH: bth.AtomicETHFields{VA: remBase, RKey: remoteKey, SwapAdd: 1}}, nil))
	if len(resp) != 0 || !bytes.Equal(v.rem.buf[:8], make([]byte, 8)) {
		t.Fatalf("atomic at a never-executed PSN: %d answers", len(resp))
	}
}

// max_dest_rd_atomic 0: READs, atomics and ATOMIC_WRITE get NAK Invalid
// Request (rxe's RESPST_ERR_TOO_MANY_RDMA_ATM_REQ).
func TestNoResponderResources(t *testing.T) {
	for _, c := range []struct {
		op      bth.Opcode
		payload []byte
	}{{bth.RCReadRequest, nil}, {bth.RCFetchAdd, nil}, {bth.RCCompareSwap, nil}, {bth.RCAtomicWrite, make([]byte, 8)}} {
		t.Run(c.op.String(), func(t *testing.T) {
			v := newVictim(t)
			for _, s := range []struct {
				a Attr
				m AttrMask
			}{{Attr{State: StateSQD}, 0}, {Attr{State: StateSQD, MaxDestRdAtomic: 0}, AttrMaxDestRdAtomic}, {Attr{State: StateRTS}, 0}} {
				if err := v.bad.Modify(&s.a, AttrState|s.m); err != nil {
					t.Fatal(err)
				}
			}
			ff := bth.FrameFields{BTH: bth.BTHFields{Opcode: c.op, DestQP: 0x200, PSN: 500},
				RETH: bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 8}, AtomicETH: bth.AtomicETHFields{VA: remBase, RKey: remoteKey, SwapAdd: 1}}
			wantNak(t, v.input(forge(t, ff, c.payload)), bth.NakInvalidRequest, 500)
			if v.bad.State() != StateErr || !bytes.Equal(v.rem.buf[:8], make([]byte, 8)) {
				t.Fatalf("QP in %v, memory % x", v.bad.State(), v.rem.buf[:8])
			}
			v.checkGood()
		})
	}
}

// Frames tagged for another VLAN are dropped; priority-tagged (VLAN 0)
// and untagged frames are taken.
func TestVLANFilter(t *testing.T) {
	v := newVictim(t)
	send := func(psn uint32, vlan bool, tci uint16) []bth.Frame {
		return v.input(forge(t, bth.FrameFields{VLAN: vlan, VLANTCI: tci,
			BTH: bth.BTHFields{Opcode: bth.RCSendOnly, DestQP: 0x200, PSN: bth.PSN(psn), AckReq: true}}, []byte("hi")))
	}
	if resp := send(500, true, 5); len(resp) != 0 || len(v.rcq[0].wcs) != 0 || v.e.Stats().RxWrongVLAN.Load() != 1 {
		t.Fatalf("VLAN 5 taken: %d answers, %d completions", len(resp), len(v.rcq[0].wcs))
	}
	if resp := send(500, true, 3<<13); len(resp) != 1 || len(v.rcq[0].wcs) != 1 {
		t.Fatalf("priority-tagged frame: %d answers, %d completions", len(resp), len(v.rcq[0].wcs))
	}
	if resp := send(501, false, 0); len(resp) != 1 || len(v.rcq[0].wcs) != 2 {
		t.Fatalf("untagged frame: %d answers, %d completions", len(resp), len(v.rcq[0].wcs))
	}
}

// A SEND whose receive buffer is deregistered in the middle of the message
// completes the receive with LOC_PROT_ERR, NAKs and writes nothing more.
func TestSendIntoDeregisteredBuffer(t *testing.T) {
	v := newVictim(t)
	mtu := bytes.Repeat([]byte{0xEE}, 1024)
	if resp := v.input(rcFrame(t, bth.RCSendFirst, 500, bth.RETHFields{}, mtu)); len(resp) != 0 {
		t.Fatal("SEND_FIRST answered")
	}
	local := v.mem.regions[localKey]
	local.dereg()
	resp := v.input(rcFrame(t, bth.RCSendLast, 501, bth.RETHFields{}, mtu[:10]))
	wantNak(t, resp, bth.NakRemoteOpError, 501)
	if !local.untouched() || len(v.rcq[0].wcs) == 0 || v.rcq[0].wcs[0].Status != WCLocProtErr {
		t.Fatalf("receive completions %+v", v.rcq[0].wcs)
	}
}

// requesterVictim adds to a victim an RC requester QP (0x210) in RTS
// whose local memory is the victim's local region.
func requesterVictim(t *testing.T) (*victim, *region, *QP, *testCQ) {
	v := newVictim(t)
	scq := &testCQ{}
	q, err := v.e.CreateQP(Config{Type: RC, QPN: 0x210, SendCQ: scq, RecvCQ: &testCQ{}, Mem: v.mem})
	if err != nil {
		t.Fatal(err)
	}
	walkAttrs(t, q, RC)
	return v, v.mem.regions[localKey], q, scq
}

// The requester resolves its SGL for every packet: a region deregistered
// while a SEND is half sent fails the request with LOC_PROT_ERR, and no
// byte of it is sent after Dereg.
func TestRequesterAfterLocalDereg(t *testing.T) {
	v, local, q, scq := requesterVictim(t)
	if err := q.PostSend(&SendWR{ID: 7, Opcode: WRSend, SGL: sge(localBase, 4096), Flags: SendSignaled}); err != nil {
		t.Fatal(err)
	}
	v.out.limited, v.out.budget = true, 1
	v.e.Poll(0)
	if len(v.out.sent) != 1 {
		t.Fatalf("%d packets sent with one buffer", len(v.out.sent))
	}
	local.dereg()
	v.out.limited = false
	v.out.sent = v.out.sent[:0]
	v.e.Poll(0)
	for _, b := range v.out.sent {
		var f bth.Frame
		if f.Decode(b) == nil && f.BTH.DestQP() != q.attr.DestQPN {
			continue
		}
		t.Fatalf("sent %v after its memory was deregistered", f.Opcode())
	}
	if len(scq.wcs) != 1 || scq.wcs[0].ID != 7 || scq.wcs[0].Status != WCLocProtErr || q.State() != StateErr {
		t.Fatalf("completions %+v, QP in %v", scq.wcs, q.State())
	}
}

// A READ's response is not placed into a local buffer deregistered while
// the READ was outstanding: the request fails with LOC_PROT_ERR.
func TestReadResponseIntoDeregisteredBuffer(t *testing.T) {
	v, local, q, scq := requesterVictim(t)
	if err := q.PostSend(&SendWR{ID: 9, Opcode: WRRDMARead, SGL: sge(localBase, 16), RemoteAddr: 0x1000, RKey: 5}); err != nil {
		t.Fatal(err)
	}
	v.e.Poll(0)
	local.dereg()
	psn := q.sqAt(q.sqHead).firstPSN
	v.input(forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCReadResponseOnly, DestQP: 0x210, PSN: psn},
		AETH: bth.AETHFields{Syndrome: bth.SyndromeACKNoCredits}}, bytes.Repeat([]byte{1}, 16)))
	if !local.untouched() || len(scq.wcs) != 1 || scq.wcs[0].Status != WCLocProtErr {
		t.Fatalf("completions %+v", scq.wcs)
	}
}

// A duplicate WRITE followed by a duplicate READ (the requester lost our
// ACK and the READ's response, and went back): the WRITE is acknowledged
// up to its own PSN, not over the READ, whose response is then replayed.
// An ACK covering the READ before its response tells the requester the
// READ is done; rxe then completed it without data.
func TestDuplicateAckStopsBeforeRead(t *testing.T) {
	v := newVictim(t)
	write := rcFrame(t, bth.RCWriteOnly, 500, bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 8}, []byte("12345678"))
	read := rcFrame(t, bth.RCReadRequest, 501, bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 64}, nil)
	if resp := v.input(write, read); len(resp) == 0 || resp[len(resp)-1].Opcode() != bth.RCReadResponseOnly {
		t.Fatalf("WRITE and READ: %d answers", len(resp))
	}
	resp := v.input(write, read)
	if len(resp) != 2 || resp[0].Opcode() != bth.RCAck || resp[0].BTH.PSN() != 500 ||
		resp[1].Opcode() != bth.RCReadResponseOnly || resp[1].BTH.PSN() != 501 {
		var got []string
		for _, f := range resp {
			got = append(got, fmt.Sprintf("%v PSN %d", f.Opcode(), f.BTH.PSN()))
		}
		t.Fatalf("duplicate WRITE and READ answered with %v, want an ACK for 500, then the READ response at 501", got)
	}
}
