//go:build linux

package xdp

// Transmit side: transmit slots, the TX ring and the completion ring.

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/xroce/xroce/link"
)

// Alloc implements link.Link: transmit buffers of length MaxFrame, each in
// one UMEM slot (several consecutive chunks when MaxFrame exceeds a chunk).
func (s *Socket) Alloc(bufs [][]byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return 0
	}
	if len(s.txFree) < len(bufs) {
		s.reap()
		if len(s.txFree) < len(bufs) && s.copyMode && s.tx.outstanding() > 0 {
			s.kickTX()
			s.reap()
		}
	}
	n := min(len(bufs), len(s.txFree))
	hr := uint64(s.um.headroom)
	for i := range n {
		slot := s.txFree[len(s.txFree)-1-i]
		c := s.slotChunk(slot)
		s.um.owner[c] = ownAlloc
		off := uint64(c)<<s.shift + hr
		end := off + uint64(s.maxFrame)
		bufs[i] = s.mem[off:end:end]
	}
	s.txFree = s.txFree[:len(s.txFree)-n]
	if n < len(bufs) {
		s.st.txNoBuffers.Add(1)
	}
	return n
}

// reap takes transmitted chunks off the completion ring.
func (s *Socket) reap() {
	n := s.comp.pending()
	if n == 0 {
		return
	}
	base := s.comp.cachedCons
	for i := range n {
		c := uint32(s.comp.get(base+i) >> s.shift)
		switch {
		case c >= s.txFirst && c < s.txEnd:
			slot := (c - s.txFirst) / s.slotChunks
			first := s.slotChunk(slot)
			if s.um.owner[first] != ownTx || s.txLeft[slot] == 0 {
				s.st.badDesc.Add(1)
				continue
			}
			s.txLeft[slot]--
			if s.txLeft[slot] == 0 {
				s.um.owner[first] = ownFree
				s.txFree = append(s.txFree, slot)
			}
		case c >= s.rxFirst && c < s.txFirst:
			if s.um.owner[c] != ownTx {
				s.st.badDesc.Add(1)
				continue
			}
			s.um.owner[c] = ownFree
			s.rxFree = append(s.rxFree, uint64(c)<<s.shift)
		default:
			s.st.badDesc.Add(1)
		}
	}
	s.comp.release(n)
}

// Transmit implements link.Link. Buffers from Alloc (resliced as the frame
// needs) and received buffers that fit one chunk (for in-place replies) can
// be sent; a received frame that was linearized (longer than a chunk) cannot:
// copy it into an Alloc'd buffer. A frame longer than a chunk goes out as
// several descriptors chained with XDP_PKT_CONTD, without copying.
func (s *Socket) Transmit(bufs [][]byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return 0, link.ErrClosed
	}
	s.reap()
	var sent int
	var bytes uint64
	var err error
	for _, b := range bufs {
		kind, idx := s.locate(b)
		ok := false
		switch kind {
		case bufTxSlot:
			ok = s.um.owner[s.slotChunk(idx)] == ownAlloc
		case bufRxChunk:
			ok = s.um.owner[idx] == ownRx
		case bufLinear:
			// Not in the UMEM: give it back and refuse it.
			s.release(b)
		}
		if !ok {
			s.st.badTransmit.Add(1)
			s.st.txDropped.Add(1)
			err = fmt.Errorf("transmit: %w", ErrBadBuffer)
			continue
		}
		addr := uint64(bufAddr(b) - s.um.base)
		l := uint64(len(b))
		var limit uint64 // end of the memory this buffer may use
		if kind == bufTxSlot {
			limit = uint64(s.slotChunk(idx)+s.slotChunks) << s.shift
		} else {
			limit = uint64(idx+1) << s.shift
		}
		if l == 0 {
			s.release(b)
			s.st.txDropped.Add(1)
			err = fmt.Errorf("transmit: %w", ErrEmptyFrame)
			continue
		}
		nd := uint32((addr+l-1)>>s.shift-addr>>s.shift) + 1 // chunks the frame touches
		if l > uint64(s.maxFrame) || addr+l > limit || (nd > 1 && !s.sg) {
			s.release(b)
			s.st.txTooLong.Add(1)
			s.st.txDropped.Add(1)
			err = fmt.Errorf("transmit %d bytes (max %d): %w", l, s.maxFrame, ErrFrameTooLarge)
			continue
		}
		got, ri := s.tx.reserve(nd)
		if got < nd {
			// Ring full: push out what we have and make room.
			s.tx.cachedProd -= got
			s.tx.submit()
			if kerr := s.kickTX(); kerr != nil {
				err = kerr
			}
			s.reap()
			got, ri = s.tx.reserve(nd)
			if got < nd {
				s.tx.cachedProd -= got
				s.release(b)
				s.st.txDropped.Add(1)
				continue
			}
		}
		for i := range nd {
			d := s.tx.at(ri + i)
			chunkEnd := (addr>>s.shift + 1) << s.shift
			seg := min(l, chunkEnd-addr)
			d.Addr, d.Len, d.Options = addr, uint32(seg), 0
			if seg < l {
				d.Options = unix.XDP_PKT_CONTD
			}
			addr += seg
			l -= seg
		}
		if kind == bufTxSlot {
			s.um.owner[s.slotChunk(idx)] = ownTx
			s.txLeft[idx] = uint8(nd)
		} else {
			s.um.owner[idx] = ownTx
		}
		sent++
		bytes += uint64(len(b))
	}
	if sent > 0 {
		s.tx.submit()
		if kerr := s.kickTX(); kerr != nil {
			err = kerr
		}
	}
	s.st.txFrames.Add(uint64(sent))
	s.st.txBytes.Add(bytes)
	return sent, err
}

// kickTX tells the kernel to send what the TX ring holds. In copy mode the
// kernel transmits only inside sendto, a bounded batch per call, and says
// EAGAIN while descriptors remain (or the completion ring is full), so we
// loop, reaping completions, until it has taken them all.
func (s *Socket) kickTX() error {
	if !s.copyMode {
		if !s.tx.needWakeup() {
			return nil
		}
		s.st.wakeups.Add(1)
		switch e := kick(s.fd); e {
		case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
			return nil
		default:
			s.st.kickErrors.Add(1)
			return fmt.Errorf("kick tx: %w", e)
		}
	}
	for range s.maxKicks {
		s.st.wakeups.Add(1)
		switch e := kick(s.fd); e {
		case 0:
			return nil
		case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
			// EBUSY/ENOBUFS: the device dropped a frame (counted by
			// the kernel); keep going with the rest.
			s.reap()
			if s.tx.outstanding() == 0 {
				return nil
			}
		default:
			s.st.kickErrors.Add(1)
			return fmt.Errorf("kick tx: %w", e)
		}
	}
	return nil
}
