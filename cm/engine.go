package cm

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/xroce/xroce/mad"
)

// Errors of the Engine's calls.
var (
	// ErrUnknown: no connection has that ID (it ended, or never was).
	ErrUnknown = errors.New("cm: unknown connection")
	// ErrState: the connection is not in a state where the call applies.
	ErrState = errors.New("cm: wrong connection state")
	// ErrFull: Config.MaxConns connections exist already.
	ErrFull = errors.New("cm: too many connections")
	// ErrListening: the service ID has a listener already.
	ErrListening = errors.New("cm: service ID in use")
)

// State is a connection's state (IBTA Vol. 1 §12.9.6, the kernel's
// ib_cm_state).
type State uint8

// Connection states.
const (
	StateIdle State = iota
	StateReqSent
	StateMRAReqRcvd // the peer said (MRA) it needs more time for our REQ
	// StateReqRcvd: a REQ is with the consumer, who accepts or rejects
	// it; a duplicate of the REQ is answered with an MRA (the kernel's
	// MRA_REQ_SENT).
	StateReqRcvd
	StateRepSent
	StateMRARepRcvd
	// StateRepRcvd: the REP is with the consumer, who readies the QP and
	// calls Establish; a duplicate REP gets an MRA (MRA_REP_SENT).
	StateRepRcvd
	StateEstablished
	StateDreqSent
	StateDreqRcvd
	StateTimewait
	StateSIDRReqSent // a SIDR_REQ waits for its SIDR_REP
	StateSIDRReqRcvd // a SIDR_REQ is with the consumer
	numStates
)

var stateNames = [numStates]string{"IDLE", "REQ_SENT", "MRA_REQ_RCVD", "REQ_RCVD", "REP_SENT", "MRA_REP_RCVD",
	"REP_RCVD", "ESTABLISHED", "DREQ_SENT", "DREQ_RCVD", "TIMEWAIT", "SIDR_REQ_SENT", "SIDR_REQ_RCVD"}

func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Peer is where a MAD came from or goes: the peer's IP address (its GID)
// and Ethernet address, and the local address it was sent to.
type Peer struct {
	Addr  netip.Addr
	Local netip.Addr
	MAC   [6]byte
}

// Output sends MADs. SendMAD must copy m, which the engine reuses.
type Output interface {
	SendMAD(to *Peer, m mad.MAD)
}

// Handler receives the engine's events. Event's views and slices are valid
// only during the call, and the handler must not call the engine.
type Handler interface {
	Event(ev *Event)
	// Received reports whether the connection's QP has received anything
	// from its peer: the consumer side of COMM_EST (IBTA §12.9.6.2), so
	// that a lost RTU does not end a connection already in use. The
	// engine asks before it resends a REP; Notify is the prompt way.
	Received(id uint32) bool
}

// EventType says what happened to a connection.
type EventType uint8

// Event types.
const (
	// EventRequest: a REQ for a listener (Event.REQ); Accept or Reject it.
	EventRequest EventType = iota + 1
	// EventReply: the REP to our REQ (Event.REP); make the QP ready to
	// send, then Establish (or Reject).
	EventReply
	// EventEstablished: the passive side got the RTU (or its QP got data).
	EventEstablished
	// EventRejected: the peer refused (Event.Reason, ARI and private data).
	EventRejected
	// EventUnreachable: no answer after every retry of a REQ or REP, or a
	// request the consumer never answered; a REJ "timeout" was sent.
	EventUnreachable
	// EventDisconnectRequest: the peer sent a DREQ; call Disconnect (or
	// Destroy) to answer with the DREP. Until then the connection stays
	// in StateDreqRcvd, as the kernel's stays in DREQ_RCVD until the
	// consumer calls rdma_disconnect or rdma_destroy_id.
	EventDisconnectRequest
	// EventDisconnected: our DREQ was answered, or went unanswered after
	// every retry; the connection is in time-wait.
	EventDisconnected
	// EventTimewaitExit: the connection is gone; its QP may be reused.
	EventTimewaitExit
	// EventSIDRRequest: a SIDR_REQ for a listener (Event.SIDRREQ); answer
	// it with SIDRReply.
	EventSIDRRequest
	// EventSIDRReply: the SIDR_REP to our SIDR_REQ (Event.SIDRREP).
	EventSIDRReply
)

var eventNames = [...]string{"", "REQUEST", "REPLY", "ESTABLISHED", "REJECTED", "UNREACHABLE",
	"DISCONNECT_REQUEST", "DISCONNECTED", "TIMEWAIT_EXIT", "SIDR_REQUEST", "SIDR_REPLY"}

func (t EventType) String() string {
	if int(t) < len(eventNames) && t != 0 {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is one event of a connection.
type Event struct {
	Type        EventType
	ID          uint32 // the connection's local comm ID
	Peer        *Peer
	REQ         mad.REQ // EventRequest
	REP         mad.REP // EventReply
	SIDRREQ     mad.SIDRREQ
	SIDRREP     mad.SIDRREP
	Reason      mad.RejReason
	ARI         []byte
	PrivateData []byte // of the REQ, REP, RTU, REJ or DREQ the event is about
}

// Config configures an Engine.
type Config struct {
	GUID    uint64 // the local CA GUID sent in REQ, REP and REJ "timeout"
	Out     Output
	Handler Handler
	Seed    uint64 // seeds the comm IDs and TIDs (tests); 0 means random
	// MaxConns bounds the connections in every state; 0 means 4096. One
	// in time-wait counts only while there is room: a new connection
	// that finds none takes the place of the oldest in time-wait.
	MaxConns int
	Backlog  int // requests a listener holds before they are accepted; 0 means 128
	// MRATimeout is the Service Timeout of the MRAs that answer duplicate
	// REQs and REPs (4.096 µs × 2^MRATimeout); 0 means 24 (68.7 s), the
	// kernel's. A request nobody answers ends after it.
	MRATimeout uint8
}

// Stats are the engine's counters, safe to read from any goroutine.
type Stats struct {
	Rx, Tx [numAttrs]atomic.Uint64 // MADs received and sent, by message (see AttrIndex)
	// Received MADs dropped: shorter than 256 bytes or a wrong base
	// version, class, class version or method; a message the CM does not
	// handle (LAP, APR, ClassPortInfo, unknown); no matching connection,
	// or one whose peer is at another address than the sender.
	RxMalformed, RxUnsupported, RxUnmatched atomic.Uint64
	RxBadPKey                               atomic.Uint64 // REQs naming a P_Key not in the table (REJ 12)
	RxDuplicates                            atomic.Uint64 // duplicate REQ, REP, DREQ, RTU
	Retransmits                             atomic.Uint64 // REQ, REP and DREQ resent
	Timeouts                                atomic.Uint64 // retries exhausted
	Refused                                 atomic.Uint64 // REQs refused for want of room (REJ 3)
	TimewaitEvicted                         atomic.Uint64 // connections forgotten in time-wait to make room for new ones
	TxNoBuffer                              atomic.Uint64 // MADs the output had no room for (retries cover them)
}

// numAttrs counts the CM messages REQ (0x10) to SIDR_REP (0x18).
const numAttrs = 9

// AttrIndex is the index of a CM message in Stats.Rx and Stats.Tx.
func AttrIndex(a mad.AttrID) (int, bool) {
	i := int(a) - int(mad.AttrREQ)
	return i, i >= 0 && i < numAttrs
}

// conn is one connection's state.
type conn struct {
	id, remoteID uint32
	remoteGUID   uint64
	localQPN     uint32
	remoteQPN    uint32
	tid          uint64 // of the REQ: REP, RTU, MRA and REJ echo it
	serviceID    uint64 // SIDR: the service asked for
	state        State
	active       bool
	destroyed    bool // the consumer is gone: no more events
	indexed      bool // in byRemote and byQPN
	lst          *listener
	peer         Peer

	msg      [mad.Size]byte // the REQ, REP or DREQ being sent
	retries  uint8          // resends left
	maxRetry uint8          // Max CM Retries of the REQ
	timeout  time.Duration  // wait for an answer to msg (the kernel's timeout_ms)
	twait    time.Duration  // time-wait
	// peerTimeout is how long the peer's CM waits before it resends its
	// DREQ (its timeout_ms, from the REQ), and answered whether we sent
	// the DREP to the peer's DREQ: if that DREP is lost, the DREQ comes
	// again, so time-wait lasts until after its first resend.
	peerTimeout time.Duration
	answered    bool
	// crossed: the peer's DREQ crossed ours (onDREQ in StateDreqSent).
	crossed  bool
	dreqTID  uint64 // TID of the DREQ received, for the DREP
	deadline time.Duration
	hidx     int
	// In the engine's time-wait list, oldest first (twPrev, twNext).
	inTW           bool
	twPrev, twNext *conn
}

type remoteKey struct {
	id   uint32
	guid uint64
}

type sidrKey struct {
	id   uint32
	addr netip.Addr
}

type listener struct {
	serviceID uint64
	pending   int // connections in StateReqRcvd
}

// Engine is the CM of one port: connections, listeners and their timers.
// It belongs to one goroutine at a time (its owner serialises calls).
type Engine struct {
	cfg       Config
	rng       *rand.Rand
	tidHi     uint64              // the agent's number, bits 63..32 of the TIDs it originates
	conns     map[uint32]*conn    // by local comm ID
	byRemote  map[remoteKey]*conn // by the peer's comm ID and CA GUID
	byQPN     map[remoteKey]*conn // by the peer's QPN and CA GUID
	sidrs     map[sidrKey]*conn   // SIDR requests with the consumer, by request ID and sender
	listeners map[uint64]*listener
	timers    deadlines
	// The connections in time-wait, in the order they entered it: the
	// first is the one a new connection replaces when there is no room.
	twFirst, twLast *conn
	scratch         [mad.Size]byte
	ev              Event
	stats           Stats
}

// NewEngine makes an engine.
func NewEngine(cfg Config) (*Engine, error) {
	if cfg.Out == nil || cfg.Handler == nil {
		return nil, fmt.Errorf("cm: engine needs an output and a handler")
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 4096
	}
	if cfg.Backlog <= 0 {
		cfg.Backlog = 128
	}
	if cfg.MRATimeout == 0 {
		cfg.MRATimeout = 24
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	e := &Engine{
		cfg: cfg, rng: rand.New(rand.NewPCG(seed, 0x636d)),
		conns: map[uint32]*conn{}, byRemote: map[remoteKey]*conn{}, byQPN: map[remoteKey]*conn{},
		sidrs:     map[sidrKey]*conn{},
		listeners: map[uint64]*listener{},
	}
	e.tidHi = uint64(1+e.rng.IntN(255)) << 32
	return e, nil
}

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// Conns returns the number of connections, time-wait included.
func (e *Engine) Conns() int { return len(e.conns) }

// State returns connection id's state (StateIdle when it does not exist).
func (e *Engine) State(id uint32) State {
	if c := e.conns[id]; c != nil {
		return c.state
	}
	return StateIdle
}

// tid is the transaction ID of the messages c originates (REQ, DREQ,
// SIDR_REQ) as the kernel forms it (cm_form_tid): the agent's number
// above the comm ID, which the kernel ORs in as the big-endian value it
// keeps, so that on little-endian hosts its bytes appear reversed (rxe's
// comm ID 0x67c889bd goes with TID 0x8_bd89c867).
func (e *Engine) tid(c *conn) uint64 { return e.tidHi | uint64(bits.ReverseBytes32(c.id)) }

// Listen makes REQs for serviceID EventRequests; without a listener a REQ
// is refused with REJ "invalid service ID" (8).
func (e *Engine) Listen(serviceID uint64) error {
	if e.listeners[serviceID] != nil {
		return fmt.Errorf("listen on service %#x: %w", serviceID, ErrListening)
	}
	e.listeners[serviceID] = &listener{serviceID: serviceID}
	return nil
}

// Unlisten removes serviceID's listener; its pending requests stay until
// they are answered.
func (e *Engine) Unlisten(serviceID uint64) {
	if l := e.listeners[serviceID]; l != nil {
		delete(e.listeners, serviceID)
	}
}

// newConn allocates a connection with a fresh random nonzero comm ID. At
// Config.MaxConns it forgets the oldest connection in time-wait to make
// room, as Linux's TCP drops time-wait sockets beyond tcp_max_tw_buckets:
// time-wait keeps a comm ID and QPN from being taken for a new
// connection's too soon, it is not a resource a peer can use up (one
// that opens and closes connections fast would otherwise lock every
// other peer out).
func (e *Engine) newConn() (*conn, error) {
	if len(e.conns) >= e.cfg.MaxConns {
		old := e.twFirst
		if old == nil {
			return nil, ErrFull
		}
		e.stats.TimewaitEvicted.Add(1)
		e.emit(old, EventTimewaitExit, nil)
		e.free(old)
	}
	c := &conn{hidx: -1, deadline: Never}
	for c.id == 0 || e.conns[c.id] != nil {
		c.id = e.rng.Uint32()
	}
	e.conns[c.id] = c
	return c, nil
}

// index records c under the peer's comm ID and QPN, for duplicate and
// stale detection.
func (e *Engine) index(c *conn) {
	e.byRemote[remoteKey{c.remoteID, c.remoteGUID}] = c
	e.byQPN[remoteKey{c.remoteQPN, c.remoteGUID}] = c
	c.indexed = true
}

// free forgets c.
func (e *Engine) free(c *conn) {
	e.leaveTimewaitList(c)
	e.disarm(c)
	e.leaveReqRcvd(c)
	e.unindex(c)
	if c.state == StateSIDRReqRcvd {
		delete(e.sidrs, sidrKey{c.remoteID, c.peer.Addr})
	}
	delete(e.conns, c.id)
	c.state = StateIdle
}

func (e *Engine) leaveReqRcvd(c *conn) {
	if c.lst != nil {
		c.lst.pending--
		c.lst = nil
	}
}

// emit delivers an event about c unless its consumer is gone.
func (e *Engine) emit(c *conn, t EventType, fill func(ev *Event)) {
	if c.destroyed {
		return
	}
	e.ev = Event{Type: t, ID: c.id, Peer: &c.peer}
	if fill != nil {
		fill(&e.ev)
	}
	e.cfg.Handler.Event(&e.ev)
}

// send gives a MAD to the output and counts it.
func (e *Engine) send(to *Peer, m mad.MAD) {
	if i, ok := AttrIndex(m.AttrID()); ok {
		e.stats.Tx[i].Add(1)
	}
	e.cfg.Out.SendMAD(to, m)
}

// sendMsg sends c's retransmittable message and arms its timer.
func (e *Engine) sendMsg(now time.Duration, c *conn) {
	e.send(&c.peer, c.msg[:])
	e.arm(c, now+c.timeout)
}

// begin starts a retransmittable message in c.msg.
func (e *Engine) begin(c *conn, tid uint64, attr mad.AttrID) []byte {
	m := mad.MAD(c.msg[:])
	m.EncodeCM(tid, attr, 0)
	c.retries = c.maxRetry
	return m.Body()
}

// reply builds a one-off message in the scratch buffer.
func (e *Engine) reply(tid uint64, attr mad.AttrID) mad.MAD {
	m := mad.MAD(e.scratch[:])
	m.EncodeCM(tid, attr, 0)
	return m
}

func (e *Engine) sendREJ(to *Peer, tid uint64, local, remote uint32, msg uint8, reason mad.RejReason, ari, data []byte) {
	m := e.reply(tid, mad.AttrREJ)
	mad.REJ(m.Body()).Encode(&mad.REJFields{LocalCommID: local, RemoteCommID: remote, MsgRejected: msg,
		Reason: reason, ARI: ari, PrivateData: data})
	e.send(to, m)
}

// sendREJFrom sends a REJ from c's state, with the Message REJected and
// Local Comm ID the kernel's cm_format_rej gives it: a REQ is rejected
// without our comm ID, a REP with it, anything else as "other".
func (e *Engine) sendREJFrom(c *conn, reason mad.RejReason, ari, data []byte) {
	msg, local := mad.MsgOther, c.id
	switch c.state {
	case StateReqRcvd:
		msg, local = mad.MsgREQ, 0
	case StateRepRcvd:
		msg = mad.MsgREP
	}
	e.sendREJ(&c.peer, c.tid, local, c.remoteID, msg, reason, ari, data)
}

// rejectREQ refuses a REQ that leaves no state behind: REJ of the REQ,
// without our comm ID, echoing its TID.
func (e *Engine) rejectREQ(from *Peer, m mad.MAD, reason mad.RejReason, ari []byte) {
	e.sendREJ(from, m.TID(), 0, mad.REQ(m.Body()).LocalCommID(), mad.MsgREQ, reason, ari, nil)
}

func (e *Engine) sendMRA(c *conn, msg uint8) {
	m := e.reply(c.tid, mad.AttrMRA)
	mad.MRA(m.Body()).Encode(&mad.MRAFields{LocalCommID: c.id, RemoteCommID: c.remoteID, MsgMRAed: msg,
		ServiceTimeout: e.cfg.MRATimeout})
	e.send(&c.peer, m)
}

func (e *Engine) sendDREP(to *Peer, tid uint64, local, remote uint32, data []byte) {
	m := e.reply(tid, mad.AttrDREP)
	mad.DREP(m.Body()).Encode(&mad.DREPFields{LocalCommID: local, RemoteCommID: remote, PrivateData: data})
	e.send(to, m)
}

func (e *Engine) sendRTU(c *conn, data []byte) {
	m := e.reply(c.tid, mad.AttrRTU)
	mad.RTU(m.Body()).Encode(&mad.RTUFields{LocalCommID: c.id, RemoteCommID: c.remoteID, PrivateData: data})
	e.send(&c.peer, m)
}

// guidARI is the ARI of a REJ "timeout": the rejecting CA's GUID.
func (e *Engine) guidARI() []byte {
	var b [8]byte
	for i := range b {
		b[i] = byte(e.cfg.GUID >> (56 - 8*i))
	}
	return b[:]
}

// Poll runs the timers due at now and returns the next deadline.
func (e *Engine) Poll(now time.Duration) time.Duration {
	for len(e.timers) > 0 && e.timers[0].deadline <= now {
		c := e.timers[0]
		e.disarm(c)
		e.expire(now, c)
	}
	if len(e.timers) == 0 {
		return Never
	}
	return e.timers[0].deadline
}

// expire handles c's timer.
func (e *Engine) expire(now time.Duration, c *conn) {
	switch c.state {
	case StateSIDRReqSent:
		if c.retries > 0 {
			c.retries--
			e.stats.Retransmits.Add(1)
			e.sendMsg(now, c)
			return
		}
		e.stats.Timeouts.Add(1)
		e.emit(c, EventUnreachable, nil)
		e.free(c)
	case StateSIDRReqRcvd:
		e.stats.Timeouts.Add(1)
		e.free(c)
	case StateReqSent, StateMRAReqRcvd, StateRepSent, StateMRARepRcvd, StateDreqSent:
		if (c.state == StateRepSent || c.state == StateMRARepRcvd) && e.cfg.Handler.Received(c.id) {
			e.established(c) // COMM_EST: the RTU was lost, the data was not
			return
		}
		if c.retries > 0 {
			c.retries--
			e.stats.Retransmits.Add(1)
			e.sendMsg(now, c)
			return
		}
		e.stats.Timeouts.Add(1)
		if c.state == StateDreqSent {
			e.timewait(now, c)
			e.emit(c, EventDisconnected, nil)
			return
		}
		e.giveUp(c)
	case StateReqRcvd, StateRepRcvd:
		// The consumer did not answer within what the MRAs promised.
		e.stats.Timeouts.Add(1)
		e.giveUp(c)
	case StateTimewait:
		e.emit(c, EventTimewaitExit, nil)
		e.free(c)
	}
}

// giveUp ends c for want of an answer: REJ "timeout" with our GUID,
// EventUnreachable, and c is forgotten.
func (e *Engine) giveUp(c *conn) {
	e.sendREJFrom(c, mad.RejTimeout, e.guidARI(), nil)
	e.emit(c, EventUnreachable, nil)
	e.free(c)
}

func (e *Engine) established(c *conn) {
	e.disarm(c)
	c.state = StateEstablished
	e.emit(c, EventEstablished, nil)
}

// timewait moves c to time-wait, where it still answers duplicates, for
// its ACK time-out (the kernel's cm_enter_timewait). After our DREP it
// lasts the peer's DREQ time-out longer: the kernel's CM answers a DREQ
// for a connection it forgot, but an xroce process that exits right after
// its disconnect (Agent.Close) would leave a peer whose DREP was lost
// resending its DREQ for all its retries, so the connection must still be
// there, and the process, when the first resend comes.
func (e *Engine) timewait(now time.Duration, c *conn) {
	c.state = StateTimewait
	e.unindex(c)
	d := c.twait
	if c.answered {
		d += c.peerTimeout
	}
	// The peer's fields chose d (up to 2^23 ms each): bounded whatever
	// it asks for.
	e.arm(c, now+min(d, MaxTimewait))
	if !c.inTW {
		c.inTW, c.twPrev = true, e.twLast
		if e.twLast != nil {
			e.twLast.twNext = c
		} else {
			e.twFirst = c
		}
		e.twLast = c
	}
}

// MaxPeerWait bounds each wait whose length a peer's fields choose (up to
// 2^23 ms each): how long the CM waits between resends of its REP and
// DREQ (the REQ's Local CM Response Timeout) and the extra time an MRA
// asks for. It is the longest the kernel's own CM asks of a peer (its
// MRA's service time-out, CMA_CM_MRA_SETTING 24: 65.5 s); a peer that
// asks for more gets resends sooner than it asked, which it answers as
// duplicates, and a connection it leaves half-open is gone within
// (retries+1)·MaxPeerWait instead of days.
const MaxPeerWait = 65536 * time.Millisecond // ms(24)

// MaxTimewait bounds time-wait, which the peer's REQ or REP fields
// choose (ACK and CM response time-outs): enough for the first resend of
// a DREQ from a Linux 6.1 peer (8.2 s, see timewait), not the hours the
// fields can ask for.
const MaxTimewait = 16 * time.Second

// leaveTimewaitList takes c out of the engine's time-wait list.
func (e *Engine) leaveTimewaitList(c *conn) {
	if !c.inTW {
		return
	}
	if c.twPrev != nil {
		c.twPrev.twNext = c.twNext
	} else {
		e.twFirst = c.twNext
	}
	if c.twNext != nil {
		c.twNext.twPrev = c.twPrev
	} else {
		e.twLast = c.twPrev
	}
	c.inTW, c.twPrev, c.twNext = false, nil, nil
}

// Answering returns the connections in time-wait after answering the
// peer's DREQ (they answer its resent DREQs, see timewait), and when the
// last of those time-waits ends.
func (e *Engine) Answering() (n int, until time.Duration) {
	for c := e.twFirst; c != nil; c = c.twNext {
		if c.answered {
			n++
			until = max(until, c.deadline)
		}
	}
	return n, until
}

// Disconnecting returns the connections whose first DREQ is still
// waiting for its DREP, and when the last of those waits ends. Until
// then the peer may be sending a DREQ of its own (crossing DREQs, which
// the kernel's cm_dreq_handler takes in DREQ_SENT), and only a live CM
// answers it: the kernel's CM outlives the process that destroyed its
// id and answers from time-wait, an Agent answers while Close waits. A
// DREQ that had to be resent (lost, or a peer gone) is not waited for.
// It visits every connection: Agent.Close alone calls it, a few times.
func (e *Engine) Disconnecting() (n int, until time.Duration) {
	for _, c := range e.conns {
		if c.state == StateDreqSent && c.retries == c.maxRetry {
			n++
			until = max(until, c.deadline)
		}
	}
	return n, until
}

// unindex forgets c's peer comm ID and QPN: as the kernel's
// cm_enter_timewait, a connection in time-wait no longer makes a new REQ
// from the same peer QP stale (a client that comes back at once, with
// the same QP number, is served).
func (e *Engine) unindex(c *conn) {
	if !c.indexed {
		return
	}
	if e.byRemote[remoteKey{c.remoteID, c.remoteGUID}] == c {
		delete(e.byRemote, remoteKey{c.remoteID, c.remoteGUID})
	}
	if e.byQPN[remoteKey{c.remoteQPN, c.remoteGUID}] == c {
		delete(e.byQPN, remoteKey{c.remoteQPN, c.remoteGUID})
	}
	c.indexed = false
}

// ConnectRequest is what Connect sends: the REQ's fields (LocalCommID and
// LocalCAGUID are filled in) and the path's packet life time, which with
// the REQ's Remote CM Response Timeout sets how long each try waits.
type ConnectRequest struct {
	REQ            mad.REQFields
	PacketLifeTime uint8
}

// Connect sends a REQ to peer and returns the connection's ID; the answer
// comes as EventReply, EventRejected or EventUnreachable.
func (e *Engine) Connect(now time.Duration, peer *Peer, r *ConnectRequest) (uint32, error) {
	c, err := e.newConn()
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	c.active, c.peer, c.state = true, *peer, StateReqSent
	c.tid = e.tid(c)
	c.localQPN = r.REQ.LocalQPN
	c.maxRetry = r.REQ.MaxCMRetries
	c.timeout = 2*ms(r.PacketLifeTime) + ms(r.REQ.RemoteCMResponseTimeout)
	c.twait = ms(r.REQ.PrimaryLocalACKTimeout)
	// The passive side's CM resends its REP and DREQ every ms(the REQ's
	// Local CM Response Timeout) (cm_req_handler's timeout_ms).
	c.peerTimeout = ms(r.REQ.LocalCMResponseTimeout)
	f := r.REQ
	f.LocalCommID, f.LocalCAGUID = c.id, e.cfg.GUID
	mad.REQ(e.begin(c, c.tid, mad.AttrREQ)).Encode(&f)
	e.sendMsg(now, c)
	return c.id, nil
}

// conn returns connection id if it is in one of the states.
func (e *Engine) conn(id uint32, states ...State) (*conn, error) {
	c := e.conns[id]
	if c == nil || c.destroyed {
		return nil, fmt.Errorf("connection %#x: %w", id, ErrUnknown)
	}
	for _, s := range states {
		if c.state == s {
			return c, nil
		}
	}
	return nil, fmt.Errorf("connection %#x in %v: %w", id, c.state, ErrState)
}

// Accept answers a request (EventRequest) with a REP; LocalCommID,
// RemoteCommID and LocalCAGUID are filled in. The RTU, or data on the QP,
// gives EventEstablished.
func (e *Engine) Accept(now time.Duration, id uint32, rep *mad.REPFields) error {
	c, err := e.conn(id, StateReqRcvd)
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	e.disarm(c)
	e.leaveReqRcvd(c)
	c.localQPN = rep.LocalQPN
	f := *rep
	f.LocalCommID, f.RemoteCommID, f.LocalCAGUID = c.id, c.remoteID, e.cfg.GUID
	mad.REP(e.begin(c, c.tid, mad.AttrREP)).Encode(&f)
	c.state = StateRepSent
	e.sendMsg(now, c)
	return nil
}

// Reject refuses a request (EventRequest) or a reply (EventReply) with a
// REJ and forgets the connection.
func (e *Engine) Reject(now time.Duration, id uint32, reason mad.RejReason, ari, data []byte) error {
	c, err := e.conn(id, StateReqRcvd, StateRepRcvd)
	if err != nil {
		return fmt.Errorf("reject: %w", err)
	}
	e.sendREJFrom(c, reason, ari, data)
	e.free(c)
	return nil
}

// Establish completes an active connection (after EventReply, with the QP
// ready to send): it sends the RTU.
func (e *Engine) Establish(now time.Duration, id uint32, data []byte) error {
	c, err := e.conn(id, StateRepRcvd)
	if err != nil {
		return fmt.Errorf("establish: %w", err)
	}
	e.disarm(c)
	e.sendRTU(c, data)
	c.state = StateEstablished
	return nil
}

// Notify tells the engine that connection id's QP took its first packet
// (the kernel's ib_cm_notify with IB_EVENT_COMM_EST, IBTA §12.9.6.2): a
// passive connection waiting for the RTU is established at once
// (EventEstablished), its REP no longer resent; the RTU, if it comes,
// is a duplicate. Once established it does nothing; before the REP, or
// once the connection is ending, it fails with ErrState (ErrUnknown when
// the connection is gone).
func (e *Engine) Notify(now time.Duration, id uint32) error {
	c, err := e.conn(id, StateRepSent, StateMRARepRcvd, StateEstablished)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	if c.state != StateEstablished {
		e.established(c)
	}
	return nil
}

// Disconnect sends a DREQ on an established connection (EventDisconnected
// follows), or answers the peer's DREQ with a DREP; either way the
// connection ends in time-wait.
func (e *Engine) Disconnect(now time.Duration, id uint32, data []byte) error {
	c, err := e.conn(id, StateEstablished, StateRepSent, StateMRARepRcvd, StateDreqRcvd)
	if err != nil {
		return fmt.Errorf("disconnect: %w", err)
	}
	e.disconnect(now, c, data)
	return nil
}

func (e *Engine) disconnect(now time.Duration, c *conn, data []byte) {
	e.disarm(c)
	if c.state == StateDreqRcvd {
		e.sendDREP(&c.peer, c.dreqTID, c.id, c.remoteID, data)
		c.answered = true
		e.timewait(now, c)
		return
	}
	// A DREQ carries the sender's own TID (cm_form_tid).
	tid := e.tid(c)
	mad.DREQ(e.begin(c, tid, mad.AttrDREQ)).Encode(&mad.DREQFields{LocalCommID: c.id, RemoteCommID: c.remoteID,
		RemoteQPN: c.remoteQPN, PrivateData: data})
	c.state = StateDreqSent
	e.sendMsg(now, c)
}

// Destroy lets go of a connection as the kernel's ib_destroy_cm_id does:
// a pending REQ is withdrawn with REJ "timeout", a request or reply not
// yet answered is refused (REJ 28), an established connection is sent a
// DREQ and a received DREQ its DREP; what remains finishes time-wait
// without events.
func (e *Engine) Destroy(now time.Duration, id uint32) {
	c := e.conns[id]
	if c == nil || c.destroyed {
		return
	}
	switch c.state {
	case StateReqSent, StateMRAReqRcvd:
		e.sendREJFrom(c, mad.RejTimeout, e.guidARI(), nil)
		e.free(c)
		return
	case StateSIDRReqSent:
		e.free(c)
		return
	case StateSIDRReqRcvd:
		e.sendSIDRREP(c, &mad.SIDRREPFields{Status: uint8(mad.SIDRReject)})
		e.free(c)
		return
	case StateReqRcvd, StateRepRcvd, StateRepSent, StateMRARepRcvd:
		e.sendREJFrom(c, mad.RejConsumerDefined, nil, nil)
		e.free(c)
		return
	case StateEstablished, StateDreqRcvd:
		e.disconnect(now, c, nil)
	}
	c.destroyed = true
}

// fromPeer reports whether a message came from c's peer: every message
// that names a connection is checked against the address it came from
// before it changes anything (the comm IDs alone are 32 bits a blind
// attacker may guess).
func fromPeer(c *conn, from *Peer) bool { return c.peer.Addr.Unmap() == from.Addr.Unmap() }

// validPKey reports whether a REQ's P_Key is in RoCE's P_Key table, which
// holds the default 0xFFFF alone; the lookup (ib_find_cached_pkey)
// compares the low 15 bits, so 0x7FFF is found too and 0x0000, an
// invalid P_Key, never is.
func validPKey(k uint16) bool { return k&0x7fff == 0x7fff }

// Input handles a MAD received at now from peer (b is the whole datagram
// payload; a MAD is its first 256 bytes).
func (e *Engine) Input(now time.Duration, b []byte, from *Peer) {
	m, err := mad.Parse(b)
	if err != nil || m.CheckCM() != nil {
		e.stats.RxMalformed.Add(1)
		return
	}
	i, ok := AttrIndex(m.AttrID())
	if !ok {
		e.stats.RxUnsupported.Add(1)
		return
	}
	e.stats.Rx[i].Add(1)
	switch m.AttrID() {
	case mad.AttrREQ:
		e.onREQ(now, m, from)
	case mad.AttrREP:
		e.onREP(now, m, from)
	case mad.AttrRTU:
		e.onRTU(m, from)
	case mad.AttrREJ:
		e.onREJ(now, m, from)
	case mad.AttrMRA:
		e.onMRA(now, m, from)
	case mad.AttrDREQ:
		e.onDREQ(now, m, from)
	case mad.AttrDREP:
		e.onDREP(now, m, from)
	case mad.AttrSIDRREQ:
		e.onSIDRREQ(now, m, from)
	case mad.AttrSIDRREP:
		e.onSIDRREP(m, from)
	}
}

func (e *Engine) onREQ(now time.Duration, m mad.MAD, from *Peer) {
	r := mad.REQ(m.Body())
	guid := r.LocalCAGUID()
	if c := e.byRemote[remoteKey{r.LocalCommID(), guid}]; c != nil {
		e.stats.RxDuplicates.Add(1)
		if c.state == StateReqRcvd {
			e.sendMRA(c, mad.MsgREQ)
		}
		return
	}
	if old := e.byQPN[remoteKey{r.LocalQPN(), guid}]; old != nil {
		// The peer's QP is still ours in another connection: the new one
		// is stale, and so is the old one (cm_match_req).
		// Only the old connection's own peer can end it this way: a REQ
		// from elsewhere naming its QPN is refused and changes nothing.
		e.rejectREQ(from, m, mad.RejStaleConn, nil)
		if old.state == StateEstablished && fromPeer(old, from) {
			e.disconnect(now, old, nil)
		}
		return
	}
	l := e.listeners[r.ServiceID()]
	if l == nil {
		e.rejectREQ(from, m, mad.RejInvalidServiceID, nil)
		return
	}
	if !validPKey(r.PKey()) {
		// cm_init_av_by_path finds no such P_Key in the port's table
		// (RoCE's holds 0xFFFF alone): REJ 12 with the GID it has.
		e.stats.RxBadPKey.Add(1)
		gid := from.Local.As16()
		e.rejectREQ(from, m, mad.RejInvalidGID, gid[:])
		return
	}
	if l.pending >= e.cfg.Backlog {
		e.stats.Refused.Add(1)
		e.rejectREQ(from, m, mad.RejNoResources, nil)
		return
	}
	c, err := e.newConn()
	if err != nil {
		e.stats.Refused.Add(1)
		e.rejectREQ(from, m, mad.RejNoResources, nil)
		return
	}
	c.peer, c.state, c.tid = *from, StateReqRcvd, m.TID()
	c.remoteID, c.remoteGUID, c.remoteQPN = r.LocalCommID(), guid, r.LocalQPN()
	c.maxRetry = r.MaxCMRetries()
	c.timeout = min(ms(r.LocalCMResponseTimeout()), MaxPeerWait)
	c.twait = ms(r.PrimaryLocalACKTimeout())
	// The active side's CM resends its DREQ as its REQ (ib_send_cm_req's
	// timeout_ms): twice its path's packet life time, which its REQ's
	// Local ACK Timeout exceeds by one at least (cm_ack_timeout), plus
	// the Remote CM Response Timeout.
	c.peerTimeout = 2*ms(max(r.PrimaryLocalACKTimeout(), 1)-1) + ms(r.RemoteCMResponseTimeout())
	c.lst = l
	l.pending++
	e.index(c)
	e.arm(c, now+ms(e.cfg.MRATimeout))
	e.emit(c, EventRequest, func(ev *Event) { ev.REQ, ev.PrivateData = r, r.PrivateData() })
}

func (e *Engine) onREP(now time.Duration, m mad.MAD, from *Peer) {
	r := mad.REP(m.Body())
	c := e.conns[r.RemoteCommID()]
	if c == nil || !c.active || !fromPeer(c, from) {
		e.stats.RxUnmatched.Add(1)
		return
	}
	switch c.state {
	case StateReqSent, StateMRAReqRcvd:
	case StateRepRcvd:
		if c.remoteID == r.LocalCommID() {
			e.stats.RxDuplicates.Add(1)
			e.sendMRA(c, mad.MsgREP)
		}
		return
	case StateEstablished:
		if c.remoteID == r.LocalCommID() {
			e.stats.RxDuplicates.Add(1)
			e.sendRTU(c, nil)
		}
		return
	default:
		e.stats.RxUnmatched.Add(1)
		return
	}
	guid := r.LocalCAGUID()
	if other := e.byRemote[remoteKey{r.LocalCommID(), guid}]; other != nil {
		e.sendREJ(from, c.tid, c.id, r.LocalCommID(), mad.MsgREP, mad.RejStaleConn, nil, nil)
		return
	}
	if old := e.byQPN[remoteKey{r.LocalQPN(), guid}]; old != nil {
		e.sendREJ(from, c.tid, c.id, r.LocalCommID(), mad.MsgREP, mad.RejStaleConn, nil, nil)
		if old.state == StateEstablished && fromPeer(old, from) {
			e.disconnect(now, old, nil)
		}
		return
	}
	e.disarm(c)
	c.remoteID, c.remoteGUID, c.remoteQPN = r.LocalCommID(), guid, r.LocalQPN()
	e.index(c)
	c.state = StateRepRcvd
	e.arm(c, now+ms(e.cfg.MRATimeout))
	e.emit(c, EventReply, func(ev *Event) { ev.REP, ev.PrivateData = r, r.PrivateData() })
}

// peerConn returns the connection a message from the peer names with its
// own (local) and our (remote) comm IDs, if it came from that
// connection's peer.
func (e *Engine) peerConn(local, remote uint32, from *Peer) *conn {
	c := e.conns[remote]
	if c == nil || c.remoteID != local || !fromPeer(c, from) {
		e.stats.RxUnmatched.Add(1)
		return nil
	}
	return c
}

func (e *Engine) onRTU(m mad.MAD, from *Peer) {
	r := mad.RTU(m.Body())
	c := e.peerConn(r.LocalCommID(), r.RemoteCommID(), from)
	if c == nil {
		return
	}
	if c.state != StateRepSent && c.state != StateMRARepRcvd {
		e.stats.RxDuplicates.Add(1)
		return
	}
	e.disarm(c)
	c.state = StateEstablished
	e.emit(c, EventEstablished, func(ev *Event) { ev.PrivateData = r.PrivateData() })
}

func (e *Engine) onREJ(now time.Duration, m mad.MAD, from *Peer) {
	r := mad.REJ(m.Body())
	var c *conn
	if r.MsgRejected() == mad.MsgREQ {
		// The rejecter may not have given its comm ID (it sends 0 when it
		// keeps no state).
		if c = e.conns[r.RemoteCommID()]; c != nil && c.state != StateReqSent && c.state != StateMRAReqRcvd {
			c = nil
		}
	} else if c = e.conns[r.RemoteCommID()]; c != nil && c.remoteID != r.LocalCommID() {
		c = nil
	}
	if c == nil || !fromPeer(c, from) || c.state == StateTimewait || c.state == StateIdle || c.state == StateDreqRcvd {
		e.stats.RxUnmatched.Add(1)
		return
	}
	reason := r.Reason()
	e.emit(c, EventRejected, func(ev *Event) {
		ev.Reason, ev.ARI, ev.PrivateData = reason, r.Fields().ARI, r.PrivateData()
	})
	// As cm_rej_handler: a connection that got as far as the peer's REP
	// (or was stale) waits out time-wait, the others are forgotten.
	switch {
	case c.state == StateEstablished, c.state == StateDreqSent, c.state == StateRepRcvd, reason == mad.RejStaleConn:
		e.disarm(c)
		e.timewait(now, c)
	default:
		e.free(c)
	}
}

func (e *Engine) onMRA(now time.Duration, m mad.MAD, from *Peer) {
	r := mad.MRA(m.Body())
	c := e.conns[r.RemoteCommID()]
	if c == nil || !fromPeer(c, from) {
		e.stats.RxUnmatched.Add(1)
		return
	}
	switch {
	case r.MsgMRAed() == mad.MsgREQ && c.state == StateReqSent:
		c.state = StateMRAReqRcvd
	case r.MsgMRAed() == mad.MsgREP && c.state == StateRepSent && c.remoteID == r.LocalCommID():
		c.state = StateMRARepRcvd
	default:
		e.stats.RxDuplicates.Add(1)
		return
	}
	// The peer needs up to its service time-out more (§12.6.6), bounded
	// as every wait the peer chooses.
	e.arm(c, now+min(ms(r.ServiceTimeout()), MaxPeerWait)+c.timeout)
}

func (e *Engine) onDREQ(now time.Duration, m mad.MAD, from *Peer) {
	r := mad.DREQ(m.Body())
	c := e.peerConn(r.LocalCommID(), r.RemoteCommID(), from)
	if c == nil {
		// Nothing to disconnect: say it is done (cm_issue_drep).
		e.sendDREP(from, m.TID(), r.RemoteCommID(), r.LocalCommID(), nil)
		return
	}
	if r.RemoteQPN() != c.localQPN {
		e.stats.RxUnmatched.Add(1)
		return
	}
	switch c.state {
	case StateEstablished, StateDreqSent, StateRepSent, StateMRARepRcvd:
	case StateTimewait:
		e.stats.RxDuplicates.Add(1)
		e.sendDREP(&c.peer, m.TID(), c.id, c.remoteID, nil)
		return
	default:
		e.stats.RxDuplicates.Add(1)
		return
	}
	e.disarm(c)
	crossing := c.state == StateDreqSent
	c.state, c.dreqTID, c.crossed = StateDreqRcvd, m.TID(), crossing
	if c.destroyed || crossing {
		// Our DREQ crossed the peer's (or nobody is left to decide):
		// answer it at once; the connection ends in time-wait.
		e.disconnect(now, c, nil)
		if crossing {
			e.emit(c, EventDisconnected, nil)
		}
		return
	}
	e.emit(c, EventDisconnectRequest, func(ev *Event) { ev.PrivateData = r.PrivateData() })
}

func (e *Engine) onDREP(now time.Duration, m mad.MAD, from *Peer) {
	r := mad.DREP(m.Body())
	c := e.peerConn(r.LocalCommID(), r.RemoteCommID(), from)
	if c == nil {
		return
	}
	if c.state != StateDreqSent {
		if c.state == StateTimewait && c.crossed && c.answered {
			// The DREP to our crossing DREQ: the peer had our DREQ,
			// which ends its own DREQ's resends (as cm_dreq_handler
			// cancels the DREQ of an id in DREQ_SENT), so none comes
			// for time-wait to answer.
			c.answered = false
		}
		e.stats.RxDuplicates.Add(1)
		return
	}
	e.disarm(c)
	e.timewait(now, c)
	e.emit(c, EventDisconnected, func(ev *Event) { ev.PrivateData = r.PrivateData() })
}

// SIDRQuery sends a SIDR_REQ (IBTA §12.11), resent every timeout up to
// retries times; the answer comes as EventSIDRReply or EventUnreachable.
// RequestID is filled in.
func (e *Engine) SIDRQuery(now time.Duration, peer *Peer, r *mad.SIDRREQFields, timeout time.Duration, retries uint8) (uint32, error) {
	c, err := e.newConn()
	if err != nil {
		return 0, fmt.Errorf("sidr: %w", err)
	}
	c.active, c.peer, c.state = true, *peer, StateSIDRReqSent
	c.tid = e.tid(c)
	c.maxRetry, c.timeout = retries, timeout
	f := *r
	f.RequestID = c.id
	mad.SIDRREQ(e.begin(c, c.tid, mad.AttrSIDRREQ)).Encode(&f)
	e.sendMsg(now, c)
	return c.id, nil
}

// SIDRReply answers a SIDR request (EventSIDRRequest) with a SIDR_REP;
// RequestID and ServiceID are filled in.
func (e *Engine) SIDRReply(now time.Duration, id uint32, rep *mad.SIDRREPFields) error {
	c, err := e.conn(id, StateSIDRReqRcvd)
	if err != nil {
		return fmt.Errorf("sidr reply: %w", err)
	}
	e.sendSIDRREP(c, rep)
	e.free(c)
	return nil
}

func (e *Engine) sendSIDRREP(c *conn, rep *mad.SIDRREPFields) {
	m := e.reply(c.tid, mad.AttrSIDRREP)
	f := *rep
	f.RequestID, f.ServiceID = c.remoteID, c.serviceID
	mad.SIDRREP(m.Body()).Encode(&f)
	e.send(&c.peer, m)
}

func (e *Engine) onSIDRREQ(now time.Duration, m mad.MAD, from *Peer) {
	r := mad.SIDRREQ(m.Body())
	if e.sidrs[sidrKey{r.RequestID(), from.Addr}] != nil {
		e.stats.RxDuplicates.Add(1) // the consumer is deciding
		return
	}
	answer := func(st mad.SIDRStatus) {
		rep := e.reply(m.TID(), mad.AttrSIDRREP)
		mad.SIDRREP(rep.Body()).Encode(&mad.SIDRREPFields{RequestID: r.RequestID(), Status: uint8(st), ServiceID: r.ServiceID()})
		e.send(from, rep)
	}
	l := e.listeners[r.ServiceID()]
	if l == nil {
		answer(mad.SIDRUnsupported)
		return
	}
	if l.pending >= e.cfg.Backlog {
		e.stats.Refused.Add(1)
		answer(mad.SIDRNoQP)
		return
	}
	c, err := e.newConn()
	if err != nil {
		e.stats.Refused.Add(1)
		answer(mad.SIDRNoQP)
		return
	}
	c.peer, c.state, c.tid, c.remoteID, c.serviceID = *from, StateSIDRReqRcvd, m.TID(), r.RequestID(), r.ServiceID()
	c.lst = l
	l.pending++
	e.sidrs[sidrKey{c.remoteID, from.Addr}] = c
	e.arm(c, now+ms(e.cfg.MRATimeout))
	e.emit(c, EventSIDRRequest, func(ev *Event) { ev.SIDRREQ, ev.PrivateData = r, r.PrivateData() })
}

func (e *Engine) onSIDRREP(m mad.MAD, from *Peer) {
	r := mad.SIDRREP(m.Body())
	c := e.conns[r.RequestID()]
	if c == nil || c.state != StateSIDRReqSent || !fromPeer(c, from) {
		e.stats.RxUnmatched.Add(1)
		return
	}
	e.emit(c, EventSIDRReply, func(ev *Event) { ev.SIDRREP, ev.PrivateData = r, r.PrivateData() })
	e.free(c)
}
