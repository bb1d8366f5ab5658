// The direct path (see the package doc): a reader's ADVERT of its buffer,
// the writer's choice between it and the ring (the switching rules), the
// WRITE into the advertised buffer, and DECLINE and WITHDRAW. Read, Write
// and handleLocked in conn.go call into it.

package stream

import (
	"encoding/binary"
	"time"

	"github.com/xroce/xroce/roce"
)

// The writer's switching rules (see the package doc).
const (
	minDirect       = 32 << 10               // a Write with less left declines an advert and uses the ring
	holdMin         = 256 << 10              // a Write with this much left may hold for an advert
	holdGrace       = 500 * time.Microsecond // at least; twice the reader's usual time between Reads
	maxHoldGrace    = 10 * time.Millisecond
	holdMax         = 50 * time.Millisecond
	maxAdvBackoff   = 64   // Reads that skip advertising, at most, after declines
	maxProbeBackoff = 1024 // Writes that do not probe, at most, after holds that timed out
)

// advert is a reader's buffer offered to the writer.
type advert struct {
	addr    uint64
	rkey, n uint32
	head    uint64 // the reader's ring position when it advertised
}

// advertLocked registers p (or finds it in the cache) and sends an ADVERT
// for it, unless the state changed meanwhile or registration fails (then
// the ring is used).
func (c *Conn) advertLocked(p []byte) {
	p = p[:min(len(p), maxByteCredit)]
	c.mu.Unlock()
	mr, err := c.rregs.get(p)
	c.mu.Lock()
	if err != nil || c.closed || c.tail > c.head || c.finRcvd || !c.canDataLocked() {
		return
	}
	slot := int(c.posts % sendDepth)
	b := c.sctl[slot*slotSize:]
	binary.BigEndian.PutUint64(b, mr.Addr())
	binary.BigEndian.PutUint32(b[8:], mr.RKey())
	binary.BigEndian.PutUint32(b[12:], uint32(len(p)))
	binary.BigEndian.PutUint64(b[16:], c.head)
	c.sctlMR.Sync()
	err = c.postLocked(kindAdvert, roce.SendWR{Opcode: roce.WRSendWithImm, SGL: []roce.SGE{c.sctlMR.SGE(slot*slotSize, 24)}}, 0)
	if err != nil {
		c.failLocked(err)
		return
	}
	c.advOut, c.advMR, c.directN, c.declined, c.withdrawSent = true, mr, 0, false, false
	c.stats.Adverts++
}

// readAdvertLocked is Read while its ADVERT is out: done with the bytes
// the writer placed in the advertised buffer, or with the error that ends
// the Read; not done when the writer declined (Read goes on with the ring)
// or after waiting for its answer (Read looks again). Past the read
// deadline it sends a WITHDRAW and waits for the answer.
func (c *Conn) readAdvertLocked() (n int, done bool, err error) {
	switch {
	case c.directN > 0 || c.declined:
		mr := c.advMR
		c.advOut, c.advMR = false, nil
		n := c.directN
		c.directN, c.declined = 0, false
		c.mu.Unlock()
		mr.Sync()
		c.mu.Lock()
		if n > 0 {
			c.stats.BytesRead += uint64(n)
			c.stats.DirectReads++
			c.advBackoff = 0
			return n, true, nil
		}
		if c.declinedSmall {
			c.advBackoff = min(max(1, 2*c.advBackoff), maxAdvBackoff)
			c.advSkip = c.advBackoff
		}
		return 0, false, nil
	case c.err != nil:
		// The QP is in error: nothing more can land in p.
		c.advOut, c.advMR = false, nil
		return 0, true, c.opError("read", c.err)
	}
	dl := c.rdl
	if expired(dl) {
		if !c.withdrawSent && c.canControlLocked() {
			if err := c.postEmptyLocked(kindWithdraw); err != nil {
				c.failLocked(err)
				return 0, false, nil
			}
			c.withdrawSent = true
		}
		dl = time.Time{} // wait for the answer
	}
	c.waitLocked(dl)
	return 0, false, nil
}

// handleDirectLocked takes a received message of the direct path: to
// the reader, the writer's DIRECT (its bytes are in the advertised buffer)
// or DECLINE; to the writer, the reader's ADVERT (from the control slot
// slot) or WITHDRAW.
func (c *Conn) handleDirectLocked(kind uint32, wc *roce.WC, slot int) {
	switch kind {
	case kindDirect:
		c.directN = int(wc.ByteLen)
	case kindDecline, kindDeclineSmall:
		c.declined = true
		c.declinedSmall = kind == kindDeclineSmall
		c.stats.Declines++
	case kindAdvert:
		b := c.rctl[slot*slotSize:]
		a := advert{addr: binary.BigEndian.Uint64(b), rkey: binary.BigEndian.Uint32(b[8:]),
			n: binary.BigEndian.Uint32(b[12:]), head: binary.BigEndian.Uint64(b[16:])}
		// Ring bytes in flight when the reader advertised, or no more
		// data: the advert goes back unused.
		if a.head != c.sent || c.finSent || a.n == 0 {
			c.declineOwed = true
		} else {
			c.peerAdv, c.haveAdv = a, true
		}
		c.advHint, c.advSeen = true, true
		if !c.directAt.IsZero() {
			c.advGap = (3*c.advGap + time.Since(c.directAt)) / 4
			c.directAt = time.Time{}
		}
	case kindWithdraw:
		if c.haveAdv {
			c.haveAdv, c.declineOwed = false, true
		}
	}
}

// holdLocked says whether a Write with left bytes to go should wait for
// the peer's advert rather than use the ring, and until when. It holds
// when the peer's reader has advertised lately (it reads with large
// buffers), or, as a probe, when the ring is full (the reader is behind
// and a direct write would spare it a copy): the ring bytes already sent
// drain, the reader finds the ring empty and advertises if its Read is
// large. Probes happen only once the peer has advertised at all, so a
// peer with the direct path off never sees one. The hold gives up a grace after the reader is known to be within
// a quarter ring of the end (no credit message comes after that): twice
// the time the reader took lately from a DIRECT to its next advert,
// within holdGrace and maxHoldGrace,
// or after holdMax; then it does not hold again until the next advert,
// and probes are spaced out (probeBackoff Writes, doubling up to
// maxProbeBackoff).
func (c *Conn) holdLocked(left int, full bool) (time.Time, bool) {
	if left < holdMin || c.finSent || c.err != nil {
		return time.Time{}, false
	}
	now := time.Now()
	if c.holdSince.IsZero() {
		if !c.advHint && (!full || c.probeSkip > 0 || !c.advSeen) {
			return time.Time{}, false
		}
		c.holdSince, c.drainedAt = now, time.Time{}
		c.stats.Holds++
	}
	dl := c.holdSince.Add(holdMax)
	if c.acked >= c.sent && c.peerFreed+uint64(len(c.stage))/4 >= c.sent {
		if c.drainedAt.IsZero() {
			c.drainedAt = now
		}
		dl = earliest(dl, c.drainedAt.Add(min(max(holdGrace, 2*c.advGap), maxHoldGrace)))
	}
	if !now.Before(dl) {
		c.holdSince, c.advHint = time.Time{}, false
		c.probeBackoff = min(max(1, 2*c.probeBackoff), maxProbeBackoff)
		c.probeSkip = c.probeBackoff
		c.stats.HoldTimeouts++
		return time.Time{}, false
	}
	return dl, true
}

// writeDirectLocked writes the start of p into the peer's advertised
// buffer and waits until the WRITE completed, since p is used in place.
// If p cannot be registered, the advert is declined and 0 returned.
func (c *Conn) writeDirectLocked(p []byte) (int, error) {
	c.holdSince, c.probeBackoff = time.Time{}, 0
	a := c.peerAdv
	c.haveAdv = false // from now on a WITHDRAW finds nothing to decline
	if a.head != c.sent {
		// Ring bytes went out after the advert was taken (a Write copying
		// into staging meanwhile): they come first, so decline.
		c.declineOwed = true
		c.flushDeclineLocked()
		return 0, nil
	}
	n := min(len(p), int(a.n))
	c.mu.Unlock()
	mr, err := c.wregs.get(p[:n])
	c.mu.Lock()
	if err != nil {
		c.declineOwed = true
		c.flushDeclineLocked()
		return 0, nil
	}
	wr := roce.SendWR{Opcode: roce.WRRDMAWriteWithImm, SGL: []roce.SGE{mr.SGE(0, n)}, RemoteAddr: a.addr, RKey: a.rkey}
	if err := c.postLocked(kindDirect, wr, 0); err != nil {
		c.failLocked(err)
		return 0, c.opError("write", c.err)
	}
	for mine := c.posts; c.completed < mine && c.err == nil; {
		c.waitLocked(time.Time{})
	}
	if c.err != nil {
		return 0, c.opError("write", c.err)
	}
	c.stats.BytesWritten += uint64(n)
	c.stats.DirectBytes += uint64(n)
	c.directAt = time.Now()
	return n, nil
}

// flushDeclineLocked sends an owed DECLINE when the credits allow.
func (c *Conn) flushDeclineLocked() {
	if c.declineOwed && c.canControlLocked() {
		kind := uint32(kindDecline)
		if c.declineSmall {
			kind = kindDeclineSmall
		}
		if err := c.postEmptyLocked(kind); err != nil {
			c.failLocked(err)
			return
		}
		c.declineOwed, c.declineSmall = false, false
	}
}
