package qp

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestSRQ: two RC QPs on one side share an SRQ; the other side sends
// multi-packet messages on both, interleaved, over a lossy wire. Every
// message lands whole in one SRQ buffer, each buffer is used once, and
// completions name the right QP.
func TestSRQ(t *testing.T) {
	for seed := range uint64(simSeeds(4, 12)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 13))
			n := newSimNet(t, seed, faultsFor(rng))
			srq := n.ends[1].e.CreateSRQ(64, 2)
			rcq := &testCQ{}
			la := n.ends[0].mem.add(localKey, localBase, 1<<20, AccessLocalWrite)
			lb := n.ends[1].mem.add(localKey, localBase, 1<<22, AccessLocalWrite)
			var senders [2]*QP
			for k := range 2 {
				a, b, _ := connectWith(t, n, RC, [2]uint32{uint32(0x100 + 2*k), uint32(0x101 + 2*k)}, rng.Uint32N(1<<24), rng.Uint32N(1<<24),
					MTU256, nil, [2]*SRQ{nil, srq}, []*testCQ{nil, rcq})
				senders[k] = a
				if err := b.PostRecv(&RecvWR{}); err == nil {
					t.Fatal("PostRecv on a QP with an SRQ succeeded")
				}
			}
			const msgs, slot = 40, 4096
			for i := range msgs * slot {
				la.buf[i] = byte(rng.Uint32())
			}
			sizes := make([]int, 2*msgs)
			for i := range sizes {
				sizes[i] = rng.IntN(slot)
				wr := SendWR{ID: uint64(i), Opcode: WRSendWithImm, Imm: uint32(i), Flags: SendSignaled, SGL: sge(localBase+uint64(i%msgs*slot), uint32(sizes[i]))}
				if err := senders[i%2].PostSend(&wr); err != nil {
					t.Fatal(err)
				}
			}
			posted := 0
			for n.now < 30*time.Second && len(rcq.wcs) < 2*msgs {
				for srq.Len() < 3 && posted < 2*msgs {
					addr := localBase + uint64(posted*slot)
					if err := srq.PostRecv(&RecvWR{ID: uint64(posted), SGL: []SGE{{Addr: addr, Length: 100, LKey: localKey}, {Addr: addr + 100, Length: slot - 100, LKey: localKey}}}); err != nil {
						t.Fatal(err)
					}
					posted++
				}
				if !n.step() {
					break
				}
			}
			if len(rcq.wcs) != 2*msgs {
				t.Fatalf("%d receive completions, want %d", len(rcq.wcs), 2*msgs)
			}
			used := map[uint64]bool{}
			next := [2]int{0, 1}
			for _, wc := range rcq.wcs {
				i := int(wc.Imm)
				k := i % 2
				if wc.Status != WCSuccess || used[wc.ID] || wc.QPN != uint32(0x101+2*k) || i != next[k] || wc.ByteLen != uint32(sizes[i]) {
					t.Fatalf("completion %+v (message %d, want %d on QP %#x)", wc, i, next[k], 0x101+2*k)
				}
				next[k] += 2
				used[wc.ID] = true
				got := lb.buf[wc.ID*slot : wc.ID*slot+uint64(sizes[i])]
				if !bytes.Equal(got, la.buf[i%msgs*slot:i%msgs*slot+sizes[i]]) {
					t.Fatalf("message %d in buffer %d is not byte-exact", i, wc.ID)
				}
			}
		})
	}
}

// An SRQ cannot be destroyed while a QP uses it; once its QPs are gone it
// can, its requests are dropped, and it refuses new requests and QPs.
func TestSRQDestroy(t *testing.T) {
	n := newSimNet(t, 1, faults{})
	srq := n.ends[1].e.CreateSRQ(8, 1)
	if err := srq.PostRecv(&RecvWR{ID: 1, SGL: []SGE{{Addr: localBase, Length: 10, LKey: localKey}}}); err != nil {
		t.Fatal(err)
	}
	_, b, _ := connectWith(t, n, RC, [2]uint32{0x100, 0x101}, 1, 2, MTU256, nil, [2]*SRQ{nil, srq}, []*testCQ{nil, &testCQ{}})
	if err := srq.Destroy(); !errors.Is(err, ErrInUse) {
		t.Fatalf("Destroy with a QP on it = %v, want ErrInUse", err)
	}
	b.Destroy()
	b.Destroy() // idempotent: counts the QP once
	if err := srq.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if err := srq.Destroy(); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
	if srq.Len() != 0 {
		t.Errorf("Len() = %d after Destroy", srq.Len())
	}
	if err := srq.PostRecv(&RecvWR{ID: 2}); !errors.Is(err, ErrDestroyed) {
		t.Errorf("PostRecv after Destroy = %v, want ErrDestroyed", err)
	}
	cq := &testCQ{}
	if _, err := n.ends[1].e.CreateQP(Config{Type: RC, QPN: 0x200, SendCQ: cq, RecvCQ: cq, Mem: n.ends[1].mem, SRQ: srq}); !errors.Is(err, ErrDestroyed) {
		t.Errorf("CreateQP on a destroyed SRQ = %v, want ErrDestroyed", err)
	}
}
