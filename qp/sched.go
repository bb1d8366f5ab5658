package qp

import (
	"container/heap"
	"time"
)

// The engine polls only the QPs that may have work: those woken by an
// event (a frame, a posted request, a state change, running out of
// buffers) and those whose timer is due. Timers wait in a min-heap of
// deadlines; a QP has at most one entry that matters (the earliest), and
// a stale entry only causes a harmless extra poll.

type timerEntry struct {
	at time.Duration
	q  *QP
}

type timerHeap []timerEntry

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
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
	heap.Push(&q.e.timers, timerEntry{at: d, q: q})
}

// Poll runs timers that expired by now, sends whatever is ready (requests,
// responses, ACKs) as far as Output has buffers, and returns the time of the
// next timer (Never if none). When Output ran out of buffers it returns now:
// call Poll again once buffers are free. Only QPs with something to do are
// visited.
func (e *Engine) Poll(now time.Duration) time.Duration {
	e.now = now
	for len(e.timers) > 0 && e.timers[0].at <= now {
		t := heap.Pop(&e.timers).(timerEntry)
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
		heap.Pop(&e.timers)
	}
	if len(e.timers) > 0 {
		return e.timers[0].at
	}
	return Never
}
