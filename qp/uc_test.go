package qp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestSimUCLossy: over a lossy, reordering wire UC delivers a subsequence of
// the messages, each complete and byte-exact, in order; a message that lost
// a packet is dropped, never delivered in part or mixed with the next one.
func TestSimUCLossy(t *testing.T) {
	for seed := range uint64(simSeeds(6, 20)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			f := faultsFor(rng)
			n := newSimNet(t, seed, f)
			a, b, cqs := connect(t, n, UC, 1<<24-5, 77, MTU256, nil)
			la := n.ends[0].mem.add(localKey, localBase, 1<<20, AccessLocalWrite)
			lb := n.ends[1].mem.add(localKey, localBase, 1<<22, AccessLocalWrite)
			const msgs, size = 60, 1000 // 4 packets each
			for i := range msgs * size {
				la.buf[i] = byte(rng.Uint32())
			}
			for i := range msgs {
				if err := b.PostRecv(&RecvWR{ID: uint64(i), SGL: sge(localBase+uint64(i*size), size)}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range msgs {
				wr := SendWR{ID: uint64(i), Opcode: WRSendWithImm, Imm: uint32(i), Flags: SendSignaled, SGL: sge(localBase+uint64(i*size), size)}
				if err := a.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
			}
			for n.now < time.Second && n.step() {
			}
			if len(cqs[0].wcs) != msgs {
				t.Fatalf("%d send completions, want %d", len(cqs[0].wcs), msgs)
			}
			last := -1
			for k, wc := range cqs[3].wcs {
				i := int(wc.Imm)
				if wc.Status != WCSuccess || wc.ByteLen != size || i < last || wc.ID != uint64(k) {
					t.Fatalf("receive completion %d = %+v after message %d", k, wc, last)
				}
				last = i
				got := lb.buf[k*size : (k+1)*size]
				if !bytes.Equal(got, la.buf[i*size:(i+1)*size]) {
					t.Fatalf("message %d (in buffer %d) is not byte-exact", i, k)
				}
			}
			if f.loss == 0 && f.corrupt == 0 && len(cqs[3].wcs) != msgs {
				t.Fatalf("lossless wire delivered %d of %d", len(cqs[3].wcs), msgs)
			}
			t.Logf("delivered %d of %d (loss %.2f corrupt %.2f reorder %.2f)", len(cqs[3].wcs), msgs, f.loss, f.corrupt, f.reorder)
		})
	}
}
