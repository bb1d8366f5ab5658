package qp

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/xroce/xroce/bth"
)

// State is a queue pair state (IBTA Vol 1 §10.3.1), numbered as ibv_qp_state.
type State uint8

// Queue pair states.
const (
	StateReset State = iota // just created or reset: nothing is processed
	StateInit               // receive requests may be posted; nothing is processed
	StateRTR                // ready to receive: the responder runs
	StateRTS                // ready to send: requester, completer and responder run
	StateSQD                // send queue drain: no new send requests are started
	StateSQE                // send queue error (UC, UD): the send queue is flushed, receives go on
	StateErr                // error: every work request is flushed
	numStates
)

var stateNames = [numStates]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// AttrMask says which fields of Attr a Modify call sets, with the bits of
// ibv_qp_attr_mask.
type AttrMask uint32

// Attribute mask bits.
const (
	AttrState           AttrMask = 1 << 0
	AttrCurState        AttrMask = 1 << 1
	AttrAccessFlags     AttrMask = 1 << 3
	AttrPKey            AttrMask = 1 << 4 // the P_Key itself (ibv: P_Key index)
	AttrPort            AttrMask = 1 << 5
	AttrQKey            AttrMask = 1 << 6
	AttrAV              AttrMask = 1 << 7
	AttrPathMTU         AttrMask = 1 << 8
	AttrTimeout         AttrMask = 1 << 9
	AttrRetryCnt        AttrMask = 1 << 10
	AttrRNRRetry        AttrMask = 1 << 11
	AttrRQPSN           AttrMask = 1 << 12
	AttrMaxRdAtomic     AttrMask = 1 << 13
	AttrMinRNRTimer     AttrMask = 1 << 15
	AttrSQPSN           AttrMask = 1 << 16
	AttrMaxDestRdAtomic AttrMask = 1 << 17
	AttrDestQPN         AttrMask = 1 << 20
)

var attrNames = [...]struct {
	m AttrMask
	n string
}{
	{AttrState, "STATE"}, {AttrCurState, "CUR_STATE"}, {AttrAccessFlags, "ACCESS_FLAGS"},
	{AttrPKey, "PKEY"}, {AttrPort, "PORT"}, {AttrQKey, "QKEY"}, {AttrAV, "AV"},
	{AttrPathMTU, "PATH_MTU"}, {AttrTimeout, "TIMEOUT"}, {AttrRetryCnt, "RETRY_CNT"},
	{AttrRNRRetry, "RNR_RETRY"}, {AttrRQPSN, "RQ_PSN"}, {AttrMaxRdAtomic, "MAX_QP_RD_ATOMIC"},
	{AttrMinRNRTimer, "MIN_RNR_TIMER"}, {AttrSQPSN, "SQ_PSN"}, {AttrMaxDestRdAtomic, "MAX_DEST_RD_ATOMIC"},
	{AttrDestQPN, "DEST_QPN"},
}

func (m AttrMask) String() string {
	var s []string
	for _, a := range attrNames {
		if m&a.m != 0 {
			s = append(s, a.n)
			m &^= a.m
		}
	}
	if m != 0 {
		s = append(s, "0x"+strconv.FormatUint(uint64(m), 16))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "|")
}

// Attr holds a queue pair's attributes (ibv_qp_attr).
type Attr struct {
	State           State
	CurState        State
	AccessFlags     Access // remote operations the responder allows
	PKey            uint16 // partition key; 0 means 0xFFFF
	Port            uint8  // must be 1
	QKey            uint32 // UD Q_Key
	AV              AddressVector
	PathMTU         MTU
	Timeout         uint8   // local ACK timeout 4.096 µs × 2^Timeout; 0 = wait forever (0..31)
	RetryCnt        uint8   // retransmissions on timeout or PSN sequence NAK (0..7, 7 = forever as rxe)
	RNRRetry        uint8   // retries after RNR NAKs (0..7, 7 = forever)
	RQPSN           bth.PSN // first PSN expected by the responder
	SQPSN           bth.PSN // first PSN sent by the requester
	MaxRdAtomic     uint8   // READs and atomics outstanding as requester
	MaxDestRdAtomic uint8   // READs and atomics kept as responder resources
	MinRNRTimer     uint8   // RNR timer code sent in RNR NAKs (0..31)
	DestQPN         uint32
}

// Errors of Modify and of posting work requests. Modify returns a
// *ModifyError that wraps one of the first three.
var (
	ErrTransition  = errors.New("illegal state transition")
	ErrMissingAttr = errors.New("missing required attribute")
	ErrExtraAttr   = errors.New("attribute not allowed in this transition")
	ErrInvalidAttr = errors.New("invalid attribute value")
	ErrState       = errors.New("queue pair state does not allow this")
	ErrQueueFull   = errors.New("work queue full")
	ErrTooManySGE  = errors.New("too many scatter/gather elements")
	ErrInline      = errors.New("inline data too long")
	ErrOpcode      = errors.New("operation not supported by this QP type")
	ErrInUse       = errors.New("still in use")
	ErrDestroyed   = errors.New("destroyed")
)

// ModifyError explains why Modify refused a change.
type ModifyError struct {
	QPN      uint32
	From, To State
	Attrs    AttrMask // the attributes concerned (missing, extra or invalid)
	Err      error    // ErrTransition, ErrMissingAttr, ErrExtraAttr or ErrInvalidAttr
}

func (e *ModifyError) Error() string {
	s := fmt.Sprintf("modify qp %#x %v→%v: %v", e.QPN, e.From, e.To, e.Err)
	if e.Attrs != 0 {
		s += " " + e.Attrs.String()
	}
	return s
}

func (e *ModifyError) Unwrap() error { return e.Err }

// transition gives the attributes a transition requires and allows, per QP
// type (IBTA Vol 1 §11.2.5.2 table 94, as enforced by the kernel's
// ib_modify_qp_is_ok).
type transition struct {
	req, opt [UD + 1]AttrMask
}

func perType(rc, uc, ud AttrMask) [UD + 1]AttrMask { return [UD + 1]AttrMask{RC: rc, UC: uc, UD: ud} }

var transitions = func() (t [numStates][numStates]*transition) {
	const (
		rtsOptRC = AttrAccessFlags | AttrMinRNRTimer
		rtsOptUC = AttrAccessFlags
		rtsOptUD = AttrQKey
	)
	t[StateReset][StateInit] = &transition{
		req: perType(AttrPKey|AttrPort|AttrAccessFlags, AttrPKey|AttrPort|AttrAccessFlags, AttrPKey|AttrPort|AttrQKey),
	}
	t[StateInit][StateInit] = &transition{
		opt: perType(AttrPKey|AttrPort|AttrAccessFlags, AttrPKey|AttrPort|AttrAccessFlags, AttrPKey|AttrPort|AttrQKey),
	}
	t[StateInit][StateRTR] = &transition{
		req: perType(AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer,
			AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN, 0),
		opt: perType(AttrAccessFlags|AttrPKey, AttrAccessFlags|AttrPKey, AttrPKey|AttrQKey),
	}
	t[StateRTR][StateRTS] = &transition{
		req: perType(AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxRdAtomic, AttrSQPSN, AttrSQPSN),
		opt: perType(AttrCurState|rtsOptRC, AttrCurState|rtsOptUC, AttrCurState|rtsOptUD),
	}
	t[StateRTS][StateRTS] = &transition{opt: perType(AttrCurState|rtsOptRC, AttrCurState|rtsOptUC, AttrCurState|rtsOptUD)}
	t[StateRTS][StateSQD] = &transition{}
	t[StateSQD][StateRTS] = &transition{opt: perType(AttrCurState|rtsOptRC, AttrCurState|rtsOptUC, AttrCurState|rtsOptUD)}
	t[StateSQD][StateSQD] = &transition{
		opt: perType(AttrAV|AttrPKey|AttrAccessFlags|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxRdAtomic|AttrMaxDestRdAtomic|AttrMinRNRTimer,
			AttrAV|AttrPKey|AttrAccessFlags, AttrPKey|AttrQKey),
	}
	t[StateSQE][StateRTS] = &transition{opt: perType(0, AttrCurState|AttrAccessFlags, AttrCurState|AttrQKey)}
	for s := range numStates {
		t[s][StateReset] = &transition{}
		t[s][StateErr] = &transition{}
	}
	return t
}()

// Modify changes the QP's attributes and state, like ibv_modify_qp: mask
// says which fields of a to apply; AttrState moves the QP to a.State. An
// illegal transition, a missing required attribute, an attribute the
// transition does not allow or an invalid value leaves the QP unchanged and
// returns a *ModifyError. Moving to ERR flushes every outstanding work
// request with WR_FLUSH_ERR; moving to RESET empties the queues silently.
func (q *QP) Modify(a *Attr, mask AttrMask) error {
	from, to := q.state, q.state
	if mask&AttrState != 0 {
		to = a.State
	}
	fail := func(m AttrMask, err error) error {
		return &ModifyError{QPN: q.qpn, From: from, To: to, Attrs: m, Err: err}
	}
	if to >= numStates {
		return fail(AttrState, ErrInvalidAttr)
	}
	if mask&AttrCurState != 0 && a.CurState != from {
		return fail(AttrCurState, ErrInvalidAttr)
	}
	tr := transitions[from][to]
	if tr == nil || to == StateSQE {
		return fail(0, ErrTransition)
	}
	req, opt := tr.req[q.typ], tr.opt[q.typ]
	given := mask &^ AttrState
	if miss := req &^ given; miss != 0 {
		return fail(miss, ErrMissingAttr)
	}
	if extra := given &^ (req | opt); extra != 0 {
		return fail(extra, ErrExtraAttr)
	}
	if bad := q.checkAttr(a, given); bad != 0 {
		return fail(bad, ErrInvalidAttr)
	}
	q.applyAttr(a, given)
	q.attr.State = to
	q.wake()
	if from == to {
		return nil
	}
	switch to {
	case StateReset:
		q.reset()
	case StateErr:
		q.state = to
		q.flush()
		q.recharge()
		return nil
	case StateRTR:
		q.onRTR()
	case StateRTS:
		if from == StateRTR {
			q.onRTS()
		}
	}
	q.state = to
	q.recharge()
	return nil
}

// checkAttr returns the attributes in given whose values are invalid.
func (q *QP) checkAttr(a *Attr, given AttrMask) AttrMask {
	var bad AttrMask
	if given&AttrPort != 0 && a.Port != 1 {
		bad |= AttrPort
	}
	if given&AttrQKey != 0 && q.qpn == GSIQPN && a.QKey != GSIQKey {
		bad |= AttrQKey // the GSI answers to the well-known Q_Key only
	}
	if given&AttrPathMTU != 0 && a.PathMTU.Bytes() == 0 {
		bad |= AttrPathMTU
	}
	if given&AttrTimeout != 0 && a.Timeout > 31 {
		bad |= AttrTimeout
	}
	if given&AttrRetryCnt != 0 && a.RetryCnt > 7 {
		bad |= AttrRetryCnt
	}
	if given&AttrRNRRetry != 0 && a.RNRRetry > 7 {
		bad |= AttrRNRRetry
	}
	if given&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		bad |= AttrMinRNRTimer
	}
	if given&AttrRQPSN != 0 && !a.RQPSN.Valid() {
		bad |= AttrRQPSN
	}
	if given&AttrSQPSN != 0 && !a.SQPSN.Valid() {
		bad |= AttrSQPSN
	}
	if given&AttrDestQPN != 0 && a.DestQPN > bth.PSNMask {
		bad |= AttrDestQPN
	}
	if given&AttrMaxRdAtomic != 0 && int(a.MaxRdAtomic) > maxRdAtomic {
		bad |= AttrMaxRdAtomic
	}
	if given&AttrMaxDestRdAtomic != 0 && int(a.MaxDestRdAtomic) > maxRdAtomic {
		bad |= AttrMaxDestRdAtomic
	}
	if given&AttrAV != 0 {
		s, d := a.AV.SrcIP.Unmap(), a.AV.DstIP.Unmap()
		if !s.IsValid() || !d.IsValid() || s.Is4() != d.Is4() {
			bad |= AttrAV
		}
	}
	if given&AttrAccessFlags != 0 && a.AccessFlags&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic) != 0 {
		bad |= AttrAccessFlags
	}
	return bad
}

// maxRdAtomic bounds max_rd_atomic and max_dest_rd_atomic (rxe allows 128).
const maxRdAtomic = 128

func (q *QP) applyAttr(a *Attr, m AttrMask) {
	at := &q.attr
	if m&AttrAccessFlags != 0 {
		at.AccessFlags = a.AccessFlags
	}
	if m&AttrPKey != 0 {
		at.PKey = a.PKey
		if at.PKey == 0 {
			at.PKey = 0xffff
		}
	}
	if m&AttrPort != 0 {
		at.Port = a.Port
	}
	if m&AttrQKey != 0 {
		at.QKey = a.QKey
	}
	if m&AttrAV != 0 {
		at.AV = a.AV
		q.setAV(&at.AV)
	}
	if m&AttrPathMTU != 0 {
		at.PathMTU = a.PathMTU
		q.mtu = uint32(a.PathMTU.Bytes())
	}
	if m&AttrTimeout != 0 {
		at.Timeout = a.Timeout
	}
	if m&AttrRetryCnt != 0 {
		at.RetryCnt = a.RetryCnt
		q.retryLeft = a.RetryCnt
	}
	if m&AttrRNRRetry != 0 {
		at.RNRRetry = a.RNRRetry
		q.rnrLeft = a.RNRRetry
	}
	if m&AttrRQPSN != 0 {
		at.RQPSN = a.RQPSN
	}
	if m&AttrSQPSN != 0 {
		at.SQPSN = a.SQPSN
	}
	if m&AttrMaxRdAtomic != 0 {
		at.MaxRdAtomic = a.MaxRdAtomic
	}
	if m&AttrMaxDestRdAtomic != 0 {
		at.MaxDestRdAtomic = a.MaxDestRdAtomic
		n := max(int(a.MaxDestRdAtomic), 1)
		if len(q.resStore) < n {
			// Allocated for the depth asked, not rxe's 128 up front
			// (13 KiB per QP): kept resources move along.
			q.resStore = append(q.resStore, make([]resource, n-len(q.resStore))...)
		}
		q.res = q.resStore[:n]
	}
	if m&AttrMinRNRTimer != 0 {
		at.MinRNRTimer = a.MinRNRTimer
	}
	if m&AttrDestQPN != 0 {
		at.DestQPN = a.DestQPN
	}
}

// State returns the QP's current state.
func (q *QP) State() State { return q.state }

// Attr returns a copy of the QP's attributes.
func (q *QP) Attr() Attr {
	a := q.attr
	a.State, a.CurState = q.state, q.state
	return a
}

// toError moves the QP to ERR after a fatal error and flushes it.
func (q *QP) toError() {
	if q.state == StateErr {
		return
	}
	q.state = StateErr
	q.attr.State = StateErr
	q.count(&q.e.stats.ToError, &q.stats.ToError)
	q.flush()
}

// toSQE moves a UC or UD QP's send queue to the error state.
func (q *QP) toSQE() {
	q.state = StateSQE
	q.attr.State = StateSQE
	q.flushSQ()
}

// flush completes every outstanding work request with WR_FLUSH_ERR, send
// queue first, and drops the responder's state.
func (q *QP) flush() {
	q.flushSQ()
	for q.rqHead != q.rqTail {
		w := q.rqAt(q.rqHead)
		q.recvCQ.Complete(q.wcOut(WC{ID: w.id, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.qpn}))
		q.rqHead++
	}
	if q.curHeld {
		q.curHeld = false
		q.recvCQ.Complete(q.wcOut(WC{ID: q.cur.id, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.qpn}))
	}
	q.resetResponder()
}

func (q *QP) flushSQ() {
	for q.sqHead != q.sqTail {
		w := q.sqAt(q.sqHead)
		q.sendCQ.Complete(q.wcOut(WC{ID: w.wr.ID, Status: WCWRFlushErr, Opcode: wcOpcodeOf(w.wr.Opcode), QPN: q.qpn}))
		q.sqHead++
	}
	q.sqReq = q.sqHead
	q.rdOut = 0
	q.timer.stop()
}

// reset empties the queues without completions and forgets all attributes
// but the QP number and type, as a move to RESET does.
func (q *QP) reset() {
	q.sqHead, q.sqReq, q.sqTail = 0, 0, 0
	q.rqHead, q.rqTail = 0, 0
	q.curHeld = false
	q.rdOut = 0
	q.attr = Attr{PKey: 0xffff, PathMTU: MTU256}
	q.mtu = 256
	q.res = q.resStore[:1]
	q.timer = timers{}
	q.recovering = false
	q.resetResponder()
	q.rp = NewDCQCN(&q.e.cc.dcqcn, q.e.cc.lineRate)
	q.credit, q.creditAt, q.paceAt = int64(q.paceBurst()), 0, Never
	q.lastCNP, q.cnpDue = neverCNP, 0
}
