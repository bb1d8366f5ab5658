package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// This file is rsocket's stream protocol (librdmacm's rsocket.c, on the
// wire since 2012) as pure state: no verbs, no locks, no clock. The Conn
// binding in conn_rs.go posts what it asks for and feeds it completions.
//
// Each side offers the other three things in the connect data: a receive
// ring (data_buf: the first half of it), a target SGL (an array of
// rsSGLSize 16-byte entries {addr, key, length} that the peer may RDMA
// WRITE), and a number of receive requests (credits). Every message is an
// RDMA WRITE WITH IMMEDIATE that consumes one receive request; the
// immediate's top three bits are the operation:
//
//   - DATA (0): the low 29 bits are the byte count, written at the
//     sender's current target entry, which it then advances; an entry used
//     up moves the sender to the next one.
//   - SGL (4): the low bits are a new send limit (the receiver's count of
//     consumed DATA messages plus its receive queue size). When a free half
//     of the receiver's ring goes with it, the same WRITE carries the
//     16-byte entry for it into the sender's target SGL, at entries 1, 0,
//     1, … in turn, in the byte order the sender's connect data asked for
//     (the NET flag: big-endian; otherwise little-endian).
//   - CTRL (7): DISCONNECT (0) or SHUTDOWN (2) of the writing direction;
//     both without payload. KEEPALIVE (1) travels as a plain zero-length
//     RDMA WRITE, which consumes nothing at the receiver.
//
// Zero-length messages carry no valid address or R_Key: a DMA length of
// zero touches no memory, so the responder checks no R_Key for them (as
// rxe's check_rkey does, and package qp's responder).
//
// Flow control is by counters, as in rsocket.c. A sender posts DATA while
// it has fewer than the peer's limit in flight (sseqNo != sseqComp), a free
// send request, at least rsMinXfer bytes of staging and room in its target
// entry. Control messages have their own rsCtrlCredits send requests. A
// receiver grants more when half its ring is free again or half its
// receive queue was consumed since its last grant. Receive requests are
// re-posted as their completions are handled; a message that finds none
// meets an RNR NAK and is retried, as rsocket expects (RNR retry 7).

// rsocket's protocol constants.
const (
	rsVersion      = 1
	rsFlagNet      = 1 << 0 // the sender of the connect data wants SGL updates big-endian
	rsFlagIOMap    = 1 << 1 // the target SGL is followed by an iomap (always set; its size may be 0)
	rsConnDataSize = 40
	rsSGLSize      = 2  // entries of the target SGL each side offers
	rsSGESize      = 16 // one entry: addr (8), key (4), length (4)
	rsMinXfer      = 2048
	rsMaxXfer      = 64 << 10
	rsCtrlCredits  = 4   // send requests kept for control messages
	rsQueueSize    = 384 // send and receive queue size (rsocket's default)
	rsMaxEntries   = 1 << 12
)

// Operations in the top three bits of the immediate.
const (
	rsOpData     = 0
	rsOpSGL      = 4
	rsOpIOMapSGL = 6
	rsOpCtrl     = 7
)

// Control messages (CTRL's low bits).
const (
	rsCtrlDisconnect = 0
	rsCtrlKeepalive  = 1
	rsCtrlShutdown   = 2
)

// rsMsg packs an operation and its 29 bits of data.
func rsMsg(op, data uint32) uint32 { return op<<29 | data&(1<<29-1) }

// rsSGE is one entry of a target SGL, or a buffer offered in connect data.
type rsSGE struct {
	addr   uint64
	key    uint32
	length uint32
}

// put stores e in the byte order o.
func (e rsSGE) put(b []byte, o binary.ByteOrder) {
	o.PutUint64(b, e.addr)
	o.PutUint32(b[8:], e.key)
	o.PutUint32(b[12:], e.length)
}

func getSGE(b []byte, o binary.ByteOrder) rsSGE {
	return rsSGE{addr: o.Uint64(b), key: o.Uint32(b[8:]), length: o.Uint32(b[12:])}
}

// rsConnData is rsocket's connect data (struct rs_conn_data, 40 bytes,
// big-endian), carried after the rdma_cm header in the REQ and alone in the
// REP.
type rsConnData struct {
	flags      uint8
	credits    uint16 // the sender's receive queue size
	iomapScale uint8  // log2 of the iomap's entries (0: none)
	targetSGL  rsSGE  // length is the number of entries
	dataBuf    rsSGE  // the first half of the sender's ring
}

// ErrNotRsocket is wrapped by the errors of a connect whose data is not
// rsocket's.
var ErrNotRsocket = errors.New("stream: not rsocket connect data")

func (d *rsConnData) put(b []byte) {
	clear(b[:rsConnDataSize])
	b[0] = rsVersion
	b[1] = d.flags
	binary.BigEndian.PutUint16(b[2:], d.credits)
	b[7] = d.iomapScale
	d.targetSGL.put(b[8:], binary.BigEndian)
	d.dataBuf.put(b[24:], binary.BigEndian)
}

// parseRSConnData reads connect data, refusing what rsocket.c refuses (a
// version other than 1) and what would break this side (no target entries
// or a huge SGL, no credits, an empty buffer).
func parseRSConnData(b []byte) (rsConnData, error) {
	if len(b) < rsConnDataSize {
		return rsConnData{}, fmt.Errorf("%w: %d bytes", ErrNotRsocket, len(b))
	}
	if b[0] != rsVersion {
		return rsConnData{}, fmt.Errorf("%w: version %d", ErrNotRsocket, b[0])
	}
	d := rsConnData{flags: b[1], credits: binary.BigEndian.Uint16(b[2:]), iomapScale: b[7],
		targetSGL: getSGE(b[8:], binary.BigEndian), dataBuf: getSGE(b[24:], binary.BigEndian)}
	switch {
	case d.credits == 0:
		return d, fmt.Errorf("%w: no credits", ErrNotRsocket)
	case d.targetSGL.length == 0 || d.targetSGL.length > rsMaxEntries:
		return d, fmt.Errorf("%w: target SGL of %d entries", ErrNotRsocket, d.targetSGL.length)
	case d.dataBuf.length == 0:
		return d, fmt.Errorf("%w: empty data buffer", ErrNotRsocket)
	}
	return d, nil
}

// byteOrder is the order SGL updates are stored in for a side whose
// connect data has flags.
func byteOrder(flags uint8) binary.ByteOrder {
	if flags&rsFlagNet != 0 {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// errRSProtocol is wrapped when the peer breaks the protocol.
var errRSProtocol = errors.New("rsocket protocol violation")

// rsState is one side of an rsocket connection.
type rsState struct {
	rqSize, sqSize int
	ringSize       uint32 // the receive ring (rbuf)
	stageSize      uint32 // the send staging buffer (sbuf); control slots follow it
	ringAddr       uint64 // the ring as the peer addresses it
	ringKey        uint32
	flags          uint8            // ours, as sent in the connect data
	peerOrder      binary.ByteOrder // how the peer wants its SGL updates

	// Connection state: readable until the peer shuts down its writing
	// side, writable until we shut down ours, connected until either
	// side disconnects or the QP fails.
	readable, writable, connected bool

	// Send side.
	sseqNo, sseqComp uint16 // DATA messages sent; the peer's limit
	sqeAvail         int    // send requests free for DATA
	stageAvail       uint32 // staging bytes free
	stageOff         uint32 // where the next DATA is staged
	target           [rsSGLSize]rsSGE
	targetIdx        int // the entry DATA goes to
	nextSlot         int // the entry the peer's next SGL update fills
	ctrlSeq, ctrlMax uint32
	remoteSGL        rsSGE // the peer's target SGL: where our updates go
	remoteIdx        uint32

	// Receive side: sizes of DATA messages not yet read, in a ring of
	// rqSize+1.
	rmsg             []uint32
	rmsgHead, rmsgTl int
	rseqNo, rseqComp uint16 // DATA messages read; the limit last granted minus half the queue
	ringOff          uint32 // where the next byte to read is
	ringFree         uint32 // the start of the half to offer next
	ringAvail        uint32 // bytes read and not yet offered
}

// newRSState makes the state for a ring of ringSize bytes at ringAddr
// (key ringKey) and a staging buffer of stageSize bytes; big says whether
// this side asks for SGL updates big-endian.
func newRSState(ringSize, stageSize uint32, ringAddr uint64, ringKey uint32, big bool) *rsState {
	s := &rsState{rqSize: rsQueueSize, sqSize: rsQueueSize, ringSize: ringSize, stageSize: stageSize,
		ringAddr: ringAddr, ringKey: ringKey, flags: rsFlagIOMap,
		rmsg: make([]uint32, rsQueueSize+1)}
	if big {
		s.flags |= rsFlagNet
	}
	s.ctrlMax = rsCtrlCredits
	s.sqeAvail = s.sqSize - rsCtrlCredits
	s.stageAvail = stageSize
	s.ringFree, s.ringAvail = ringSize/2, ringSize/2
	s.rseqComp = uint16(s.rqSize / 2)
	s.nextSlot = 1
	return s
}

// connData is this side's connect data, offering its target SGL at
// tgtAddr (key tgtKey).
func (s *rsState) connData(tgtAddr uint64, tgtKey uint32) rsConnData {
	return rsConnData{flags: s.flags, credits: uint16(s.rqSize),
		targetSGL: rsSGE{addr: tgtAddr, key: tgtKey, length: rsSGLSize},
		dataBuf:   rsSGE{addr: s.ringAddr, key: s.ringKey, length: s.ringSize / 2}}
}

// connect takes the peer's connect data: the connection is established.
func (s *rsState) connect(peer rsConnData) {
	s.remoteSGL, s.remoteIdx = peer.targetSGL, 1%peer.targetSGL.length
	s.peerOrder = byteOrder(peer.flags)
	s.target[0] = peer.dataBuf
	s.sseqComp = peer.credits
	s.readable, s.writable, s.connected = true, true, true
}

// canSend says whether a DATA message may be posted now.
func (s *rsState) canSend() bool {
	return s.sqeAvail > 0 && s.stageAvail >= rsMinXfer && s.sseqNo != s.sseqComp &&
		s.target[s.targetIdx].length != 0
}

// rsData is a DATA message to post: its payload is staged at
// stage[off:off+n1] and, when it wraps, stage[:n2].
type rsData struct {
	off, n1, n2 uint32
	addr        uint64
	key         uint32
	imm         uint32
}

// nextData takes a DATA message of at most want bytes (canSend must hold):
// it claims staging and target room and counts the message.
func (s *rsState) nextData(want int) rsData {
	n := min(uint32(want), s.stageAvail, s.target[s.targetIdx].length)
	t := &s.target[s.targetIdx]
	d := rsData{off: s.stageOff, addr: t.addr, key: t.key, imm: rsMsg(rsOpData, n)}
	d.n1 = min(n, s.stageSize-s.stageOff)
	d.n2 = n - d.n1
	s.stageOff = (s.stageOff + n) % s.stageSize
	t.addr += uint64(n)
	t.length -= n
	if t.length == 0 {
		s.targetIdx = (s.targetIdx + 1) % rsSGLSize
	}
	s.sseqNo++
	s.sqeAvail--
	s.stageAvail -= n
	return d
}

// sendDone handles the completion of the send whose work request ID is
// the message it carried; ok is its status. A failed send breaks the
// connection.
func (s *rsState) sendDone(msg uint32, ok bool) {
	switch msg >> 29 {
	case rsOpSGL:
		s.ctrlMax++
	case rsOpCtrl:
		s.ctrlMax++
		if msg&(1<<29-1) == rsCtrlDisconnect {
			s.connected = false
		}
	default:
		s.sqeAvail++
		s.stageAvail += msg & (1<<29 - 1)
	}
	if !ok {
		s.disconnect()
	}
}

// disconnect ends the connection: nothing more is sent or expected.
func (s *rsState) disconnect() {
	s.readable, s.writable, s.connected = false, false, false
}

// recv handles a receive completion: imm is the immediate (hasImm false
// for a message without one), n its byte count, and targetMem our target
// SGL as the peer wrote it (read only for an SGL update). It returns an
// error wrapping errRSProtocol when the peer broke the protocol.
func (s *rsState) recv(imm uint32, hasImm bool, n uint32, targetMem []byte) error {
	if !hasImm {
		return fmt.Errorf("%w: a message without immediate", errRSProtocol)
	}
	data := imm & (1<<29 - 1)
	switch imm >> 29 {
	case rsOpData:
		if n != data {
			return fmt.Errorf("%w: DATA of %d bytes says %d", errRSProtocol, n, data)
		}
		if n == 0 {
			return nil // nothing to read; the receive request is back
		}
		next := (s.rmsgTl + 1) % len(s.rmsg)
		if next == s.rmsgHead {
			return fmt.Errorf("%w: more DATA than the credits granted", errRSProtocol)
		}
		s.rmsg[s.rmsgTl], s.rmsgTl = n, next
	case rsOpSGL:
		s.sseqComp = uint16(data)
		switch n {
		case 0:
		case rsSGESize:
			s.target[s.nextSlot] = getSGE(targetMem[s.nextSlot*rsSGESize:], byteOrder(s.flags))
			s.nextSlot = (s.nextSlot + 1) % rsSGLSize
		default:
			return fmt.Errorf("%w: SGL update of %d bytes", errRSProtocol, n)
		}
	case rsOpIOMapSGL:
		// We offer no iomap, so none is updated; nothing to do.
	case rsOpCtrl:
		switch data {
		case rsCtrlDisconnect:
			s.disconnect()
		case rsCtrlShutdown:
			if s.writable {
				s.readable = false
			} else {
				s.disconnect()
			}
		}
	default:
		return fmt.Errorf("%w: operation %d", errRSProtocol, imm>>29)
	}
	return nil
}

// haveData says whether bytes are waiting to be read.
func (s *rsState) haveData() bool { return s.rmsgHead != s.rmsgTl }

// read copies waiting bytes from ring (the receive ring's memory) into p
// and returns how many.
func (s *rsState) read(p []byte, ring []byte) int {
	done := 0
	for done < len(p) && s.haveData() {
		n := s.rmsg[s.rmsgHead]
		if left := uint32(len(p) - done); left < n {
			s.rmsg[s.rmsgHead] -= left
			n = left
		} else {
			s.rseqNo++
			s.rmsgHead = (s.rmsgHead + 1) % len(s.rmsg)
		}
		for n > 0 {
			k := min(n, s.ringSize-s.ringOff)
			copy(p[done:], ring[s.ringOff:s.ringOff+k])
			done += int(k)
			n -= k
			s.ringOff = (s.ringOff + k) % s.ringSize
			s.ringAvail += k
		}
	}
	return done
}

// ctrlAvail says whether a control message may be posted.
func (s *rsState) ctrlAvail() bool { return s.ctrlSeq != s.ctrlMax }

// wantCredits says whether a grant is due (rsocket's rs_give_credits).
func (s *rsState) wantCredits() bool {
	return (s.ringAvail >= s.ringSize/2 || int16(s.rseqNo-s.rseqComp) >= 0) && s.ctrlAvail() && s.connected
}

// rsCtrl is a control message to post: a zero-length WRITE WITH IMMEDIATE
// (or, for a keepalive, a plain zero-length WRITE) unless payload, when
// the 16 bytes at stage slot go to addr with key.
type rsCtrl struct {
	msg     uint32
	payload bool
	slot    int // control slot of the staging buffer holding the payload
	addr    uint64
	key     uint32
}

// credits takes a grant (wantCredits must hold): the new send limit and,
// if half the ring is free, that half, whose entry it stores at the
// returned slot of ctrlSlots (rsCtrlCredits slots of rsSGESize bytes).
func (s *rsState) credits(ctrlSlots []byte) rsCtrl {
	s.ctrlSeq++
	s.rseqComp = s.rseqNo + uint16(s.rqSize/2)
	c := rsCtrl{msg: rsMsg(rsOpSGL, uint32(s.rseqNo)+uint32(s.rqSize))}
	if s.ringAvail < s.ringSize/2 {
		return c
	}
	c.payload, c.slot = true, int(s.ctrlSeq%rsCtrlCredits)
	rsSGE{addr: s.ringAddr + uint64(s.ringFree), key: s.ringKey, length: s.ringSize / 2}.
		put(ctrlSlots[c.slot*rsSGESize:], s.peerOrder)
	c.addr, c.key = s.remoteSGL.addr+uint64(s.remoteIdx)*rsSGESize, s.remoteSGL.key
	s.ringAvail -= s.ringSize / 2
	s.ringFree = (s.ringFree + s.ringSize/2) % s.ringSize
	s.remoteIdx = (s.remoteIdx + 1) % s.remoteSGL.length
	return c
}

// shutdown closes the writing side (both: also the reading side) and
// returns the control message that says so, if one is due; the caller
// posts it once ctrlAvail holds (take it with takeCtrl).
func (s *rsState) shutdown(both bool) (ctrl uint32, due bool) {
	if !s.connected {
		return 0, false
	}
	switch {
	case both:
		s.readable, s.writable = false, false
		return rsCtrlDisconnect, true
	case !s.writable:
		return 0, false // already shut down
	}
	s.writable = false
	if s.readable {
		return rsCtrlShutdown, true
	}
	return rsCtrlDisconnect, true
}

// takeCtrl counts a control message of kind ctrl posted.
func (s *rsState) takeCtrl(ctrl uint32) rsCtrl {
	s.ctrlSeq++
	return rsCtrl{msg: rsMsg(rsOpCtrl, ctrl)}
}

// allSendsDone says whether every posted send has completed. It counts
// completions only, whatever the state: a peer's SHUTDOWN that arrives
// after ours leaves the rsocket disconnected while our last DATA may still
// be on its way (lost and being resent), and the QP must stay up until it
// is acknowledged; when the connection breaks, the QP's flushed sends
// complete too.
func (s *rsState) allSendsDone() bool {
	return int(s.ctrlMax-s.ctrlSeq)+s.sqeAvail == s.sqSize
}
