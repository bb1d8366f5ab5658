package stream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// rsEnd is one side of a simulated rsocket connection: its state and the
// memory the peer writes (ring, target SGL) at made-up addresses.
type rsEnd struct {
	s                *rsState
	ring, stage, tgt []byte
	tgtAddr          uint64
	out              []rsWire // posted, not yet delivered (RC: in order)
	sent, got        []byte   // the byte stream written and read
	recvs            int      // receive completions taken
}

// rsWire is a posted message on the way.
type rsWire struct {
	msg     uint32
	payload []byte // copied at post time; the staging stays claimed until completion
	addr    uint64
	key     uint32
	imm     bool
}

const (
	simRingKey = 0x1111
	simTgtKey  = 0x2222
)

func newRSEnd(ring uint32, base uint64, big bool) *rsEnd {
	e := &rsEnd{ring: make([]byte, ring), stage: make([]byte, ring+rsCtrlCredits*rsSGESize),
		tgt: make([]byte, rsSGLSize*rsSGESize), tgtAddr: base + 1<<30}
	e.s = newRSState(ring, ring, base, simRingKey, big)
	return e
}

// connectRS exchanges connect data through its wire format.
func connectRS(t *testing.T, a, b *rsEnd) {
	t.Helper()
	var wa, wb [rsConnDataSize]byte
	da, db := a.s.connData(a.tgtAddr, simTgtKey), b.s.connData(b.tgtAddr, simTgtKey)
	da.put(wa[:])
	db.put(wb[:])
	pa, err := parseRSConnData(wa[:])
	if err != nil {
		t.Fatal(err)
	}
	pb, err := parseRSConnData(wb[:])
	if err != nil {
		t.Fatal(err)
	}
	a.s.connect(pb)
	b.s.connect(pa)
}

func (e *rsEnd) credits() {
	for e.s.wantCredits() {
		c := e.s.credits(e.stage[e.s.stageSize:])
		w := rsWire{msg: c.msg, imm: true}
		if c.payload {
			off := int(e.s.stageSize) + c.slot*rsSGESize
			w.payload = bytes.Clone(e.stage[off : off+rsSGESize])
			w.addr, w.key = c.addr, c.key
		}
		e.out = append(e.out, w)
	}
}

// write posts as much of p as the protocol allows and returns how much.
func (e *rsEnd) write(p []byte) int {
	done := 0
	for done < len(p) && e.s.writable && e.s.canSend() {
		d := e.s.nextData(min(len(p)-done, rsMaxXfer))
		n := int(d.n1 + d.n2)
		copy(e.stage[d.off:d.off+d.n1], p[done:])
		copy(e.stage[:d.n2], p[done+int(d.n1):])
		pl := append(bytes.Clone(e.stage[d.off:d.off+d.n1]), e.stage[:d.n2]...)
		e.out = append(e.out, rsWire{msg: d.imm, payload: pl, addr: d.addr, key: d.key, imm: true})
		e.sent = append(e.sent, p[done:done+n]...)
		done += n
	}
	return done
}

// deliver takes e's oldest message to peer: the payload lands where the
// RETH says (checked against peer's memory), the peer gets the receive
// completion and e the send completion.
func (e *rsEnd) deliver(t *testing.T, peer *rsEnd) {
	t.Helper()
	w := e.out[0]
	e.out = e.out[1:]
	if len(w.payload) > 0 {
		var mem []byte
		var base uint64
		switch w.key {
		case simRingKey:
			mem, base = peer.ring, peer.s.ringAddr
		case simTgtKey:
			mem, base = peer.tgt, peer.tgtAddr
		default:
			t.Fatalf("write with unknown key %#x", w.key)
		}
		if w.addr < base || w.addr-base+uint64(len(w.payload)) > uint64(len(mem)) {
			t.Fatalf("write of %d bytes at %#x outside [%#x, +%d)", len(w.payload), w.addr, base, len(mem))
		}
		copy(mem[w.addr-base:], w.payload)
	}
	if w.imm {
		peer.recvs++
		if err := peer.s.recv(w.msg, true, uint32(len(w.payload)), peer.tgt); err != nil {
			t.Fatal(err)
		}
	}
	e.s.sendDone(w.msg, true)
}

func (e *rsEnd) read(n int) int {
	buf := make([]byte, n)
	k := e.s.read(buf, e.ring)
	e.got = append(e.got, buf[:k]...)
	return k
}

// TestRSStateTransfer: two rsocket states moving random amounts both ways
// at once, with random read sizes and message delivery orders, deliver
// each stream intact, never write outside the peer's ring, wrap the ring
// many times, and keep every flow-control invariant; with both byte
// orders of the peer's SGL updates.
func TestRSStateTransfer(t *testing.T) {
	for _, tc := range []struct {
		ring   uint32
		aBig   bool
		bBig   bool
		total  int
		seed   uint64
		maxMsg int
	}{
		{8 << 10, false, false, 1 << 20, 1, 70000},
		{8 << 10, false, true, 1 << 20, 2, 5000},
		{64 << 10, true, true, 4 << 20, 3, 300000},
		{1 << 20, true, false, 8 << 20, 4, 1 << 20},
	} {
		t.Run(fmt.Sprintf("ring%d-%v-%v", tc.ring, tc.aBig, tc.bBig), func(t *testing.T) {
			r := rand.New(rand.NewPCG(tc.seed, 7))
			a, b := newRSEnd(tc.ring, 0x10000, tc.aBig), newRSEnd(tc.ring, 0x7f0000000000, tc.bBig)
			connectRS(t, a, b)
			src := make([]byte, tc.total)
			for i := range src {
				src[i] = byte(r.IntN(256))
			}
			aOff, bOff := 0, 0
			for steps := 0; len(a.got) < tc.total || len(b.got) < tc.total; steps++ {
				if steps > 10_000_000 {
					t.Fatalf("no progress: a read %d, b read %d", len(a.got), len(b.got))
				}
				switch r.IntN(6) {
				case 0:
					if aOff < tc.total {
						aOff += a.write(src[aOff:min(tc.total, aOff+1+r.IntN(tc.maxMsg))])
					}
				case 1:
					if bOff < tc.total {
						bOff += b.write(src[bOff:min(tc.total, bOff+1+r.IntN(tc.maxMsg))])
					}
				case 2:
					if len(a.out) > 0 {
						a.deliver(t, b)
					}
				case 3:
					if len(b.out) > 0 {
						b.deliver(t, a)
					}
				case 4:
					a.read(1 + r.IntN(100000))
					a.credits()
				case 5:
					b.read(1 + r.IntN(100000))
					b.credits()
				}
				for _, e := range []*rsEnd{a, b} {
					if e.s.stageAvail > e.s.stageSize || e.s.sqeAvail < 0 || e.s.ctrlSeq-e.s.ctrlMax > 0 && e.s.ctrlMax-e.s.ctrlSeq > rsCtrlCredits {
						t.Fatalf("invariant broken: %+v", e.s)
					}
				}
			}
			if !bytes.Equal(b.got, a.sent) || !bytes.Equal(a.got, b.sent) {
				t.Fatal("streams differ")
			}
			if a.recvs < tc.total/int(tc.ring) {
				t.Fatalf("only %d messages", a.recvs)
			}
		})
	}
}

// TestRSStateShutdown: a shutdown of the writing side reaches the peer
// after the data before it (the peer reads it, then sees its reading side
// closed) and leaves the other direction open; a DISCONNECT after it ends
// the connection; sends all complete.
func TestRSStateShutdown(t *testing.T) {
	a, b := newRSEnd(8<<10, 0x1000, false), newRSEnd(8<<10, 0x9000, false)
	connectRS(t, a, b)
	drain := func() {
		for len(a.out) > 0 || len(b.out) > 0 {
			if len(a.out) > 0 {
				a.deliver(t, b)
			}
			if len(b.out) > 0 {
				b.deliver(t, a)
			}
		}
	}
	a.write([]byte("hello"))
	ctrl, due := a.s.shutdown(false)
	if !due || ctrl != rsCtrlShutdown {
		t.Fatalf("shutdown(WR) with the reading side open: %d %v", ctrl, due)
	}
	a.out = append(a.out, rsWire{msg: a.s.takeCtrl(ctrl).msg, imm: true})
	drain()
	if !b.s.haveData() || b.s.readable != false || !b.s.writable {
		t.Fatalf("b after a's SHUTDOWN: data %v readable %v writable %v", b.s.haveData(), b.s.readable, b.s.writable)
	}
	if b.read(100); string(b.got) != "hello" {
		t.Fatalf("b read %q", b.got)
	}
	b.write([]byte("world"))
	drain()
	if a.read(100); string(a.got) != "world" || !a.s.allSendsDone() {
		t.Fatalf("a read %q, sends done %v", a.got, a.s.allSendsDone())
	}
	ctrl, due = b.s.shutdown(false)
	if !due || ctrl != rsCtrlDisconnect {
		t.Fatalf("b's shutdown(WR) with reading closed: %d %v", ctrl, due)
	}
	b.out = append(b.out, rsWire{msg: b.s.takeCtrl(ctrl).msg, imm: true})
	drain()
	if a.s.connected || b.s.connected || !a.s.allSendsDone() || !b.s.allSendsDone() {
		t.Fatalf("after DISCONNECT: a %v b %v", a.s.connected, b.s.connected)
	}
	if a.s.canSend() && a.s.writable {
		t.Fatal("a may still write")
	}
}

// TestRSStatePeerViolations: what a hostile or broken peer sends is
// refused with errRSProtocol, not trusted.
// TestRSStateCrossedShutdowns: the peer's SHUTDOWN arriving after our own
// DISCONNECT leaves the rsocket disconnected, but our DATA and DISCONNECT
// are still unacknowledged: the sends are not done until they complete
// (interop: a lost DATA resent after the crossing was dropped when Close
// took the disconnection for the end of its sends).
func TestRSStateCrossedShutdowns(t *testing.T) {
	a, b := newRSEnd(1<<12, 0x10000, false), newRSEnd(1<<12, 0x20000, false)
	connectRS(t, a, b)
	a.credits()
	b.credits()
	for len(a.out) > 0 {
		a.deliver(t, b)
	}
	for len(b.out) > 0 {
		b.deliver(t, a)
	}
	if a.write([]byte("response")) != 8 {
		t.Fatal("a could not write")
	}
	ctrl, due := b.s.shutdown(false)
	if !due || ctrl != rsCtrlShutdown {
		t.Fatalf("b's shutdown(WR): %d %v", ctrl, due)
	}
	b.out = append(b.out, rsWire{msg: b.s.takeCtrl(ctrl).msg, imm: true})
	if ctrl, due = a.s.shutdown(true); !due || ctrl != rsCtrlDisconnect {
		t.Fatalf("a's close: %d %v", ctrl, due)
	}
	a.out = append(a.out, rsWire{msg: a.s.takeCtrl(ctrl).msg, imm: true})
	b.deliver(t, a)
	if a.s.connected {
		t.Fatal("a still connected after the peer's SHUTDOWN crossed its DISCONNECT")
	}
	if a.s.allSendsDone() {
		t.Fatal("a's sends done with its DATA and DISCONNECT unacknowledged")
	}
	for len(a.out) > 0 {
		a.deliver(t, b)
	}
	if !a.s.allSendsDone() {
		t.Fatal("a's sends not done once all completed")
	}
	if b.read(100); string(b.got) != "response" {
		t.Fatalf("b read %q", b.got)
	}
}

func TestRSStatePeerViolations(t *testing.T) {
	a, b := newRSEnd(8<<10, 0x1000, false), newRSEnd(8<<10, 0x9000, false)
	connectRS(t, a, b)
	for _, tc := range []struct {
		name   string
		imm    uint32
		hasImm bool
		n      uint32
	}{
		{"no immediate", 0, false, 10},
		{"length mismatch", rsMsg(rsOpData, 10), true, 11},
		{"reserved op", rsMsg(1, 10), true, 10},
		{"SGL of 8 bytes", rsMsg(rsOpSGL, 10), true, 8},
	} {
		if err := b.s.recv(tc.imm, tc.hasImm, tc.n, b.tgt); !errors.Is(err, errRSProtocol) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// More DATA than the receive queue holds.
	var err error
	for i := 0; i <= rsQueueSize && err == nil; i++ {
		err = b.s.recv(rsMsg(rsOpData, 1), true, 1, b.tgt)
	}
	if !errors.Is(err, errRSProtocol) {
		t.Fatalf("overflowing the message queue: %v", err)
	}
}

// TestRSConnData: the connect data's layout (struct rs_conn_data) and what
// parsing refuses.
func TestRSConnData(t *testing.T) {
	s := newRSState(1<<20, 1<<20, 0x1122334455667788, 0xaabbccdd, false)
	var b [rsConnDataSize]byte
	d := s.connData(0x0102030405060708, 0x11223344)
	d.put(b[:])
	want := []byte{1, rsFlagIOMap, 0x01, 0x80, 0, 0, 0, 0,
		1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 2,
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0x08, 0, 0}
	if !bytes.Equal(b[:], want) {
		t.Fatalf("connect data\n got %x\nwant %x", b, want)
	}
	bad := func(f func(b []byte)) error {
		c := b
		f(c[:])
		_, err := parseRSConnData(c[:])
		return err
	}
	for name, f := range map[string]func([]byte){
		"version 2":   func(b []byte) { b[0] = 2 },
		"no credits":  func(b []byte) { b[2], b[3] = 0, 0 },
		"no entries":  func(b []byte) { binary.BigEndian.PutUint32(b[20:], 0) },
		"huge SGL":    func(b []byte) { binary.BigEndian.PutUint32(b[20:], 1<<20) },
		"empty ring":  func(b []byte) { binary.BigEndian.PutUint32(b[36:], 0) },
		"xroce hello": func(b []byte) { copy(b, "XRS1") },
	} {
		if err := bad(f); !errors.Is(err, ErrNotRsocket) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := parseRSConnData(b[:39]); !errors.Is(err, ErrNotRsocket) {
		t.Errorf("short: %v", err)
	}
}
