package qp

import "fmt"

// SRQ is a shared receive queue (IBTA Vol 1 §10.2.9): receive requests
// that any QP created with it consumes, in order, as messages arrive. It
// belongs to its Engine's owner goroutine. Moving a QP to ERR does not
// flush the SRQ, only the request that QP was filling.
type SRQ struct {
	e          *Engine
	rq         []recvWQE
	head, tail uint32
	maxSGE     int
	nqp        int  // QPs created with it and not destroyed
	dead       bool // destroyed
}

// CreateSRQ returns a shared receive queue of maxWR requests (0 means 128)
// of up to maxSGE entries each (0 means 4).
func (e *Engine) CreateSRQ(maxWR, maxSGE int) *SRQ {
	if maxWR <= 0 {
		maxWR = 128
	}
	if maxSGE <= 0 {
		maxSGE = 4
	}
	s := &SRQ{e: e, rq: make([]recvWQE, maxWR), maxSGE: maxSGE}
	for i := range s.rq {
		s.rq[i].sge = make([]SGE, 0, maxSGE)
	}
	return s
}

// PostRecv queues a receive request on the SRQ (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wr *RecvWR) error {
	if s.dead {
		return fmt.Errorf("post srq recv: %w", ErrDestroyed)
	}
	if s.tail-s.head >= uint32(len(s.rq)) {
		return fmt.Errorf("post srq recv: %w", ErrQueueFull)
	}
	if len(wr.SGL) > s.maxSGE {
		return fmt.Errorf("post srq recv: %d SGEs: %w", len(wr.SGL), ErrTooManySGE)
	}
	w := &s.rq[s.tail%uint32(len(s.rq))]
	w.id = wr.ID
	w.sge = append(w.sge[:0], wr.SGL...)
	w.capacity = 0
	for _, g := range wr.SGL {
		w.capacity += g.Length
	}
	s.tail++
	return nil
}

// Destroy destroys the SRQ (ibv_destroy_srq): its waiting requests are
// dropped without completions. It fails with ErrInUse while a QP created
// with it exists (destroy those first), and is idempotent.
func (s *SRQ) Destroy() error {
	if s.dead {
		return nil
	}
	if s.nqp > 0 {
		return fmt.Errorf("destroy srq: used by %d QPs: %w", s.nqp, ErrInUse)
	}
	s.dead = true
	s.head = s.tail
	return nil
}

// Len returns the number of receive requests waiting in the SRQ.
func (s *SRQ) Len() int { return int(s.tail - s.head) }

// takeSRQ moves the SRQ's next request into the QP's own slot, where it
// stays until a message completes it (a message dropped half way, as UC
// does, leaves it there for the next one).
func (q *QP) takeSRQ() *recvWQE {
	if q.curHeld {
		return &q.cur
	}
	s := q.srq
	if s.head == s.tail {
		return nil
	}
	w := &s.rq[s.head%uint32(len(s.rq))]
	s.head++
	q.cur.id, q.cur.capacity = w.id, w.capacity
	q.cur.sge = append(q.cur.sge[:0], w.sge...)
	q.curHeld = true
	return &q.cur
}
