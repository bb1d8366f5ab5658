package qp

import (
	"fmt"
	"time"

	"github.com/xroce/xroce/bth"
)

// RoCE v2 congestion control (IBTA Vol 1 Annex A17.9), as ConnectX NICs
// run it by default:
//
//   - ECN: every frame a QP sends is ECN-capable, ECT(0), unless its
//     traffic class sets other ECN bits or CCConfig.NoECT is set (rxe sends
//     the traffic class verbatim, Not-ECT by default). A congested switch
//     marks such frames CE instead of dropping them.
//   - Notification point: a CE-marked data frame (a request or a READ
//     response, never an ACK, NAK or CNP) that an RC or UC QP takes from
//     its peer makes the QP send a Congestion Notification Packet to the
//     peer's QP, at most one per CCConfig.CNPInterval (ConnectX's
//     min_time_between_cnps, 4 µs) per QP. The CNP (Annex A17.9.3) is BTH
//     opcode 0x81 with BECN set, DestQP the peer QP, P_Key 0xFFFF, PSN 0
//     and 16 reserved zero bytes, with DSCP CCConfig.CNPDSCP (ConnectX's
//     cnp_dscp, 48) and ECT(0), as ctcm (libconntrack-cm) sends them. Its
//     UDP source port is the QP's own (as its ACKs), so that ECMP keeps it
//     on the path of the QP's other answers; ConnectX's choice is not
//     public (ctcm uses a fixed 0xF000).
//   - Reaction point: a valid CNP for a QP (its DestQP is the QP, it comes
//     from the QP's peer, P_Key 0xFFFF or the QP's) goes to the QP's DCQCN
//     (dcqcn.go), whose rate the QP's pacer (pace.go) then sends at. CNPs
//     that fail these checks are counted in RxBadCNP and dropped.
//
// The QP's static rate limit (Config.RateLimit, SetRateLimit) caps the
// rate whether DCQCN limits it or not.

// CCConfig configures an engine's congestion control. The zero value is
// ConnectX's default behaviour: ECT(0), CNPs at most every 4 µs per QP
// with DSCP 48, DCQCN with ConnectX's parameters.
type CCConfig struct {
	// NoECT sends the ECN bits of each QP's traffic class verbatim
	// (Not-ECT when they are 0, as rxe); by default a traffic class whose
	// ECN bits are 0 is sent as ECT(0).
	NoECT bool
	// NoCNP never sends CNPs (the notification point is off); CE-marked
	// frames are still counted.
	NoCNP bool
	// NoDCQCN ignores the CNPs received (counted, but the rate stays):
	// the reaction point is off. Static rate limits still apply.
	NoDCQCN bool
	// CNPInterval is the least time between two CNPs of one QP; 0 means
	// DefaultCNPInterval, below 0 a CNP for every CE-marked frame (the
	// upstream mlx5 default of 0 µs).
	CNPInterval time.Duration
	// CNPDSCP is the DSCP of the CNPs (0..63); 0 means 48, below 0 means 0.
	CNPDSCP int
	// DCQCN holds the reaction point's parameters; nil means
	// DefaultDCQCN().
	DCQCN *DCQCNParams
}

// DefaultCNPInterval is ConnectX's default min_time_between_cnps.
const DefaultCNPInterval = 4 * time.Microsecond

// defaultCNPDSCP is ConnectX's default cnp_dscp.
const defaultCNPDSCP = 48

// DefaultLineRate is the line rate an engine assumes when
// EngineConfig.LineRate is 0: 100 Gb/s.
const DefaultLineRate = 100_000_000_000

// ccState is an engine's congestion-control settings, checked once.
type ccState struct {
	noECT, noCNP, noDCQCN bool
	cnpInterval           time.Duration
	cnpTOS                uint8
	dcqcn                 DCQCNParams
	lineRate              int64
	burst                 int
}

// tos returns the IPv4 TOS or IPv6 traffic class of a frame of traffic
// class tc: ECT(0) if its ECN bits are Not-ECT, unless NoECT.
func (c *ccState) tos(tc uint8) uint8 {
	if c.noECT || bth.ECNOf(tc) != bth.NotECT {
		return tc
	}
	return tc | uint8(bth.ECT0)
}

// neverCNP is the time of the last CNP of a QP that has sent none.
const neverCNP = -1 << 62

// onCE is the notification point: q received a CE-marked frame with opcode
// op. It counts it and, for a data frame of an RC or UC QP from its peer
// with the interval since the last CNP over, arms a CNP that the next Poll
// sends.
func (q *QP) onCE(f *bth.Frame, op bth.Opcode) {
	tr := bth.RC
	if q.typ == UC {
		tr = bth.UC
	}
	if q.typ == UD || op == bth.RCAck || op == bth.RCAtomicAck || q.state < StateRTR || q.state == StateErr ||
		!pkeyMatch(f.BTH.PKey(), q.attr.PKey) || op.Transport() != tr || !q.fromPeer(f) {
		return
	}
	e := q.e
	q.count(&e.stats.RxCE, &q.stats.RxCE)
	if e.cc.noCNP || q.cnpDue > 0 && e.cc.cnpInterval > 0 || e.now-q.lastCNP < e.cc.cnpInterval {
		return
	}
	q.cnpDue++
	q.lastCNP = e.now
}

// flushCNP sends the CNPs onCE armed: one, or with no interval one per
// CE-marked frame.
func (q *QP) flushCNP() {
	for q.cnpDue > 0 {
		buf := q.alloc()
		if buf == nil {
			return
		}
		q.cnpDue--
		ff := &q.ff
		tos := ff.TOS
		ff.TOS = q.e.cc.cnpTOS
		ff.BTH = bth.CNPFields(0xffff, q.attr.DestQPN)
		q.send(buf, ff, 0)
		ff.TOS = tos
		q.count(&q.e.stats.TxCNP, &q.stats.TxCNP)
	}
}

// onCNP takes a CNP: the reaction point of the QP it names, if valid.
func (e *Engine) onCNP(f *bth.Frame) bool {
	q := e.qps[f.BTH.DestQP()]
	if q == nil || q.typ == UD || q.state < StateRTR || q.state == StateErr || !q.fromPeer(f) ||
		f.BTH.PKey() != 0xffff && !pkeyMatch(f.BTH.PKey(), q.attr.PKey) {
		e.stats.RxBadCNP.Add(1)
		if q != nil {
			q.stats.RxBadCNP.Add(1)
			q.stats.RxDropped.Add(1)
		}
		return false
	}
	q.count(&e.stats.RxCNP, &q.stats.RxCNP)
	if e.cc.noDCQCN {
		return true
	}
	cuts := q.rp.Cuts()
	q.rp.OnCNP(e.now)
	q.noteRate(cuts)
	if q.typ == RC {
		q.narrowWindow()
	}
	return true
}

// newCCState checks the congestion-control settings of cfg and fills in
// their defaults.
func newCCState(cfg *EngineConfig) (ccState, error) {
	c := cfg.CC
	s := ccState{noECT: c.NoECT, noCNP: c.NoCNP, noDCQCN: c.NoDCQCN, lineRate: cfg.LineRate, burst: cfg.PaceBurst}
	switch {
	case c.CNPInterval == 0:
		s.cnpInterval = DefaultCNPInterval
	case c.CNPInterval > 0:
		s.cnpInterval = c.CNPInterval
	}
	dscp := c.CNPDSCP
	switch {
	case dscp == 0:
		dscp = defaultCNPDSCP
	case dscp < 0:
		dscp = 0
	case dscp > 63:
		return s, fmt.Errorf("CNP DSCP %d above 63: %w", c.CNPDSCP, ErrInvalidAttr)
	}
	s.cnpTOS = s.tos(uint8(dscp) << 2)
	if s.lineRate == 0 {
		s.lineRate = DefaultLineRate
	}
	if s.lineRate < 0 {
		return s, fmt.Errorf("line rate %d b/s: %w", cfg.LineRate, ErrInvalidAttr)
	}
	if s.burst == 0 {
		s.burst = DefaultPaceBurst
	}
	if s.burst < 0 || s.burst > maxPaceBurst {
		return s, fmt.Errorf("pace burst %d bytes: %w", cfg.PaceBurst, ErrInvalidAttr)
	}
	s.dcqcn = DefaultDCQCN()
	if c.DCQCN != nil {
		s.dcqcn = *c.DCQCN
	}
	if err := s.dcqcn.Validate(); err != nil {
		return s, err
	}
	return s, nil
}
