package bpf

import (
	"fmt"
	"math"
)

// counterValues is one CPU's struct counters (the counters map's value).
type counterValues struct {
	Redirected    uint64
	InjectedDrops uint64
	MarkedCE      uint64
}

// thresholdValues is struct thresholds, the loss map's value.
type thresholdValues struct {
	Loss, Mark uint32
}

// lossThreshold turns a loss probability in [0, 1] into the program's
// threshold: a frame is dropped when bpf_get_prandom_u32() < threshold,
// always when the threshold is lossAlways.
func lossThreshold(p float64) uint32 {
	if p >= 1 {
		return lossAlways
	}
	t := math.Round(p * (1 << 32))
	if t >= lossAlways {
		return lossAlways - 1 // lossAlways would mean 1
	}
	return uint32(t)
}

// lossProbability is the inverse of lossThreshold.
func lossProbability(t uint32) float64 {
	if t == lossAlways {
		return 1
	}
	return float64(t) / (1 << 32)
}

// SetLoss makes the program drop each RoCE v2 frame it would redirect with
// probability p, independently at random (bpf_get_prandom_u32), before the
// redirect; 0 turns loss injection off (the default), 1 drops every RoCE
// frame. Frames that are not RoCE are never dropped. p is kept to a
// resolution of 2⁻³²; Loss returns the value in effect. It takes effect for
// the next frame on every CPU and works whether or not the program is
// attached.
func (p *Program) SetLoss(prob float64) error {
	return p.setThreshold("set loss", prob, &p.threshold)
}

// setThreshold sets the threshold th (p.threshold or p.mark) for
// probability prob, in the map and in p.
func (p *Program) setThreshold(what string, prob float64, th *uint32) error {
	if !(prob >= 0 && prob <= 1) { // also catches NaN
		return fmt.Errorf("%s: probability %v not in [0, 1]", what, prob)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("%s: %w", what, ErrClosed)
	}
	v := thresholdValues{Loss: p.threshold, Mark: p.mark}
	if th == &p.threshold {
		v.Loss = lossThreshold(prob)
	} else {
		v.Mark = lossThreshold(prob)
	}
	if err := p.loss.Put(uint32(0), v); err != nil {
		return fmt.Errorf("%s: %w", what, classify(err))
	}
	p.threshold, p.mark = v.Loss, v.Mark
	return nil
}

// SetMarkCE makes the program mark CE (ECN congestion experienced, RFC
// 3168) each ECN-capable RoCE v2 frame it redirects with probability prob,
// as a congested switch would, fixing the IPv4 header checksum; frames
// that are Not-ECT or already CE are left alone, and so is everything that
// is not RoCE. 0 turns marking off (the default), 1 marks every frame.
// Loss is decided first: a dropped frame is not marked. The ICRC does not
// cover the TOS byte, so a marked frame stays valid.
func (p *Program) SetMarkCE(prob float64) error {
	return p.setThreshold("set mark", prob, &p.mark)
}

// MarkCE returns the marking probability in effect, as SetMarkCE last set
// it (rounded to 2⁻³²).
func (p *Program) MarkCE() float64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return lossProbability(p.mark)
}

// Loss returns the loss probability in effect, as SetLoss last set it
// (rounded to 2⁻³²); 0 when no loss is injected.
func (p *Program) Loss() float64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return lossProbability(p.threshold)
}

// Counters reads the program's counters, summed over CPUs. They start at 0
// when the program is loaded and only grow.
func (p *Program) Counters() (Counters, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return Counters{}, fmt.Errorf("read counters: %w", ErrClosed)
	}
	var perCPU []counterValues
	if err := p.counters.Lookup(uint32(0), &perCPU); err != nil {
		return Counters{}, fmt.Errorf("read counters: %w", classify(err))
	}
	var c Counters
	for _, v := range perCPU {
		c.Redirected += v.Redirected
		c.InjectedDrops += v.InjectedDrops
		c.MarkedCE += v.MarkedCE
	}
	return c, nil
}
