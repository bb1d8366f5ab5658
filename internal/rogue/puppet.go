package rogue

import (
	"fmt"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/conform"
)

// Puppet is the attacker as package conform drives it: a conform.Wire on
// the Peer's link, on real time since the Puppet was made. Where the Peer
// keeps only the victim's answers to its QP, the Puppet hands conform
// every RoCE v2 frame that comes from the victim's address (answers to
// any QP, the victim's own requests), each with its arrival time, so that
// a check can also see what it must not draw.
type Puppet struct {
	*Peer
	epoch time.Time
	bufs  [][]byte
	f     bth.Frame
}

// NewPuppet makes p a puppet; its clock starts now.
func NewPuppet(p *Peer) *Puppet {
	return &Puppet{Peer: p, epoch: time.Now(), bufs: make([][]byte, 64)}
}

// Now returns the time since the puppet was made.
func (p *Puppet) Now() time.Duration { return time.Since(p.epoch) }

// Send transmits frames in order.
func (p *Puppet) Send(frames [][]byte) error { return p.Peer.Send(frames...) }

// Receive waits until the deadline (on the puppet's clock) for frames
// from the victim, and returns those that came, each a copy.
func (p *Puppet) Receive(deadline time.Duration) ([]conform.Frame, error) {
	var got []conform.Frame
	for range 1 << 16 { // each round waits, or takes frames
		left := deadline - p.Now()
		if left <= 0 || len(got) > 0 {
			break
		}
		n, err := p.Link.Receive(p.bufs, left)
		if err != nil {
			return got, fmt.Errorf("rogue: receive: %w", err)
		}
		at := p.Now()
		for _, b := range p.bufs[:n] {
			if p.f.Decode(b) != nil || p.f.SrcIP().Unmap() != p.VictimIP.Unmap() {
				continue
			}
			got = append(got, conform.Frame{At: at, Data: append([]byte(nil), b...)})
		}
		p.Link.Release(p.bufs[:n])
	}
	return got, nil
}
