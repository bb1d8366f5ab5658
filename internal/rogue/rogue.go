// Package rogue is a hostile RoCE v2 host for xroce's adversarial tests.
// It stands on a link.Link as any host on the segment could, forges
// whatever packet a test describes towards a victim QP (any opcode, PSN,
// R_Key, address, length, P_Key, VLAN tag; a good ICRC unless the test
// breaks it afterwards) and reads what the victim answers. It keeps no
// transport state: a test says every field, as an attacker who sniffed or
// guessed them would.
package rogue

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/link"
)

// Peer is the attacker's end of a link, and the addresses it claims.
type Peer struct {
	Link link.Link
	MAC  [6]byte
	IP   netip.Addr
	// QPN is the QP number the attacker claims: the victim QP's
	// destination QP, to which its answers are addressed.
	QPN uint32

	VictimMAC [6]byte
	VictimIP  netip.Addr
	VictimQPN uint32

	rx [][]byte
}

// Build returns a frame from p to the victim with the fields of ff; the
// addresses, DestQP (when 0) and P_Key (when 0) default to the victim's
// and 0xFFFF. The ICRC is computed.
func (p *Peer) Build(ff bth.FrameFields, payload []byte) []byte {
	ff.SrcMAC, ff.DstMAC = p.MAC, p.VictimMAC
	if !ff.SrcIP.IsValid() {
		ff.SrcIP = p.IP
	}
	if !ff.DstIP.IsValid() {
		ff.DstIP = p.VictimIP
	}
	if ff.TTL == 0 {
		ff.TTL = 64
	}
	if ff.SrcPort == 0 {
		ff.SrcPort = 0xC0DE
	}
	if ff.BTH.DestQP == 0 {
		ff.BTH.DestQP = p.VictimQPN
	}
	if ff.BTH.PKey == 0 {
		ff.BTH.PKey = 0xffff
	}
	buf := make([]byte, ff.FrameLen(len(payload)))
	n, err := bth.Build(buf, &ff, payload)
	if err != nil {
		panic(fmt.Sprintf("rogue: build %v: %v", ff.BTH.Opcode, err)) // a test's mistake
	}
	return buf[:n]
}

// Send transmits frames, each copied into a buffer of the link.
func (p *Peer) Send(frames ...[]byte) error {
	for len(frames) > 0 {
		bufs := make([][]byte, min(len(frames), 64))
		n := p.Link.Alloc(bufs)
		if n == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		for i := range n {
			bufs[i] = bufs[i][:copy(bufs[i], frames[i])]
		}
		if _, err := p.Link.Transmit(bufs[:n]); err != nil {
			return fmt.Errorf("rogue: transmit: %w", err)
		}
		frames = frames[n:]
	}
	return nil
}

// Answer is a frame the victim sent to the attacker's QP.
type Answer struct {
	Raw []byte
	bth.Frame
}

func (a Answer) String() string {
	s := a.Opcode().String() + " PSN " + fmt.Sprint(a.BTH.PSN())
	if a.AETH != nil {
		s += " " + a.AETH.Syndrome().String()
	}
	return s
}

// Receive collects the victim's RoCE frames to p.QPN until want of them
// arrived or d passed, and returns them (frames for other QPs and other
// traffic are skipped).
func (p *Peer) Receive(want int, d time.Duration) []Answer {
	if p.rx == nil {
		p.rx = make([][]byte, 64)
	}
	var got []Answer
	deadline := time.Now().Add(d)
	for len(got) < want {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		n, err := p.Link.Receive(p.rx, left)
		if err != nil {
			break
		}
		for _, b := range p.rx[:n] {
			var a Answer
			a.Raw = append([]byte(nil), b...)
			if a.Decode(a.Raw) != nil || !a.VerifyICRC() || a.BTH.DestQP() != p.QPN {
				continue
			}
			got = append(got, a)
		}
		p.Link.Release(p.rx[:n])
	}
	return got
}

// Quiet reports whether the victim sends the attacker nothing for d.
func (p *Peer) Quiet(d time.Duration) ([]Answer, bool) {
	got := p.Receive(1, d)
	return got, len(got) == 0
}
