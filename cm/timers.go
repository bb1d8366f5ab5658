package cm

import "time"

// Never is the deadline of nothing to do.
const Never = time.Duration(1<<63 - 1)

// ms converts an IBTA time-out code t, 4.096 µs × 2^t, to time as the
// kernel's CM does (cm_convert_to_ms): 2^(t−8) ms, at least 1 ms.
func ms(t uint8) time.Duration {
	if t <= 8 {
		return time.Millisecond
	}
	if t > 31 {
		t = 31
	}
	return time.Millisecond << (t - 8)
}

// deadlines is an intrusive min-heap of connections by deadline: arming,
// moving and cancelling a timer allocate nothing and cost O(log n); idle
// connections cost nothing per Poll.
type deadlines []*conn

func (h deadlines) less(i, j int) bool { return h[i].deadline < h[j].deadline }

func (h deadlines) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}

func (h deadlines) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h deadlines) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h.swap(i, m)
		i = m
	}
}

// arm sets c's timer to at, adding c to the heap or moving it.
func (e *Engine) arm(c *conn, at time.Duration) {
	c.deadline = at
	if c.hidx < 0 {
		c.hidx = len(e.timers)
		e.timers = append(e.timers, c)
		e.timers.up(c.hidx)
		return
	}
	e.timers.down(c.hidx)
	e.timers.up(c.hidx)
}

// disarm cancels c's timer.
func (e *Engine) disarm(c *conn) {
	i := c.hidx
	if i < 0 {
		return
	}
	last := len(e.timers) - 1
	e.timers.swap(i, last)
	e.timers[last] = nil
	e.timers = e.timers[:last]
	c.hidx = -1
	if i < last {
		e.timers.down(i)
		e.timers.up(i)
	}
	c.deadline = Never
}
