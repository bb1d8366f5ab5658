//go:build linux

package xdp

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xroce/xroce/internal/netns"
)

// checkOwners verifies the socket's bookkeeping: every free list entry is
// unique and marked free, and the number of chunks, slots and linear buffers
// marked free equals the length of their free list.
func (s *Socket) checkOwners() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var counts [5]int
	for c := s.rxFirst; c < s.txFirst; c++ {
		counts[s.um.owner[c]]++
	}
	seen := map[uint64]bool{}
	for _, a := range s.rxFree {
		c := a >> s.shift
		if seen[a] || s.um.owner[c] != ownFree || a&(s.frameSize-1) != 0 {
			return fmt.Errorf("rx free list entry %#x: duplicate or owner %v", a, s.um.owner[c])
		}
		seen[a] = true
	}
	if counts[ownFree] != len(s.rxFree) {
		return fmt.Errorf("%d receive chunks marked free, %d on the free list", counts[ownFree], len(s.rxFree))
	}
	if counts[ownAlloc] != 0 {
		return fmt.Errorf("%d receive chunks marked alloc", counts[ownAlloc])
	}
	counts = [5]int{}
	for i := range uint32(len(s.txLeft)) {
		o := s.um.owner[s.slotChunk(i)]
		counts[o]++
		if (o == ownTx) != (s.txLeft[i] > 0) {
			return fmt.Errorf("slot %d owner %v with %d descriptors outstanding", i, o, s.txLeft[i])
		}
	}
	seenSlot := map[uint32]bool{}
	for _, i := range s.txFree {
		if seenSlot[i] || s.um.owner[s.slotChunk(i)] != ownFree {
			return fmt.Errorf("tx free list entry %d: duplicate or not free", i)
		}
		seenSlot[i] = true
	}
	if counts[ownFree] != len(s.txFree) || counts[ownFill]+counts[ownRx] != 0 {
		return fmt.Errorf("tx slot owners %v, %d on the free list", counts, len(s.txFree))
	}
	free := 0
	for _, o := range s.linOwner {
		if o == ownFree {
			free++
		}
	}
	if free != len(s.linFree) {
		return fmt.Errorf("%d linear buffers free, %d on the free list", free, len(s.linFree))
	}
	return nil
}

// TestOwnershipRandom drives a socket pair with a seeded random mix of
// Alloc, Transmit, Release, Receive, holding received buffers for a while,
// forwarding received buffers, and deliberate double releases, and checks
// that no buffer is ever handed out twice, every misuse is counted exactly,
// and the bookkeeping is consistent throughout and everything comes back.
func TestOwnershipRandom(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("mtu%d/seed%d", mtu, seed), func(t *testing.T) {
				ownershipRandom(t, mtu, seed)
			})
		}
	}
}

func ownershipRandom(t *testing.T, mtu int, seed uint64) {
	const txFrames = 64
	p, da, db := pairT(t, netns.Config{MTU: mtu}, Config{RingSize: 128, TxFrames: txFrames, RxFrames: 256, LinearBuffers: 32})
	a, b := da.Sockets()[0], db.Sockets()[0]
	rng := rand.New(rand.NewPCG(seed, 42))
	// out holds every buffer currently with us, by address and socket.
	type key struct {
		s    *Socket
		addr uintptr
	}
	out := map[key][]byte{}
	take := func(s *Socket, bufs [][]byte, what string) {
		for _, f := range bufs {
			k := key{s, bufAddr(f)}
			if _, dup := out[k]; dup {
				t.Fatalf("%s handed out %#x, which we already hold", what, k.addr)
			}
			out[k] = f
		}
	}
	give := func(s *Socket, f []byte) { delete(out, key{s, bufAddr(f)}) }
	var held [][]byte // received on b, not yet released
	var wantBad uint64
	seq := uint32(0)
	for step := range 3000 {
		switch op := rng.IntN(10); {
		case op < 4: // a sends a few frames
			bufs := make([][]byte, 1+rng.IntN(8))
			n := a.Alloc(bufs)
			take(a, bufs[:n], "Alloc")
			for i := range n {
				size := minFrame + rng.IntN(mtu+ethLen-minFrame+1)
				bufs[i] = buildFrame(bufs[i], p.A, p.B, roceUDPPort, seq, size)
				seq++
				give(a, bufs[i])
			}
			if _, err := a.Transmit(bufs[:n]); err != nil {
				t.Fatalf("step %d: Transmit: %v", step, err)
			}
		case op < 5: // a allocates and releases without sending
			bufs := make([][]byte, 1+rng.IntN(4))
			n := a.Alloc(bufs)
			take(a, bufs[:n], "Alloc")
			for _, f := range bufs[:n] {
				give(a, f)
			}
			a.Release(bufs[:n])
		case op < 7: // b receives and holds
			bufs := make([][]byte, 1+rng.IntN(16))
			n, err := b.Receive(bufs, time.Duration(rng.IntN(2))*time.Millisecond)
			if err != nil {
				t.Fatalf("step %d: Receive: %v", step, err)
			}
			take(b, bufs[:n], "Receive")
			held = append(held, bufs[:n]...)
		case op < 9 && len(held) > 0: // b releases some, in random order
			rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
			k := 1 + rng.IntN(len(held))
			for _, f := range held[:k] {
				give(b, f)
			}
			b.Release(held[:k])
			if rng.IntN(4) == 0 { // and once more: a double release
				b.Release(held[:1])
				wantBad++
			}
			held = held[k:]
		case len(held) > 0: // b forwards a held frame back to a in place
			f := held[len(held)-1]
			held = held[:len(held)-1]
			give(b, f)
			if len(f) > 4096-256 { // linear buffers are not in the UMEM
				b.Release([][]byte{f})
				continue
			}
			f = buildFrame(f, p.B, p.A, roceUDPPort, 1<<20, len(f))
			if n, err := b.Transmit([][]byte{f}); n != 1 || err != nil {
				t.Fatalf("step %d: forward: %d, %v", step, n, err)
			}
		}
		// a drains what b forwarded.
		rx := make([][]byte, 16)
		if n, _ := a.Receive(rx, 0); n > 0 {
			take(a, rx[:n], "Receive")
			for _, f := range rx[:n] {
				give(a, f)
			}
			a.Release(rx[:n])
		}
		if step%500 == 0 {
			for _, s := range []*Socket{a, b} {
				if err := s.checkOwners(); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
		}
	}
	for _, f := range held {
		give(b, f)
	}
	b.Release(held)
	if len(out) != 0 {
		t.Fatalf("%d buffers still out after releasing everything", len(out))
	}
	if got := b.Stats().Extra["bad_release"]; got != wantBad {
		t.Errorf("bad_release = %d, want %d", got, wantBad)
	}
	if got := a.Stats().Extra["bad_release"] + a.Stats().Extra["bad_desc"] + b.Stats().Extra["bad_desc"]; got != 0 {
		t.Errorf("unexpected bad_release/bad_desc counts: a %v b %v", a.Stats().Extra, b.Stats().Extra)
	}
	// Every transmit buffer comes back.
	bufs := make([][]byte, txFrames)
	n := 0
	for deadline := time.Now().Add(eventually); n < txFrames && time.Now().Before(deadline); {
		n += a.Alloc(bufs[n:])
	}
	if n != txFrames {
		t.Fatalf("%d of %d transmit buffers came back", n, txFrames)
	}
	a.Release(bufs)
	for _, s := range []*Socket{a, b} {
		if err := s.checkOwners(); err != nil {
			t.Fatal(err)
		}
	}
}
