package roce

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/internal/rogue"
	"github.com/xroce/xroce/link"
)

// The adversarial suite: a raw-frame attacker (internal/rogue) against a
// live device, over link.Pipe here and over a veth pair in
// attack_linux_test.go. Each case gets a fresh QP connected to the
// attacker's claimed QP and asserts on the wire (the NAK syndromes), on the
// QP's state and on memory (a deregistered buffer is filled with a canary
// that must neither change nor be sent).

const (
	attackPSN = 1000 // the PSN the victim expects first from the attacker
	victimPSN = 5000 // the victim's first PSN
	canary    = 0x5A
)

// arena is one case's victim: a QP in RTS towards the attacker, with a
// registered buffer, and the attacker aimed at it.
type arena struct {
	t    *testing.T
	d    *Device
	pd   *PD
	qp   *QP
	cq   *CQ
	buf  []byte
	mr   *MR
	peer *rogue.Peer
}

// attackSetup makes a victim QP on d, connected to peer's claimed QP.
func attackSetup(t *testing.T, d *Device, peer *rogue.Peer, opts ConnectOptions) *arena {
	t.Helper()
	a := &arena{t: t, d: d, peer: peer}
	s := newSide(t, d, RC, 8192, nil, nil)
	a.pd, a.qp, a.cq, a.buf, a.mr = s.pd, s.qp, s.cq, s.buf, s.mr
	for i := range a.buf {
		a.buf[i] = byte(i*7 + 1) // never the canary: canary bytes on the wire mean disclosure
		if a.buf[i] == canary {
			a.buf[i] = 0x11
		}
	}
	opts.Timeout = -1 // the victim must not time out while a case runs
	local, err := a.qp.LocalEndpoint(victimPSN, opts)
	if err != nil {
		t.Fatal(err)
	}
	remote := Endpoint{QPN: peer.QPN, PSN: attackPSN, GID: peer.IP, MTU: MTU1024}
	if err := a.qp.Connect(context.Background(), local, remote, opts); err != nil {
		t.Fatal(err)
	}
	peer.VictimQPN = a.qp.QPN()
	t.Cleanup(func() { a.qp.Destroy() })
	return a
}

func (a *arena) send(op bth.Opcode, psn uint32, ff bth.FrameFields, payload []byte) {
	a.t.Helper()
	ff.BTH.Opcode, ff.BTH.PSN = op, bth.PSN(psn)
	if err := a.peer.Send(a.peer.Build(ff, payload)); err != nil {
		a.t.Fatal(err)
	}
}

// nak waits for the victim's NAK with syndrome syn for psn.
func (a *arena) nak(syn bth.Syndrome, psn uint32) {
	a.t.Helper()
	got := a.peer.Receive(1, 5*time.Second)
	if len(got) != 1 || got[0].Opcode() != bth.RCAck || got[0].AETH.Syndrome() != syn || got[0].BTH.PSN() != bth.PSN(psn) {
		a.t.Fatalf("answer %v, want NAK %v for PSN %d", got, syn, psn)
	}
	a.noCanary(got)
}

// quiet checks that the victim sends the attacker nothing for a while.
func (a *arena) quiet() {
	a.t.Helper()
	if got, ok := a.peer.Quiet(300 * time.Millisecond); !ok {
		a.t.Fatalf("answered a packet that should be dropped: %v", got)
	}
}

func (a *arena) noCanary(got []rogue.Answer) {
	a.t.Helper()
	for _, f := range got {
		if bytes.IndexByte(f.Payload, canary) >= 0 {
			a.t.Fatalf("%v carries bytes of deregistered memory", f)
		}
	}
}

func (a *arena) state(want QPState) {
	a.t.Helper()
	deadline := time.Now().Add(eventually)
	for a.qp.State() != want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := a.qp.State(); st != want {
		a.t.Fatalf("victim QP in %v, want %v", st, want)
	}
}

// dereg deregisters the buffer and fills it with the canary, which is safe
// only because no worker touches it once Dereg has returned.
func (a *arena) dereg() {
	a.t.Helper()
	if err := a.mr.Dereg(); err != nil {
		a.t.Fatal(err)
	}
	for i := range a.buf {
		a.buf[i] = canary
	}
}

func (a *arena) untouched() {
	a.t.Helper()
	if n := bytes.Count(a.buf, []byte{canary}); n != len(a.buf) {
		a.t.Fatalf("%d bytes of the deregistered buffer changed", len(a.buf)-n)
	}
}

// waitBytes waits until the region holds want at offset off (a WRITE the
// victim acknowledges no other way).
func (a *arena) waitBytes(off int, want []byte) {
	a.t.Helper()
	got := make([]byte, len(want))
	deadline := time.Now().Add(eventually)
	for {
		if _, err := a.mr.ReadAt(got, int64(off)); err != nil {
			a.t.Fatal(err)
		}
		if bytes.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatal("the WRITE never landed")
		}
		time.Sleep(time.Millisecond)
	}
}

func reth(va uint64, key, n uint32) bth.FrameFields {
	return bth.FrameFields{RETH: bth.RETHFields{VA: va, RKey: key, DMALen: n}}
}

// attackCases are the cases every transport runs.
var attackCases = []struct {
	name string
	opts ConnectOptions
	run  func(a *arena)
}{
	{"write after dereg", ConnectOptions{}, func(a *arena) {
		mtu := bytes.Repeat([]byte{0xEE}, 1024)
		a.send(bth.RCWriteFirst, attackPSN, reth(a.mr.Addr(), a.mr.RKey(), 3072), mtu)
		a.waitBytes(0, mtu)
		a.dereg()
		a.send(bth.RCWriteMiddle, attackPSN+1, bth.FrameFields{}, mtu)
		a.nak(bth.NakRemoteAccessError, attackPSN+1)
		a.send(bth.RCWriteLast, attackPSN+2, bth.FrameFields{BTH: bth.BTHFields{AckReq: true}}, mtu)
		a.quiet()
		a.untouched()
		a.state(StateErr)
	}},
	{"stale key after re-registration", ConnectOptions{}, func(a *arena) {
		old := a.mr.RKey()
		if err := a.mr.Dereg(); err != nil {
			a.t.Fatal(err)
		}
		m, err := a.pd.RegMR(a.buf, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
		if err != nil {
			a.t.Fatal(err)
		}
		if m.RKey() == old {
			a.t.Fatalf("re-registration gave the old key %#x again", old)
		}
		before := append([]byte(nil), a.buf...)
		a.send(bth.RCWriteOnly, attackPSN, bth.FrameFields{BTH: bth.BTHFields{AckReq: true}, RETH: bth.RETHFields{VA: m.Addr(), RKey: old, DMALen: 16}},
			bytes.Repeat([]byte{0xEE}, 16))
		a.nak(bth.NakRemoteAccessError, attackPSN)
		m.Sync()
		if !bytes.Equal(a.buf, before) {
			a.t.Fatal("a WRITE with the stale key changed the region")
		}
		m.Dereg()
	}},
	{"duplicate READ after dereg", ConnectOptions{}, func(a *arena) {
		a.send(bth.RCReadRequest, attackPSN, reth(a.mr.Addr(), a.mr.RKey(), 64), nil)
		got := a.peer.Receive(1, 5*time.Second)
		if len(got) != 1 || got[0].Opcode() != bth.RCReadResponseOnly || !bytes.Equal(got[0].Payload, a.buf[:64]) {
			a.t.Fatalf("READ answered %v", got)
		}
		a.dereg()
		a.send(bth.RCReadRequest, attackPSN, reth(a.mr.Addr(), a.mr.RKey(), 64), nil)
		a.nak(bth.NakRemoteAccessError, attackPSN)
		a.state(StateErr)
	}},
	{"duplicate READ with another key", ConnectOptions{}, func(a *arena) {
		other := make([]byte, 4096)
		m, err := a.pd.RegMR(other, AccessRemoteRead)
		if err != nil {
			a.t.Fatal(err)
		}
		defer m.Dereg()
		a.send(bth.RCReadRequest, attackPSN, reth(a.mr.Addr(), a.mr.RKey(), 64), nil)
		if got := a.peer.Receive(1, 5*time.Second); len(got) != 1 {
			a.t.Fatalf("READ answered %v", got)
		}
		a.send(bth.RCReadRequest, attackPSN, reth(m.Addr(), m.RKey(), 64), nil)
		a.send(bth.RCReadRequest, attackPSN, reth(a.mr.Addr(), a.mr.RKey(), 4096), nil)
		a.quiet()
		a.state(StateRTS)
	}},
	{"READ at a PSN never executed", ConnectOptions{}, func(a *arena) {
		for _, psn := range []uint32{attackPSN - 1, attackPSN - 500, attackPSN - 1<<22 + 1<<24} {
			a.send(bth.RCReadRequest, psn&bth.PSNMask, reth(a.mr.Addr(), a.mr.RKey(), 8192), nil)
		}
		a.quiet()
		a.state(StateRTS)
		if s := a.qp.Stats(); s.Duplicates != 3 || s.RxInvalid != 3 {
			a.t.Fatalf("%d duplicates, %d dropped; want 3 and 3", s.Duplicates, s.RxInvalid)
		}
	}},
	{"max_dest_rd_atomic 0", ConnectOptions{}, func(a *arena) {
		for _, s := range []struct {
			at   Attr
			mask AttrMask
		}{{Attr{State: StateSQD}, 0}, {Attr{State: StateSQD}, AttrMaxDestRdAtomic}, {Attr{State: StateRTS}, 0}} {
			if err := a.qp.Modify(&s.at, AttrState|s.mask); err != nil {
				a.t.Fatal(err)
			}
		}
		a.send(bth.RCReadRequest, attackPSN, reth(a.mr.Addr(), a.mr.RKey(), 64), nil)
		a.nak(bth.NakInvalidRequest, attackPSN)
		a.state(StateErr)
	}},
	{"other VLAN", ConnectOptions{}, func(a *arena) {
		if err := a.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{a.mr.SGE(0, 64)}}); err != nil {
			a.t.Fatal(err)
		}
		before := a.d.Stats().RxWrongVLAN
		a.send(bth.RCSendOnly, attackPSN, bth.FrameFields{VLAN: true, VLANTCI: 7, BTH: bth.BTHFields{AckReq: true}}, []byte("other vlan"))
		a.quiet()
		if n := a.d.Stats().RxWrongVLAN - before; n != 1 {
			a.t.Fatalf("RxWrongVLAN grew by %d", n)
		}
		a.send(bth.RCSendOnly, attackPSN, bth.FrameFields{VLAN: true, VLANTCI: 3 << 13, BTH: bth.BTHFields{AckReq: true}}, []byte("priority tag"))
		if got := a.peer.Receive(1, 5*time.Second); len(got) != 1 || !got[0].AETH.Syndrome().IsACK() {
			a.t.Fatalf("priority-tagged SEND answered %v", got)
		}
		want(a.t, a.cq, WCRecv, WCSuccess)
	}},
	{"forged key", ConnectOptions{}, func(a *arena) {
		a.send(bth.RCWriteOnly, attackPSN, reth(a.mr.Addr(), a.mr.RKey()^0x100, 16), make([]byte, 16))
		a.nak(bth.NakRemoteAccessError, attackPSN)
		a.state(StateErr)
	}},
	{"bounds", ConnectOptions{}, func(a *arena) {
		a.send(bth.RCReadRequest, attackPSN, reth(a.mr.Addr()+8000, a.mr.RKey(), 193), nil)
		a.nak(bth.NakRemoteAccessError, attackPSN)
	}},
	{"QP without remote write", ConnectOptions{Access: AccessRemoteRead | AccessLocalWrite}, func(a *arena) {
		a.send(bth.RCWriteOnly, attackPSN, reth(a.mr.Addr(), a.mr.RKey(), 8), make([]byte, 8))
		a.nak(bth.NakRemoteAccessError, attackPSN)
	}},
	{"misaligned atomic", ConnectOptions{}, func(a *arena) {
		a.send(bth.RCFetchAdd, attackPSN, bth.FrameFields{AtomicETH: bth.AtomicETHFields{VA: a.mr.Addr() + 4, RKey: a.mr.RKey(), SwapAdd: 1}}, nil)
		a.nak(bth.NakInvalidRequest, attackPSN)
	}},
	{"PSN gap NAKed once", ConnectOptions{}, func(a *arena) {
		for range 5 {
			a.send(bth.RCWriteOnly, attackPSN+7, reth(a.mr.Addr(), a.mr.RKey(), 8), make([]byte, 8))
		}
		a.nak(bth.NakPSNSeqError, attackPSN)
		a.quiet()
		a.state(StateRTS)
	}},
	{"malformed flood", ConnectOptions{}, func(a *arena) {
		r := rand.New(rand.NewPCG(1, 2))
		good := a.peer.Build(bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCWriteOnly, PSN: attackPSN, AckReq: true},
			RETH: bth.RETHFields{VA: a.mr.Addr(), RKey: a.mr.RKey(), DMALen: 32}}, make([]byte, 32))
		before := a.d.Stats()
		var frames [][]byte
		for i := range 2000 {
			// Truncated anywhere past the Ethernet header, or with a
			// byte past it changed (a bad ICRC or a bad header).
			f := append([]byte(nil), good[:14+r.IntN(len(good)-14)]...)
			if i%2 == 1 {
				f = append([]byte(nil), good...)
				f[14+r.IntN(len(f)-14)] ^= byte(1 + r.IntN(255))
			}
			frames = append(frames, f)
		}
		if err := a.peer.Send(frames...); err != nil {
			a.t.Fatal(err)
		}
		// A frame changed only in its Ethernet addresses is still the good
		// WRITE (the ICRC does not cover them): ACKs are all it may draw.
		for _, f := range a.peer.Receive(1<<20, 300*time.Millisecond) {
			if f.Opcode() != bth.RCAck || !f.AETH.Syndrome().IsACK() {
				a.t.Fatalf("the flood drew %v", f)
			}
		}
		after := a.d.Stats()
		if after.RxMalformed+after.RxBadICRC == before.RxMalformed+before.RxBadICRC {
			a.t.Fatal("no malformed or bad-ICRC frame counted")
		}
		a.t.Logf("flood of 2000: %d malformed, %d bad ICRC counted (the rest were still good frames, or never reached the socket)",
			after.RxMalformed-before.RxMalformed, after.RxBadICRC-before.RxBadICRC)
		// The victim still serves its peer.
		if err := a.peer.Send(good); err != nil {
			a.t.Fatal(err)
		}
		if got := a.peer.Receive(1, 5*time.Second); len(got) != 1 || !got[0].AETH.Syndrome().IsACK() {
			a.t.Fatalf("a good WRITE after the flood answered %v", got)
		}
		a.state(StateRTS)
	}},
	{"forged responses to the victim's requests", ConnectOptions{}, func(a *arena) {
		if err := a.qp.PostSend(&SendWR{ID: 9, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 77}); err != nil {
			a.t.Fatal(err)
		}
		got := a.peer.Receive(1, 5*time.Second)
		if len(got) != 1 || got[0].Opcode() != bth.RCReadRequest {
			a.t.Fatalf("victim sent %v", got)
		}
		psn := uint32(got[0].BTH.PSN())
		// An ACK and a response for PSNs never sent are dropped.
		a.send(bth.RCAck, psn+100, bth.FrameFields{AETH: bth.AETHFields{Syndrome: bth.NakRemoteAccessError}}, nil)
		a.send(bth.RCReadResponseOnly, psn+1, bth.FrameFields{AETH: bth.AETHFields{Syndrome: bth.SyndromeACKNoCredits}}, make([]byte, 64))
		var wc [1]WC
		time.Sleep(100 * time.Millisecond)
		if a.cq.Poll(wc[:]) != 0 {
			a.t.Fatalf("completion %+v from a forged response", wc[0])
		}
		// A response of the wrong length fails the READ and writes nothing.
		before := append([]byte(nil), a.buf[:64]...)
		a.send(bth.RCReadResponseOnly, psn, bth.FrameFields{AETH: bth.AETHFields{Syndrome: bth.SyndromeACKNoCredits}}, make([]byte, 32))
		want(a.t, a.cq, WCRDMARead, WCBadRespErr)
		a.mr.Sync()
		if !bytes.Equal(a.buf[:64], before) {
			a.t.Fatal("a bad READ response was placed")
		}
	}},
}

// runAttacks runs every case against d, each on a new QP, with peer as
// the attacker (TestAttackVeth; TestAttackPipe gives each case a device).
func runAttacks(t *testing.T, d *Device, peer *rogue.Peer) {
	for _, c := range attackCases {
		t.Run(c.name, func(t *testing.T) {
			peer.Receive(1<<20, 10*time.Millisecond) // what an earlier case left
			c.run(attackSetup(t, d, peer, c.opts))
		})
	}
}

// TestAttackPipe runs the adversarial suite over link.Pipe, each case on
// a device and pipe of its own in a synctest bubble: the waits for what
// must not come (quiet, the forged responses) are on fake time.
func TestAttackPipe(t *testing.T) {
	for _, c := range attackCases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				la, lb := link.NewPipe(link.PipeConfig{Seed: 1, Buffers: 4096, MACA: macA, MACB: macB})
				d, err := NewDevice([]link.Link{la}, Config{Addrs: []netip.Addr{ipA}, Neighbors: map[netip.Addr]net.HardwareAddr{ipB: macB}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { d.Close(); lb.Close() })
				peer := &rogue.Peer{Link: lb, IP: ipB, QPN: 0x4242, VictimIP: ipA}
				copy(peer.MAC[:], macB)
				copy(peer.VictimMAC[:], macA)
				c.run(attackSetup(t, d, peer, c.opts))
			})
		})
	}
}
