package qp

import "time"

// The engine polls only the QPs that may have work: those woken by an
// event (a frame, a posted request, a state change, running out of
// buffers) and those whose timer is due. Timers wait in a min-heap of
// deadlines; a QP has at most one entry that matters (the earliest), and
// a stale entry only causes a harmless extra poll.
//
// The heap is typed rather than built on container/heap, whose Push and
// Pop take and return an interface: every entry would be boxed, one
// allocation per re-armed timer, and a paced QP re-arms for each packet.

type timerEntry struct {
	at time.Duration
	q  *QP
}

// timerHeap is a binary min-heap of timer entries ordered by deadline.
type timerHeap []timerEntry

// push adds t; it allocates only when the slice grows.
func (h *timerHeap) push(t timerEntry) {
	*h = append(*h, t)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].at <= s[i].at {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

// pop removes and returns the earliest entry; the heap must not be empty.
func (h *timerHeap) pop() timerEntry {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = timerEntry{} // drop the QP reference
	s = s[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s[r].at < s[l].at {
			m = r
		}
		if s[i].at <= s[m].at {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// wake marks q as having work for the next Poll.
func (q *QP) wake() {
	if !q.woken && !q.destroyed {
		q.woken = true
		q.e.ready = append(q.e.ready, q)
	}
}

// schedule records q's next deadline d in the timer heap unless an entry
// at or before d is already there.
func (q *QP) schedule(d time.Duration) {
	if d == Never || q.heapAt <= d && q.heapAt != Never {
		return
	}
	q.heapAt = d
	q.e.timers.push(timerEntry{at: d, q: q})
}

// Poll runs timers that expired by now, sends whatever is ready (requests,
// responses, ACKs) as far as Output has buffers, and returns the time of the
// next timer (Never if none). When Output ran out of buffers it returns now:
// call Poll again once buffers are free. Only QPs with something to do are
// visited.
func (e *Engine) Poll(now time.Duration) time.Duration {
	e.now = now
	for len(e.timers) > 0 && e.timers[0].at <= now {
		t := e.timers.pop()
		if t.q.heapAt == t.at {
			t.q.heapAt = Never
		}
		t.q.wake()
	}
	busy := false
	work := e.ready
	e.ready = e.spare[:0]
	for _, q := range work {
		q.woken = false
		if q.destroyed {
			continue
		}
		e.visits++
		d := q.poll(now)
		if q.blocked {
			busy = true
			q.wake()
			continue
		}
		q.schedule(d)
	}
	e.spare = work[:0]
	if e.serveLine(now) {
		busy = true
	}
	if busy {
		return now
	}
	for len(e.timers) > 0 && e.timers[0].q.destroyed {
		e.timers.pop()
	}
	if len(e.timers) > 0 {
		return e.timers[0].at
	}
	return Never
}
