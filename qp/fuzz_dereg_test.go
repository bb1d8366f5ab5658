package qp

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/xroce/xroce/bth"
)

// FuzzResponderDereg drives an RC responder with requests from the peer
// (WRITEs split over packets, READs, atomics, duplicates around the
// expected PSN) while the target region is deregistered and registered
// again, under a new key, between any two packets, and while the output
// runs dry and READ responses wait. While the region is deregistered its
// bytes must not change and must not leave in any response; memory
// outside the regions is never touched; nothing panics.
func FuzzResponderDereg(f *testing.F) {
	f.Add([]byte{2, 0, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1, 1, 0, 0, 0, 0, 0})
	f.Add([]byte{3, 4, 0, 0, 0, 16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 4, 2, 0, 0, 0, 0, 0, 0, 2, 4, 0xff, 0, 0, 16, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0, 8, 0, 0, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 2, 1, 0, 0, 0, 0, 0})
	f.Fuzz(runDeregFuzz)
}

func runDeregFuzz(t *testing.T, data []byte) {
	{
		ops := []bth.Opcode{bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLast, bth.RCWriteOnly, bth.RCReadRequest,
			bth.RCFetchAdd, bth.RCCompareSwap, bth.RCAtomicWrite, bth.RCWriteLastImm, bth.RCWriteOnlyImm}
		v := newVictim(t)
		rem := v.rem
		fillLive := func() {
			for i := range rem.buf {
				rem.buf[i] = byte(i%200) + 1
				if rem.buf[i] == canary {
					rem.buf[i] = 0x11 // never the canary
				}
			}
		}
		fillLive()
		key := uint32(remoteKey)
		dead := false
		v.out.limited = true
		psn := uint32(500)
		check := func() {
			for _, b := range v.out.sent {
				var fr bth.Frame
				if fr.Decode(b) != nil {
					t.Fatal("engine sent an undecodable frame")
				}
				if fr.Opcode().IsReadResponse() && bytes.IndexByte(fr.Payload, canary) >= 0 {
					t.Fatalf("%v PSN %d disclosed deregistered memory", fr.Opcode(), fr.BTH.PSN())
				}
			}
			v.out.sent = v.out.sent[:0]
			if dead && !rem.untouched() {
				t.Fatal("a deregistered region was written")
			}
			for _, r := range v.mem.regions {
				if !r.guardsIntact() {
					t.Fatalf("memory outside region %#x touched", r.key)
				}
			}
		}
		for now := int64(0); len(data) >= 8; now += 1000 {
			h := data[:8]
			data = data[8:]
			switch h[0] % 5 {
			case 0: // Dereg.
				if !dead {
					rem.dereg()
					dead = true
				}
			case 1: // Register the same memory again under a new key.
				if dead {
					delete(v.mem.regions, key)
					key += 0x100
					rem.key, rem.valid = key, true
					v.mem.regions[key] = rem
					fillLive()
					dead = false
				}
			case 2, 3: // A request near the expected PSN.
				op := ops[int(h[1])%len(ops)]
				p := bth.PSN(psn + uint32(int8(h[2])%4))
				rkey := key
				if h[3]&1 != 0 {
					rkey = remoteKey // the first key, stale once deregistered
				}
				va := remBase + uint64(h[4])*16
				n := uint32(binary.BigEndian.Uint16(h[5:])) % 5000
				size := 0
				switch {
				case op == bth.RCWriteFirst || op == bth.RCWriteMiddle:
					size = 1024
				case op == bth.RCAtomicWrite:
					size, n = 8, 8
				case op.IsWrite() && !op.IsFirst(): // LAST: 1..MTU
					size = 1 + int(n%1024)
				case op.IsWrite():
					size = int(n % 1025)
				}
				ff := bth.FrameFields{BTH: bth.BTHFields{Opcode: op, DestQP: 0x200, PSN: p, AckReq: h[7]&1 != 0},
					RETH: bth.RETHFields{VA: va, RKey: rkey, DMALen: n}, Imm: 1,
					AtomicETH: bth.AtomicETHFields{VA: va &^ 7, RKey: rkey, SwapAdd: 3, Compare: 0}}
				v.e.Input([][]byte{forge(t, ff, bytes.Repeat([]byte{0xEE}, size))}, 0)
				if p == bth.PSN(psn) {
					psn = uint32(v.bad.ePSN)
				}
			case 4: // Let some frames out.
				v.out.budget = int(h[1] % 4)
			}
			v.e.Poll(0)
			check()
		}
		v.out.limited = false
		v.e.Poll(0)
		check()
	}
}
