//go:build linux

// Congestion control in perf: --mark-ce, which has the device's XDP program
// mark a fraction of the frames it receives CE as a congested switch would,
// and the line of congestion control counters a run prints at its end.

package perf

import (
	"flag"
	"fmt"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/nic"
)

// addCCFlags registers perf's congestion control flags on fs.
func (o *perfOptions) addCCFlags(fs *flag.FlagSet) {
	fs.Float64Var(&o.markCE, "mark-ce", 0, "mark this `fraction` (0..1) of the ECN-capable RoCE frames received CE in the XDP program, "+
		"as a congested switch would, so that this end sends CNPs (a test of congestion control; AF_XDP only)")
}

// checkCC validates the congestion control flags.
func (o *perfOptions) checkCC() error {
	if o.markCE < 0 || o.markCE > 1 {
		return base.Usagef("perf: --mark-ce %v: want a fraction from 0 to 1", o.markCE)
	}
	return nil
}

// markCE starts --mark-ce's marking on d's XDP program; it is d's: it
// stops with the device.
func (r *perfRun) markCE(d *nic.Device) error {
	if r.o.markCE == 0 {
		return nil
	}
	p := d.XDPProgram()
	if p == nil {
		return fmt.Errorf("perf: --mark-ce needs the AF_XDP datapath and xroce's XDP program on %s", d.Info().Name)
	}
	if err := p.SetMarkCE(r.o.markCE); err != nil {
		return fmt.Errorf("perf: --mark-ce: %w", err)
	}
	r.xdpProg = p
	return nil
}

// reportCCAfter prints the run's congestion control counters to stderr,
// as xroce stat names them, when there are any (or --mark-ce was given):
// CE-marked frames received, CNPs sent, received and dropped as invalid,
// DCQCN's rate cuts, the lowest rate any QP was paced at and each QP's
// rate at the end (bits/s, 0: not limited), and with --mark-ce the frames
// the XDP program marked.
func (r *perfRun) reportCCAfter() {
	s := r.dev.Stats()
	var now []uint64
	var low uint64 // nonzero once any QP was limited
	for _, p := range r.qps {
		st := p.qp.Stats()
		now = append(now, st.Rate)
		if st.RateLowest != 0 && (low == 0 || st.RateLowest < low) {
			low = st.RateLowest
		}
	}
	if s.RxCE == 0 && s.TxCNP == 0 && s.RxCNP == 0 && s.RxBadCNP == 0 && s.RateCuts == 0 && low == 0 && r.xdpProg == nil {
		return
	}
	line := fmt.Sprintf("perf: congestion control: rx_ce %d tx_cnp %d rx_cnp %d rx_bad_cnp %d rate_cuts %d rate_lowest %d rate_now %v",
		s.RxCE, s.TxCNP, s.RxCNP, s.RxBadCNP, s.RateCuts, low, now)
	if r.xdpProg != nil {
		marked := "?"
		if pc, err := r.xdpProg.Counters(); err == nil {
			marked = fmt.Sprint(pc.MarkedCE)
		}
		line += fmt.Sprintf(" xdp_marked_ce %s (--mark-ce %g)", marked, r.o.markCE)
	}
	fmt.Fprintln(r.e.Stderr, line)
}
