package roce

import (
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/xroce/xroce/qp"
)

// QPConfig describes a queue pair to create. The zero value of each field
// but Type and the CQs means the default.
type QPConfig struct {
	Type      QPType
	SendCQ    *CQ
	RecvCQ    *CQ
	SRQ       *SRQ // receive requests come from this shared queue
	MaxSendWR int  // send queue depth; 0 means 128
	MaxRecvWR int  // receive queue depth; 0 means 128
	MaxSGE    int  // scatter/gather entries per request; 0 means 4
	MaxInline int  // inline bytes per send request; 0 means none
	SignalAll bool // every send request completes (sq_sig_all)
	// GSI makes the QP the device's General Services Interface, QP 1 (a
	// UD QP with the well-known Q_Key qp.GSIQKey, IBTA Vol. 1 §13.5) that
	// carries management datagrams such as package cm's; one per device.
	GSI bool
	// RateLimit is the QP's maximum rate in bits/s of frames on the wire,
	// 0 for none; RateBurst the bytes its pacer lets go at once, 0 for
	// Config.PaceBurst (qp.Config.RateLimit). See SetRateLimit.
	RateLimit int64
	RateBurst int
}

// QP is a queue pair (ibv_qp). Its methods are safe for concurrent use;
// each call is handed to the QP's worker under the worker's lock.
type QP struct {
	pd  *PD
	w   *worker
	q   *qp.QP
	cfg QPConfig
	qpn uint32

	// Guarded by w.mu: whether the QP is gone, and its error events.
	destroyed bool
	fatal     bool   // an EventQPFatal was raised
	lastWQE   bool   // an EventQPLastWQEReached was raised
	cqLost    bool   // a completion of this QP was lost to a full CQ
	onReceive func() // NotifyReceive's, until the QP's first packet

	stats qpCounters
}

// qpCounters are a QP's completion counters, written by its worker.
type qpCounters struct {
	sendOK, sendErr, recvOK, recvErr, recvBytes atomic.Uint64
	lastErr                                     atomic.Uint32
}

// QPStats are a QP's counters: its completions, and the transport's
// packet counters for this QP alone (Device.Stats sums them over every QP,
// with what reaches no QP).
type QPStats struct {
	SendCompletions uint64   // successful send-queue completions
	SendErrors      uint64   // send-queue completions with an error (flushes included)
	RecvCompletions uint64   // successful receive completions
	RecvErrors      uint64   // receive completions with an error (flushes included)
	RecvBytes       uint64   // bytes of successful receive completions
	LastError       WCStatus // status of the latest failed completion, WCSuccess if none
	PacketStats
}

// PacketStats are a QP's packet counters (see qp.Stats). Frames and bytes
// are whole Ethernet frames, ICRC included.
type PacketStats struct {
	RxFrames, TxFrames    uint64
	RxBytes, TxBytes      uint64
	TxNoBuffer            uint64 // the link had no transmit buffer (the QP waits for one)
	Retransmits, Timeouts uint64 // go-back-N restarts; local ACK timeouts among their causes
	WindowCuts            uint64 // the requester's window halved for a loss (qp/window.go)
	RNRNaksRx, RNRNaksTx  uint64
	SeqNaksRx, SeqNaksTx  uint64 // PSN sequence error NAKs
	// Error NAKs by kind: invalid request, remote access error, remote
	// operational error.
	InvReqNaksRx, RemAccessNaksRx, RemOpNaksRx uint64
	InvReqNaksTx, RemAccessNaksTx, RemOpNaksTx uint64
	Duplicates                                 uint64 // duplicate requests answered (re-ACKed or replayed)
	ToError                                    uint64 // moves to ERR because of an error
	// Frames dropped (RxDropped) and why: wrong state, P_Key/Q_Key
	// mismatch, not from the peer, no receive request (RNR), refused
	// (bad sequence, length or access, stray response).
	RxDropped                                            uint64
	RxBadState, RxBadKey, RxNotPeer, RxNoRecv, RxInvalid uint64
	// RC requests after a PSN gap, discarded until the requester goes
	// back (not in RxDropped).
	RxOutOfSeq uint64
	// Congestion control: CE-marked data frames received, CNPs sent and
	// received, CNPs dropped as invalid, DCQCN rate cuts, and the rate the
	// QP is paced at in bits/s (0: not limited; as of its latest packet or
	// CNP) and the lowest it has been paced at (0: never limited).
	RxCE, TxCNP, RxCNP, RxBadCNP, RateCuts uint64
	Rate, RateLowest                       uint64
}

func packetStats(e *qp.Stats) PacketStats {
	return PacketStats{
		RxFrames: e.RxFrames.Load(), TxFrames: e.TxFrames.Load(),
		RxBytes: e.RxBytes.Load(), TxBytes: e.TxBytes.Load(), TxNoBuffer: e.TxNoBuffer.Load(),
		Retransmits: e.Retransmits.Load(), Timeouts: e.Timeouts.Load(), WindowCuts: e.WindowCuts.Load(),
		RNRNaksRx: e.RNRNaksRx.Load(), RNRNaksTx: e.RNRNaksTx.Load(),
		SeqNaksRx: e.SeqNaksRx.Load(), SeqNaksTx: e.SeqNaksTx.Load(),
		InvReqNaksRx: e.InvReqNaksRx.Load(), RemAccessNaksRx: e.RemAccessNaksRx.Load(), RemOpNaksRx: e.RemOpNaksRx.Load(),
		InvReqNaksTx: e.InvReqNaksTx.Load(), RemAccessNaksTx: e.RemAccessNaksTx.Load(), RemOpNaksTx: e.RemOpNaksTx.Load(),
		Duplicates: e.Duplicates.Load(), ToError: e.ToError.Load(),
		RxDropped: e.RxDropped.Load(), RxBadState: e.RxBadState.Load(), RxBadKey: e.RxBadKey.Load(),
		RxNotPeer: e.RxNotPeer.Load(), RxNoRecv: e.RxNoRecv.Load(), RxInvalid: e.RxInvalid.Load(),
		RxOutOfSeq: e.RxOutOfSeq.Load(),
		RxCE:       e.RxCE.Load(), TxCNP: e.TxCNP.Load(), RxCNP: e.RxCNP.Load(), RxBadCNP: e.RxBadCNP.Load(),
		RateCuts: e.RateCuts.Load(), Rate: e.Rate.Load(), RateLowest: e.RateLowest.Load(),
	}
}

// Stats returns the QP's counters; it may be called from any goroutine.
func (q *QP) Stats() QPStats {
	c := &q.stats
	return QPStats{
		SendCompletions: c.sendOK.Load(), SendErrors: c.sendErr.Load(),
		RecvCompletions: c.recvOK.Load(), RecvErrors: c.recvErr.Load(),
		RecvBytes: c.recvBytes.Load(), LastError: WCStatus(c.lastErr.Load()),
		PacketStats: packetStats(q.q.Stats()),
	}
}

// sendSink and recvSink are the engine's qp.CQ for one queue of one QP:
// they count the completion and forward it to the user's CQ.
type sendSink QP
type recvSink QP

// Complete implements qp.CQ (called by the worker with w.mu held).
func (s *sendSink) Complete(wc *qp.WC) {
	q := (*QP)(s)
	if wc.Status == qp.WCSuccess {
		q.stats.sendOK.Add(1)
	} else {
		q.stats.sendErr.Add(1)
		q.stats.lastErr.Store(uint32(wc.Status))
		q.w.dirty = append(q.w.dirty, q)
	}
	q.w.completed = true
	if !q.cfg.SendCQ.complete(wc) {
		q.lostCompletion()
	}
}

// Complete implements qp.CQ (called by the worker with w.mu held).
func (s *recvSink) Complete(wc *qp.WC) {
	q := (*QP)(s)
	if wc.Status != qp.WCSuccess {
		q.stats.recvErr.Add(1)
		q.stats.lastErr.Store(uint32(wc.Status))
		q.w.dirty = append(q.w.dirty, q)
	} else {
		q.stats.recvOK.Add(1)
		q.stats.recvBytes.Add(uint64(wc.ByteLen))
	}
	q.w.completed = true
	if !q.cfg.RecvCQ.complete(wc) {
		q.lostCompletion()
	}
}

// lostCompletion notes that a completion did not fit its CQ; after the
// batch, afterError moves the QP to ERR. w.mu is held.
func (q *QP) lostCompletion() {
	if !q.cqLost {
		q.cqLost = true
		q.w.dirty = append(q.w.dirty, q)
	}
}

// afterError runs after a batch in which q had an error completion or lost
// one to a full CQ: a lost completion moves the QP to ERR, and a QP in
// ERR raises EventQPFatal (and Last WQE Reached on an SRQ) once.
func (q *QP) afterError() {
	if q.destroyed {
		return
	}
	if q.cqLost {
		// CQ overrun: as in verbs, the QP goes to ERR, since its
		// completions can no longer be reported. Its flushed requests
		// complete on the same full CQ and are counted as lost too.
		q.cqLost = false
		if st := q.q.State(); st != qp.StateErr && st != qp.StateReset {
			q.q.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState)
		}
	}
	if q.q.State() == qp.StateErr {
		if !q.fatal {
			q.fatal = true
			q.w.d.event(Event{Type: EventQPFatal, QPN: q.qpn})
		}
		q.lastWQELocked()
	}
}

// lastWQELocked raises EventQPLastWQEReached once for a QP on an SRQ that
// entered ERR: it will take no more requests from the SRQ, and the one it
// was filling has been flushed (IBTA Vol 1 §10.3.1, Last WQE Reached);
// w.mu is held.
func (q *QP) lastWQELocked() {
	if q.cfg.SRQ == nil || q.lastWQE {
		return
	}
	q.lastWQE = true
	q.w.d.event(Event{Type: EventQPLastWQEReached, QPN: q.qpn})
}

// CreateQP creates a queue pair in the RESET state (ibv_create_qp). Its
// QP number decides its worker; QPs on an SRQ share the SRQ's worker.
func (pd *PD) CreateQP(cfg QPConfig) (*QP, error) {
	d := pd.d
	if cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, fmt.Errorf("create qp: needs a send and a receive CQ: %w", ErrInvalid)
	}
	if cfg.SendCQ.d != d || cfg.RecvCQ.d != d || cfg.SRQ != nil && cfg.SRQ.pd.d != d {
		return nil, fmt.Errorf("create qp: CQ or SRQ of another device: %w", ErrInvalid)
	}
	if cfg.GSI && (cfg.Type != UD || cfg.SRQ != nil) {
		return nil, fmt.Errorf("create qp: the GSI is a UD QP without SRQ: %w", ErrInvalid)
	}
	def := func(v, x int) int {
		if v <= 0 {
			return x
		}
		return v
	}
	cfg.MaxSendWR, cfg.MaxRecvWR, cfg.MaxSGE = def(cfg.MaxSendWR, 128), def(cfg.MaxRecvWR, 128), def(cfg.MaxSGE, 4)
	if cfg.MaxSendWR > 1<<16 || cfg.MaxRecvWR > 1<<16 || cfg.MaxSGE > 32 {
		return nil, fmt.Errorf("create qp: queue depths %d/%d or %d SGEs too large: %w", cfg.MaxSendWR, cfg.MaxRecvWR, cfg.MaxSGE, ErrInvalid)
	}

	// Pick the worker and a free QP number in its residue class.
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("create qp: %w", ErrClosed)
	}
	nw := uint32(len(d.workers))
	var w *worker
	switch {
	case cfg.SRQ != nil:
		w = cfg.SRQ.w
	case cfg.GSI:
		w = d.workers[qp.GSIQPN%nw]
	default:
		w = d.workers[d.rr%len(d.workers)]
		d.rr++
	}
	d.mu.Unlock()

	q := &QP{pd: pd, w: w, cfg: cfg}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop {
		return nil, fmt.Errorf("create qp: %w", ErrClosed)
	}
	if cfg.SRQ != nil && cfg.SRQ.dead {
		return nil, fmt.Errorf("create qp: SRQ: %w", ErrDestroyed)
	}
	qpn, sport := uint32(qp.GSIQPN), uint16(0)
	if !cfg.GSI {
		var err error
		if qpn, sport, err = d.allocQPN(w); err != nil {
			return nil, err
		}
	} else if w.qps[qpn] != nil {
		return nil, fmt.Errorf("create qp: the device has a GSI QP: %w", ErrBusy)
	}
	qcfg := qp.Config{
		Type: cfg.Type, QPN: qpn, SendCQ: (*sendSink)(q), RecvCQ: (*recvSink)(q), Mem: memory{pd},
		MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR, MaxSGE: cfg.MaxSGE,
		MaxInline: cfg.MaxInline, SignalAll: cfg.SignalAll, RateLimit: cfg.RateLimit, RateBurst: cfg.RateBurst,
		UDPSourcePort: sport,
	}
	if cfg.SRQ != nil {
		qcfg.SRQ = cfg.SRQ.s
	}
	eq, err := w.eng.CreateQP(qcfg)
	if err != nil {
		return nil, fmt.Errorf("create qp: %w", err)
	}
	q.q, q.qpn = eq, qpn
	w.qps[qpn] = q
	pd.mu.Lock()
	pd.nqp++
	pd.mu.Unlock()
	for _, c := range []*CQ{cfg.SendCQ, cfg.RecvCQ} {
		c.mu.Lock()
		c.nqp++
		c.mu.Unlock()
		c.workers.Or(1 << w.id)
	}
	if cfg.SRQ != nil {
		cfg.SRQ.nqp++
	}
	return q, nil
}

// allocQPN picks a free QP number in w's residue class (w.mu held), and
// the QP's UDP source port (0: qp's default, derived from the number).
// With Config.SequentialQPN the numbers go up from 0x11; otherwise each is
// drawn at random from the free numbers of the class.
func (d *Device) allocQPN(w *worker) (qpn uint32, sport uint16, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nw := uint32(len(d.workers))
	free := func(n uint32) bool { return n >= firstQPN && n <= maxQPN && n%nw == uint32(w.id) && w.qps[n] == nil }
	draw := func() uint32 { return firstQPN + uint32(d.qpnRand.Uint64()%(maxQPN-firstQPN+1)) }
	drawPort := func() uint16 { return 0xC000 | uint16(d.qpnRand.Uint64()&0x3fff) }
	if !d.cfg.SequentialQPN {
		// A random draw finds a free number at once unless nearly all
		// 16M are taken; the scan below finishes the job then.
		for range 64 {
			n := draw()
			n = n - n%nw + uint32(w.id)
			if free(n) {
				return n, drawPort(), nil
			}
		}
		d.nextQPN = draw()
	}
	qpn = d.nextQPN
	for tries := 0; !free(qpn); tries++ {
		qpn++
		if qpn > maxQPN {
			qpn = firstQPN
		}
		if tries > maxQPN {
			return 0, 0, fmt.Errorf("create qp: no free QP number: %w", ErrBusy)
		}
	}
	d.nextQPN = qpn + 1
	if d.cfg.SequentialQPN {
		return qpn, 0, nil
	}
	return qpn, drawPort(), nil
}

// The numbers allocQPN gives: QPs 0 and 1 are the special QPs, and rxe's
// first number is 0x11.
const (
	firstQPN = 0x11
	maxQPN   = 1<<24 - 1
)

// qpnSource is the generator of a device's QP numbers and source ports.
type qpnSource = *rand.ChaCha8

// newQPNRand returns a qpnSource seeded from crypto/rand.
func newQPNRand() qpnSource {
	var seed [32]byte
	crand.Read(seed[:]) // never fails (crypto/rand panics rather than return an error)
	return rand.NewChaCha8(seed)
}

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.qpn }

// HasSRQ reports whether the QP takes its receive requests from an SRQ.
func (q *QP) HasSRQ() bool { return q.cfg.SRQ != nil }

// Type returns the QP's type.
func (q *QP) Type() QPType { return q.cfg.Type }

// PD returns the QP's protection domain.
func (q *QP) PD() *PD { return q.pd }

func (q *QP) gone() error {
	if q.destroyed {
		if q.w.stop {
			return ErrClosed
		}
		return ErrDestroyed
	}
	return nil
}

// NotifyReceive makes the QP call f once, when it has taken its first
// packet from its peer (one its transport did not drop): the source of the
// kernel's IB_EVENT_COMM_EST, by which a connection manager learns that
// a passive connection whose RTU was lost is in use (IBTA Vol. 1
// §11.6.3.1, §12.9.6.2). If the QP took one already, f is called at once.
// f runs on the QP's worker with the worker's lock held, after the batch
// of frames that brought the packet: it must neither block nor call the
// device (set a flag, wake a goroutine). A later call replaces f; the QP
// forgets f when it is destroyed. Checking costs the worker one length
// test per batch while no QP waits, nothing per packet.
func (q *QP) NotifyReceive(f func()) error {
	w := q.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := q.gone(); err != nil {
		return fmt.Errorf("notify receive: %w", err)
	}
	if q.received() {
		q.onReceive = nil
		f()
		return nil
	}
	if q.onReceive == nil {
		w.rxNotify = append(w.rxNotify, q)
	}
	q.onReceive = f
	return nil
}

// received reports whether the QP took a packet its transport did not
// drop; w.mu is held.
func (q *QP) received() bool {
	s := q.q.Stats()
	return s.RxFrames.Load() > s.RxDropped.Load()
}

// SetRateLimit sets the QP's maximum rate in bits/s of frames on the wire
// (0 removes it) and its pacer's burst in bytes (0: Config.PaceBurst),
// like QPConfig.RateLimit and RateBurst; DCQCN may hold the QP lower.
func (q *QP) SetRateLimit(rate int64, burst int) error {
	w := q.w
	w.mu.Lock()
	if err := q.gone(); err != nil {
		w.mu.Unlock()
		return fmt.Errorf("rate limit qp %#x: %w", q.qpn, err)
	}
	err := q.q.SetRateLimit(rate, burst)
	w.mu.Unlock()
	if err != nil {
		return err
	}
	w.kick()
	return nil
}

// Modify changes the QP's attributes and state (ibv_modify_qp), with the
// engine's state machine: see qp.QP.Modify. A path MTU above the device's
// active MTU is refused with ErrInvalidAttr.
func (q *QP) Modify(a *Attr, mask AttrMask) error {
	if mask&AttrPathMTU != 0 && a.PathMTU > q.w.d.info.ActiveMTU {
		return fmt.Errorf("modify qp %#x: path MTU %v above the port's %v: %w", q.qpn, a.PathMTU, q.w.d.info.ActiveMTU, ErrInvalidAttr)
	}
	w := q.w
	w.mu.Lock()
	if err := q.gone(); err != nil {
		w.mu.Unlock()
		return fmt.Errorf("modify qp %#x: %w", q.qpn, err)
	}
	err := q.q.Modify(a, mask)
	if err == nil && mask&AttrState != 0 {
		switch a.State {
		case qp.StateReset:
			q.fatal, q.lastWQE = false, false
		case qp.StateErr:
			q.lastWQELocked()
		}
	}
	w.mu.Unlock()
	if err != nil {
		return err
	}
	w.kick()
	return nil
}

// Query returns the QP's attributes and current state (ibv_query_qp).
func (q *QP) Query() (Attr, error) {
	w := q.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := q.gone(); err != nil {
		return Attr{}, fmt.Errorf("query qp %#x: %w", q.qpn, err)
	}
	return q.q.Attr(), nil
}

// State returns the QP's current state.
func (q *QP) State() QPState {
	w := q.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if q.destroyed {
		return qp.StateReset
	}
	return q.q.State()
}

// PostSend posts send work requests in order (ibv_post_send); their SGLs
// are copied. The memory they name must stay registered until they
// complete (Dereg refuses until then). Bad keys or ranges complete with
// an error status, as in verbs. A request the queue refuses (full, bad
// opcode or SGL) stops the list: the ones before it are posted, and the
// error names its index when there are several (ibv_post_send's bad_wr).
// The requests are handed to the transport under one lock, and what they
// make ready leaves in one transmit.
func (q *QP) PostSend(wrs ...*SendWR) error {
	w := q.w
	w.mu.Lock()
	if err := q.gone(); err != nil {
		w.mu.Unlock()
		return fmt.Errorf("post send on qp %#x: %w", q.qpn, err)
	}
	idle := q.q.SendQueued() == 0
	var err error
	n := 0
	for ; n < len(wrs); n++ {
		if err = q.q.PostSend(wrs[n]); err != nil {
			break
		}
	}
	kick := false
	if n > 0 {
		kick = w.postedLocked(idle)
	}
	w.mu.Unlock()
	if kick {
		w.kick()
	}
	return postErr(err, n, len(wrs))
}

// postErr is the error of a post that stopped at request i of n.
func postErr(err error, i, n int) error {
	if err == nil || n == 1 {
		return err
	}
	return fmt.Errorf("request %d of %d: %w", i, n, err)
}

// PostRecv posts receive work requests in order (ibv_post_recv); their
// SGLs are copied. As PostSend, a refused request stops the list.
func (q *QP) PostRecv(wrs ...*RecvWR) error {
	w := q.w
	w.mu.Lock()
	if err := q.gone(); err != nil {
		w.mu.Unlock()
		return fmt.Errorf("post recv on qp %#x: %w", q.qpn, err)
	}
	if q.cfg.SRQ != nil {
		w.mu.Unlock()
		return fmt.Errorf("post recv on qp %#x: it uses an SRQ: %w", q.qpn, ErrState)
	}
	var err error
	n := 0
	for ; n < len(wrs); n++ {
		if err = q.q.PostRecv(wrs[n]); err != nil {
			break
		}
	}
	kick := false
	if n > 0 {
		kick = w.postedLocked(false)
	}
	w.mu.Unlock()
	if kick {
		w.kick()
	}
	return postErr(err, n, len(wrs))
}

// Destroy destroys the QP (ibv_destroy_qp): it leaves the engine at once,
// without completions. It is idempotent.
func (q *QP) Destroy() error {
	w := q.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if q.destroyed {
		return nil
	}
	q.q.Destroy()
	q.release()
	return nil
}

// release forgets the QP; w.mu is held.
func (q *QP) release() {
	q.destroyed = true
	delete(q.w.qps, q.qpn)
	q.pd.mu.Lock()
	q.pd.nqp--
	q.pd.mu.Unlock()
	for _, c := range []*CQ{q.cfg.SendCQ, q.cfg.RecvCQ} {
		c.mu.Lock()
		c.nqp--
		c.mu.Unlock()
	}
	if q.cfg.SRQ != nil {
		q.cfg.SRQ.nqp--
	}
}

// closeLocked flushes the QP to ERR and forgets it (Device.Close); w.mu
// is held.
func (q *QP) closeLocked() {
	if q.destroyed {
		return
	}
	q.q.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState)
	q.q.Destroy()
	q.release()
}

// SRQConfig describes a shared receive queue.
type SRQConfig struct {
	MaxWR  int // requests; 0 means 128
	MaxSGE int // SGEs per request; 0 means 4
	Limit  int // if > 0, EventSRQLimitReached fires when fewer requests remain (then disarms)
}

// SRQ is a shared receive queue (ibv_srq). Its methods are safe for
// concurrent use. The QPs that use it run on its worker.
type SRQ struct {
	pd  *PD
	w   *worker
	s   *qp.SRQ
	cfg SRQConfig

	// Guarded by w.mu.
	limit int
	nqp   int
	dead  bool
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(cfg SRQConfig) (*SRQ, error) {
	d := pd.d
	if cfg.MaxWR <= 0 {
		cfg.MaxWR = 128
	}
	if cfg.MaxSGE <= 0 {
		cfg.MaxSGE = 4
	}
	if cfg.MaxWR > 1<<16 || cfg.MaxSGE > 32 || cfg.Limit < 0 || cfg.Limit > cfg.MaxWR {
		return nil, fmt.Errorf("create srq: %+v: %w", cfg, ErrInvalid)
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("create srq: %w", ErrClosed)
	}
	w := d.workers[d.rr%len(d.workers)]
	d.rr++
	d.mu.Unlock()
	s := &SRQ{pd: pd, w: w, cfg: cfg}
	w.mu.Lock()
	defer w.mu.Unlock()
	s.s = w.eng.CreateSRQ(cfg.MaxWR, cfg.MaxSGE)
	if cfg.Limit > 0 {
		s.armLocked(cfg.Limit)
	}
	return s, nil
}

func (s *SRQ) armLocked(limit int) {
	if s.limit == 0 {
		s.w.armed = append(s.w.armed, s)
	}
	s.limit = limit
}

// Arm sets the SRQ limit (ibv_modify_srq with IBV_SRQ_LIMIT): when fewer
// than limit requests remain, EventSRQLimitReached fires once and the limit
// disarms. 0 disarms.
func (s *SRQ) Arm(limit int) error {
	if limit < 0 || limit > s.cfg.MaxWR {
		return fmt.Errorf("arm srq: limit %d: %w", limit, ErrInvalid)
	}
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.dead {
		return fmt.Errorf("arm srq: %w", ErrDestroyed)
	}
	if limit == 0 {
		for i, x := range w.armed {
			if x == s {
				w.armed = append(w.armed[:i], w.armed[i+1:]...)
				break
			}
		}
		s.limit = 0
		return nil
	}
	s.armLocked(limit)
	w.kick() // the worker checks the limit after its next batch
	return nil
}

// PostRecv posts receive requests to the SRQ in order
// (ibv_post_srq_recv); as QP.PostSend, a refused request stops the list.
func (s *SRQ) PostRecv(wrs ...*RecvWR) error {
	w := s.w
	w.mu.Lock()
	if s.dead || w.stop {
		w.mu.Unlock()
		if w.stop {
			return fmt.Errorf("post srq recv: %w", ErrClosed)
		}
		return fmt.Errorf("post srq recv: %w", ErrDestroyed)
	}
	var err error
	n := 0
	for ; n < len(wrs); n++ {
		if err = s.s.PostRecv(wrs[n]); err != nil {
			break
		}
	}
	w.mu.Unlock()
	if n > 0 {
		w.kick()
	}
	return postErr(err, n, len(wrs))
}

// Len returns the number of requests waiting in the SRQ.
func (s *SRQ) Len() int {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return s.s.Len()
}

// Destroy destroys the SRQ; it fails with ErrBusy while QPs use it. It is
// idempotent.
func (s *SRQ) Destroy() error {
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.dead {
		return nil
	}
	if s.nqp > 0 {
		return fmt.Errorf("destroy srq: used by %d QPs: %w", s.nqp, ErrBusy)
	}
	if err := s.s.Destroy(); err != nil {
		return fmt.Errorf("destroy srq: %w", err)
	}
	s.dead = true
	for i, x := range w.armed {
		if x == s {
			w.armed = append(w.armed[:i], w.armed[i+1:]...)
			break
		}
	}
	return nil
}
