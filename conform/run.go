package conform

import (
	"fmt"
	"time"
)

// Wire is where a trial's frames go: the puppet's end of a link, on a
// clock of the wire's choosing (real time, or a simulation's).
type Wire interface {
	// Send transmits frames in order.
	Send(frames [][]byte) error
	// Receive returns the frames that arrive before the deadline (at
	// least one, unless the deadline passed), each with its arrival time.
	Receive(deadline time.Duration) ([]Frame, error)
	// Now is the wire's clock.
	Now() time.Duration
}

// maxRounds bounds the Poll/Receive rounds of one trial: a peer that
// floods the puppet cannot keep a check running.
const maxRounds = 100000

// Run runs check c against target t over w and returns its result. fr
// builds the puppet's frames; self is the puppet's QP number. A trial
// ends when its steps are judged, after at most the sum of their waits
// plus a second, or maxRounds rounds.
func Run(w Wire, c *Check, t *Target, fr Framer, self uint32) Result {
	tr := NewTrial(c, t, fr, self)
	limit := w.Now() + time.Second
	for _, s := range c.Steps {
		limit += max(s.Wait, DefaultWait)
	}
	for range maxRounds {
		send, next := tr.Poll(w.Now())
		if tr.Done() {
			break
		}
		if len(send) > 0 {
			if err := w.Send(send); err != nil {
				return abort(tr, fmt.Sprintf("send: %v", err))
			}
		}
		if w.Now() > limit {
			return abort(tr, "the trial overran its time")
		}
		got, err := w.Receive(min(next, limit))
		if err != nil {
			return abort(tr, fmt.Sprintf("receive: %v", err))
		}
		for _, f := range got {
			tr.Input(f.Data, f.At)
		}
	}
	if !tr.Done() {
		return abort(tr, "the trial overran its rounds")
	}
	return tr.Result()
}

// abort ends a trial that the wire broke: a FAIL that says why.
func abort(tr *Trial, why string) Result {
	r := tr.Result()
	r.Verdict, r.Observed, r.Frames = Fail, "not run to the end: "+why, tr.Frames()
	return r
}
