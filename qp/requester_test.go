package qp

import (
	"bytes"
	"testing"
	"time"

	"github.com/xroce/xroce/bth"
)

// lone is a requester QP whose packets go nowhere but a capture; tests
// answer with forged frames from the peer (ipA → ipB is reversed here: the
// QP lives at ipB, facing ipA).
func lone(t *testing.T, tune func(*Attr)) (*victim, *QP) {
	v := newVictim(t)
	q := v.good
	if tune != nil {
		// Timeout, retry counts and max_rd_atomic change in SQD only.
		a := q.Attr()
		tune(&a)
		for _, s := range []struct {
			st State
			m  AttrMask
		}{{StateSQD, 0}, {StateSQD, AttrMaxRdAtomic | AttrTimeout | AttrRetryCnt | AttrRNRRetry}, {StateRTS, 0}} {
			a.State = s.st
			if err := q.Modify(&a, AttrState|s.m); err != nil {
				t.Fatal(err)
			}
		}
	}
	return v, q
}

func (v *victim) poll(now time.Duration) []bth.Frame {
	v.out.sent = v.out.sent[:0]
	v.e.Poll(now)
	var got []bth.Frame
	for _, b := range v.out.sent {
		var f bth.Frame
		if err := f.Decode(b); err != nil {
			v.t.Fatal(err)
		}
		got = append(got, f)
	}
	return got
}

func ack(psn bth.PSN, syn bth.Syndrome) bth.FrameFields {
	return bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCAck, DestQP: 0x201, PSN: psn}, AETH: bth.AETHFields{Syndrome: syn}}
}

func TestAckReqEvery64AndWindow(t *testing.T) {
	v, q := lone(t, nil)
	const win = 128
	q.win = win // as after two cuts (window.go)
	// Two messages of 100 packets: AckReq on packets 64, 100 (the last of
	// the first message), then 164; the window of 128 unacknowledged PSNs
	// stops the requester after packet 128.
	if err := q.PostSend(&SendWR{Opcode: WRRDMAWrite, SGL: sge(localBase, 100<<10), RemoteAddr: 0, RKey: 1}); err != nil {
		t.Fatal(err)
	}
	if err := q.PostSend(&SendWR{Opcode: WRRDMAWrite, SGL: sge(localBase, 100<<10), RemoteAddr: 0, RKey: 1}); err != nil {
		t.Fatal(err)
	}
	got := v.poll(0)
	if len(got) != win {
		t.Fatalf("sent %d packets with nothing acknowledged, want %d", len(got), win)
	}
	for i, f := range got {
		want := i == 63 || i == 99 // after 64 packets, and the first message's last
		if f.BTH.AckReq() != want || f.BTH.PSN() != bth.PSN(9+i) {
			t.Fatalf("packet %d: PSN %d AckReq %v, want PSN %d AckReq %v", i, f.BTH.PSN(), f.BTH.AckReq(), 9+i, want)
		}
	}
	// ACK the first message: the other 72 packets go.
	got = v.input(forge(t, ack(9+99, bth.SyndromeACKNoCredits), nil))
	if len(got) != 72 || got[0].BTH.PSN() != 9+128 || got[71].BTH.PSN() != 9+199 {
		t.Fatalf("after ACK of 64: %d packets from PSN %d", len(got), got[0].BTH.PSN())
	}
	for i, f := range got {
		want := i == 35 || i == 71 // packet 164 (64 after packet 100) and the last one
		if f.BTH.AckReq() != want {
			t.Fatalf("packet %d: AckReq %v, want %v", 129+i, f.BTH.AckReq(), want)
		}
	}
}

func TestMaxRdAtomicAndFence(t *testing.T) {
	v, q := lone(t, func(a *Attr) { a.MaxRdAtomic = 2 })
	for i := range 4 {
		if err := q.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMARead, SGL: sge(localBase+uint64(i)*16, 16), RemoteAddr: 0x100, RKey: 3}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.PostSend(&SendWR{ID: 4, Opcode: WRSend, Flags: SendFence, SGL: sge(localBase, 4)}); err != nil {
		t.Fatal(err)
	}
	got := v.poll(0)
	if len(got) != 2 || got[0].Opcode() != bth.RCReadRequest || got[1].BTH.PSN() != 10 {
		t.Fatalf("sent %d packets, want 2 READ requests (max_rd_atomic 2)", len(got))
	}
	resp := func(psn bth.PSN) []byte {
		return forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCReadResponseOnly, DestQP: 0x201, PSN: psn}, AETH: bth.AETHFields{Syndrome: bth.SyndromeACKNoCredits}}, make([]byte, 16))
	}
	got = v.input(resp(9))
	if len(got) != 1 || got[0].BTH.PSN() != 11 {
		t.Fatalf("after one READ completed: %d packets", len(got))
	}
	got = v.input(resp(10), resp(11))
	if len(got) != 1 || got[0].Opcode() != bth.RCReadRequest || got[0].BTH.PSN() != 12 {
		t.Fatalf("fenced SEND went before the READs completed: %v", got)
	}
	got = v.input(resp(12))
	if len(got) != 1 || got[0].Opcode() != bth.RCSendOnly {
		t.Fatalf("fenced SEND not sent after the READs: %v", got)
	}
}

func TestTimeoutDeadline(t *testing.T) {
	v, q := lone(t, func(a *Attr) { a.Timeout = 10; a.RetryCnt = 1 })
	_ = q.PostSend(&SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: sge(localBase, 4)})
	v.out.sent = nil
	to := 4096 * time.Nanosecond << 10
	if d := v.e.Poll(100); d != 100+to {
		t.Fatalf("deadline %v, want %v", d, 100+to)
	}
	if got := v.poll(100 + to - 1); len(got) != 0 {
		t.Fatal("retransmitted early")
	}
	got := v.poll(100 + to)
	if len(got) != 1 || got[0].BTH.PSN() != 9 {
		t.Fatalf("timeout: %d packets, want the SEND again", len(got))
	}
	v.poll(100 + 2*to)
	wcs := q.sendCQ.(*testCQ).wcs
	if len(wcs) != 1 || wcs[0].Status != WCRetryExcErr || q.State() != StateErr {
		t.Fatalf("after retry_cnt 1 and two timeouts: %+v, %v", wcs, q.State())
	}
}

func TestSQDDrains(t *testing.T) {
	v, q := lone(t, nil)
	_ = q.PostSend(&SendWR{ID: 1, Opcode: WRSend, SGL: sge(localBase, 3000)})
	v.poll(0)
	if err := q.Modify(&Attr{State: StateSQD}, AttrState); err != nil {
		t.Fatal(err)
	}
	_ = q.PostSend(&SendWR{ID: 2, Opcode: WRSend, SGL: sge(localBase, 4)})
	if got := v.poll(0); len(got) != 0 {
		t.Fatalf("SQD started a new request: %v", got[0].Opcode())
	}
	v.input(forge(t, ack(11, bth.SyndromeACKNoCredits), nil))
	if err := q.Modify(&Attr{State: StateRTS}, AttrState); err != nil {
		t.Fatal(err)
	}
	if got := v.poll(0); len(got) != 1 || got[0].BTH.PSN() != 12 {
		t.Fatalf("back in RTS: %d packets", len(got))
	}
}

func TestSolicitedAndInvalidate(t *testing.T) {
	p := newPair(t, faults{delay: time.Microsecond}, nil)
	p.recv(1, 4096)
	p.post(SendWR{Opcode: WRSendWithInv, Flags: SendSignaled | SendSolicited, InvKey: remoteKey, SGL: sge(localBase, 2000)})
	var se []bool
	p.n.dropFn = func(from int, b []byte) bool {
		var f bth.Frame
		if from == 0 && f.Decode(b) == nil {
			se = append(se, f.BTH.SE())
		}
		return false
	}
	p.run(time.Second)
	p.want(WCSuccess)
	r := p.cqs[3].wcs
	if len(r) != 1 || r[0].Flags != WCWithInv || r[0].InvKey != remoteKey || r[0].ByteLen != 2000 {
		t.Fatalf("receive completion %+v, want WITH_INV of %#x", r, remoteKey)
	}
	if inv := p.n.ends[1].mem.invalid; len(inv) != 1 || inv[0] != remoteKey {
		t.Fatalf("invalidated %v", inv)
	}
	if len(se) != 2 || se[0] || !se[1] {
		t.Fatalf("SE bits %v, want only on the last packet", se)
	}
	if !r[0].Solicited {
		t.Fatal("receive completion of a solicited message not marked Solicited")
	}
}

func TestAckCoalescingAndDuplicates(t *testing.T) {
	v := newVictim(t)
	var frames [][]byte
	for i := range 4 {
		frames = append(frames, forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, DestQP: 0x200, PSN: bth.PSN(500 + i), AckReq: true}}, []byte("hi")))
	}
	resp := v.input(frames...)
	if len(resp) != 1 || resp[0].BTH.PSN() != 503 || resp[0].AETH.MSN() != 4 || resp[0].AETH.Syndrome() != bth.SyndromeACKNoCredits {
		t.Fatalf("4 requests in a batch: responses %v, want one ACK for PSN 503 MSN 4", resp)
	}
	// A duplicate is re-ACKed with the last PSN, and not delivered again.
	resp = v.input(frames[1])
	if len(resp) != 1 || resp[0].BTH.PSN() != 503 || len(v.rcq[0].wcs) != 4 {
		t.Fatalf("duplicate: responses %v, %d completions", resp, len(v.rcq[0].wcs))
	}
	// A gap: one NAK for the expected PSN, then silence.
	gap := func(psn bth.PSN) []byte {
		return forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, DestQP: 0x200, PSN: psn, AckReq: true}}, []byte("x"))
	}
	resp = v.input(gap(506), gap(507))
	resp = append(resp, v.input(gap(508))...)
	if len(resp) != 1 || resp[0].AETH.Syndrome() != bth.NakPSNSeqError || resp[0].BTH.PSN() != 504 {
		t.Fatalf("gap: responses %v, want one PSN sequence NAK for 504", resp)
	}
	// RNR NAK: no receive request left.
	resp = v.input(gap(504))
	if len(resp) != 1 || !resp[0].AETH.Syndrome().IsRNRNak() || resp[0].AETH.Syndrome().Value() != 3 || resp[0].BTH.PSN() != 504 {
		t.Fatalf("no receive posted: responses %v, want RNR NAK (timer 3) for 504", resp)
	}
}

// TestPollVisitsOnlyBusyQPs: with a thousand idle QPs, Poll visits only
// the QPs that have work or a due timer.
func TestPollVisitsOnlyBusyQPs(t *testing.T) {
	v := newVictim(t)
	for i := range 1000 {
		q, err := v.e.CreateQP(Config{Type: RC, QPN: uint32(0x1000 + i), SendCQ: &testCQ{}, RecvCQ: &testCQ{}, Mem: v.mem})
		if err != nil {
			t.Fatal(err)
		}
		walkAttrs(t, q, RC)
	}
	v.e.Poll(0)
	v.e.visits = 0
	if d := v.e.Poll(1); d != Never || v.e.visits != 0 {
		t.Fatalf("idle Poll visited %d QPs, deadline %v", v.e.visits, d)
	}
	_ = v.good.PostSend(&SendWR{Opcode: WRSend, SGL: sge(localBase, 8)})
	got := v.poll(2)
	if len(got) != 1 || v.e.visits != 1 {
		t.Fatalf("one SEND: %d frames, %d QPs visited", len(got), v.e.visits)
	}
	// Its retransmission timer brings it back, alone, when due.
	to := v.good.ackTimeout()
	v.e.visits = 0
	if d := v.e.Poll(3); d != 2+to || v.e.visits != 0 {
		t.Fatalf("deadline %v (want %v), %d visits", d, 2+to, v.e.visits)
	}
	if got := v.poll(2 + to); len(got) != 1 || v.e.visits != 1 {
		t.Fatalf("timeout: %d frames, %d visits", len(got), v.e.visits)
	}
}

func TestImplicitNakReadRetry(t *testing.T) {
	v, q := lone(t, nil)
	if err := q.PostSend(&SendWR{ID: 7, Opcode: WRRDMARead, Flags: SendSignaled, SGL: sge(localBase, 3000), RemoteAddr: 0x5000, RKey: 3}); err != nil {
		t.Fatal(err)
	}
	if got := v.poll(0); len(got) != 1 || got[0].RETH.DMALen() != 3000 {
		t.Fatalf("READ request: %v", got)
	}
	data := make([]byte, 3000)
	for i := range data {
		data[i] = byte(i * 13)
	}
	resp := func(op bth.Opcode, psn bth.PSN, p []byte) []byte {
		return forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: op, DestQP: 0x201, PSN: psn}, AETH: bth.AETHFields{Syndrome: bth.SyndromeACKNoCredits}}, p)
	}
	// The MIDDLE response (PSN 10) is lost: the LAST is an implicit NAK.
	got := v.input(resp(bth.RCReadResponseFirst, 9, data[:1024]), resp(bth.RCReadResponseLast, 11, data[2048:]))
	if len(got) != 1 || got[0].Opcode() != bth.RCReadRequest || got[0].BTH.PSN() != 10 ||
		got[0].RETH.VA() != 0x5000+1024 || got[0].RETH.DMALen() != 3000-1024 {
		t.Fatalf("after a skipped READ response: %d frames, want one READ request for PSN 10 at +1024", len(got))
	}
	v.input(resp(bth.RCReadResponseFirst, 10, data[1024:2048]), resp(bth.RCReadResponseLast, 11, data[2048:]))
	wcs := q.sendCQ.(*testCQ).wcs
	if len(wcs) != 1 || wcs[0].Status != WCSuccess || wcs[0].ByteLen != 3000 || wcs[0].ID != 7 {
		t.Fatalf("completions %+v", wcs)
	}
	if !bytes.Equal(v.mem.regions[localKey].buf[:3000], data) {
		t.Fatal("READ data not placed in order")
	}
}

// A READ response past the oldest READ, whose responses did not come, is
// an implied NAK: the requester asks for that READ again at once, from
// the PSN it lacks, without waiting for its ACK timeout.
func TestImpliedNakByLaterReadResponse(t *testing.T) {
	for _, c := range []struct {
		name string
		got  int // response packets of the first READ that arrived
	}{{"none of the first READ's", 0}, {"the first READ's first packet", 1}} {
		t.Run(c.name, func(t *testing.T) {
			v, q := lone(t, nil)
			for i := range 2 {
				if err := q.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled, SGL: sge(localBase+uint64(i)<<12, 3000),
					RemoteAddr: 0x10000 + uint64(i)<<12, RKey: 3}); err != nil {
					t.Fatal(err)
				}
			}
			if got := v.poll(0); len(got) != 2 || got[1].BTH.PSN() != 12 {
				t.Fatalf("sent %d packets, want READs at PSN 9 (3 responses) and 12", len(got))
			}
			resp := func(op bth.Opcode, psn bth.PSN, n int) []byte {
				return forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: op, DestQP: 0x201, PSN: psn},
					AETH: bth.AETHFields{Syndrome: bth.SyndromeACKNoCredits}}, make([]byte, n))
			}
			if c.got == 1 {
				if got := v.input(resp(bth.RCReadResponseFirst, 9, 1024)); len(got) != 0 {
					t.Fatalf("the first response packet drew %d packets", len(got))
				}
			}
			got := v.input(resp(bth.RCReadResponseOnly, 12, 1024))
			want := bth.PSN(9 + c.got)
			if len(got) == 0 || got[0].Opcode() != bth.RCReadRequest || got[0].BTH.PSN() != want ||
				got[0].RETH.VA() != 0x10000+uint64(c.got)*1024 || got[0].RETH.DMALen() != 3000-uint32(c.got)*1024 {
				t.Fatalf("a response past the first READ drew %d packets, want its READ again from PSN %d at once", len(got), want)
			}
			if q.Stats().Timeouts.Load() != 0 {
				t.Fatal("recovered by the timer")
			}
		})
	}
}
