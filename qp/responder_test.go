package qp

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/xroce/xroce/bth"
)

// readReq forges an 8-byte READ of the remote region at offset off.
func readReq(t *testing.T, psn uint32, off uint64) []byte {
	return rcFrame(t, bth.RCReadRequest, psn, bth.RETHFields{VA: remBase + off, RKey: remoteKey, DMALen: 8}, nil)
}

// answers names frames for a test's message.
func answers(fs []bth.Frame) string {
	var b bytes.Buffer
	for i := range fs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%v PSN %d", fs[i].Opcode(), fs[i].BTH.PSN())
		if fs[i].AETH != nil && !fs[i].AETH.Syndrome().IsACK() {
			fmt.Fprintf(&b, " %v", fs[i].AETH.Syndrome())
		}
	}
	return b.String()
}

// wantReads checks that fs are 8-byte READ RESPONSE ONLYs for the PSNs
// from first, in order, each with the region's bytes at 8×(PSN−500).
func wantReads(t *testing.T, v *victim, fs []bth.Frame, first uint32, n int) {
	t.Helper()
	if len(fs) < n {
		t.Fatalf("answers %s, want %d READ responses from PSN %d", answers(fs), n, first)
	}
	for i := range n {
		f := &fs[i]
		psn := first + uint32(i)
		off := 8 * (psn - 500)
		if f.Opcode() != bth.RCReadResponseOnly || f.BTH.PSN() != bth.PSN(psn) || !bytes.Equal(f.Payload, v.rem.buf[off:off+8]) {
			t.Fatalf("answers %s: answer %d is not the READ RESPONSE ONLY of PSN %d", answers(fs), i, psn)
		}
	}
}

// The responder keeps max_dest_rd_atomic resources (IBTA Vol. 1 §9.7,
// responder resources). READs beyond them that arrive in one batch,
// before the earlier responses could be sent, exceed what the requester
// was granted: the earlier READs are answered, in order, and the first
// one beyond the limit draws NAK Invalid Request (the NAK's cause "too
// many RDMA READ or ATOMIC requests"), after those responses, and the QP
// goes to ERR. Before the fix the fifth READ overwrote the first one's
// resource, so the first was never answered and its retry was dropped.
func TestResponderResourcesOverrun(t *testing.T) {
	for _, extra := range []struct {
		name  string
		frame func(t *testing.T) []byte
	}{
		{"READ", func(t *testing.T) []byte { return readReq(t, 504, 32) }},
		{"FETCH_ADD", func(t *testing.T) []byte {
			return forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCFetchAdd, DestQP: 0x200, PSN: 504},
				AtomicETH: bth.AtomicETHFields{VA: remBase + 64, RKey: remoteKey, SwapAdd: 1}}, nil)
		}},
		{"ATOMIC_WRITE", func(t *testing.T) []byte {
			return rcFrame(t, bth.RCAtomicWrite, 504, bth.RETHFields{VA: remBase + 64, RKey: remoteKey, DMALen: 8}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
		}},
	} {
		t.Run(extra.name, func(t *testing.T) {
			v := newVictim(t)
			for i := range v.rem.buf {
				v.rem.buf[i] = byte(i)
			}
			before := append([]byte(nil), v.rem.buf...)
			var batch [][]byte
			for i := range 4 {
				batch = append(batch, readReq(t, 500+uint32(i), uint64(8*i)))
			}
			// The fifth request, and a good WRITE after it that must
			// not be taken while the QP winds down.
			batch = append(batch, extra.frame(t),
				rcFrame(t, bth.RCWriteOnly, 505, bth.RETHFields{VA: remBase + 128, RKey: remoteKey, DMALen: 8}, []byte("overrun!")))
			got := v.input(batch...)
			wantReads(t, v, got, 500, 4)
			wantNak(t, got[4:], bth.NakInvalidRequest, 504)
			if v.bad.State() != StateErr {
				t.Fatalf("QP in %v after the overrun, want ERR", v.bad.State())
			}
			if !bytes.Equal(v.rem.buf, before) {
				t.Fatal("the request beyond the limit, or the WRITE after it, changed the region")
			}
			if n := v.bad.Stats().InvReqNaksTx.Load(); n != 1 {
				t.Fatalf("%d invalid request NAKs counted, want 1", n)
			}
			v.checkGood()
		})
	}
}

// Responses already sent free their resource: a requester within its
// limit is answered without end, and the last max_dest_rd_atomic READs
// stay kept for duplicates while older ones are recycled.
func TestResponderResourcesRecycled(t *testing.T) {
	v := newVictim(t)
	copy(v.rem.buf, bytes.Repeat([]byte("0123456789abcdef"), 256))
	for i := range 12 {
		// Two at a time: within the limit of 4 however the batch falls.
		psn := 500 + uint32(2*i)
		wantReads(t, v, v.input(readReq(t, psn, uint64(8*2*i)), readReq(t, psn+1, uint64(8*(2*i+1)))), psn, 2)
	}
	if v.bad.State() != StateRTS {
		t.Fatalf("QP in %v", v.bad.State())
	}
	// PSNs 520..523 are kept: a duplicate is replayed. 519 is recycled:
	// dropped.
	wantReads(t, v, v.input(readReq(t, 521, 8*21)), 521, 1)
	if got := v.input(readReq(t, 519, 8*19)); len(got) != 0 {
		t.Fatalf("a duplicate of a recycled READ drew %s", answers(got))
	}
	// A replay under way does not hold its resource against a new
	// request: a requester within its limit has the original already.
	got := v.input(readReq(t, 520, 8*20), readReq(t, 524, 8*24))
	if len(got) != 1 {
		t.Fatalf("a replay of the oldest READ and a new one drew %s, want the new one's response", answers(got))
	}
	wantReads(t, v, got, 524, 1)
	if v.bad.State() != StateRTS {
		t.Fatalf("QP in %v", v.bad.State())
	}
}

// When Output runs dry the pending responses wait, and so does the NAK of
// an overrun: it follows them once buffers come back.
func TestResponderResourcesOverrunBlocked(t *testing.T) {
	v := newVictim(t)
	v.out.limited, v.out.budget = true, 2
	var batch [][]byte
	for i := range 5 {
		batch = append(batch, readReq(t, 500+uint32(i), uint64(8*i)))
	}
	got := v.input(batch...)
	wantReads(t, v, got, 500, 2)
	if len(got) != 2 || v.bad.State() != StateRTS {
		t.Fatalf("with 2 buffers: %s, QP in %v", answers(got), v.bad.State())
	}
	v.out.budget = 100
	v.out.sent = v.out.sent[:0]
	v.e.Poll(0)
	var rest []bth.Frame
	for _, b := range v.out.sent {
		var f bth.Frame
		if err := f.Decode(b); err != nil {
			t.Fatal(err)
		}
		rest = append(rest, f)
	}
	wantReads(t, v, rest, 502, 2)
	wantNak(t, rest[2:], bth.NakInvalidRequest, 504)
	if v.bad.State() != StateErr {
		t.Fatalf("QP in %v", v.bad.State())
	}
}
