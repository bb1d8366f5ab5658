//go:build linux

package device

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/xroce/xroce/roce"
)

// AnswerLinger is how long a side whose run has ended keeps qps answering
// the peer: three of their local ACK timeouts (4.096 µs << Timeout; the
// peer's come from the same attributes and it resends what it saw no ACK
// for once per timeout), at least floor and at most ceiling.
func AnswerLinger(floor, ceiling time.Duration, qps ...*roce.QP) time.Duration {
	d := floor
	for _, q := range qps {
		if a, err := q.Query(); err == nil && a.Timeout != 0 {
			d = max(d, 3*(4096*time.Nanosecond<<a.Timeout))
		}
	}
	return min(d, ceiling)
}

// PollCQ waits for completions on cq until deadline by busy-polling it, as
// ibv_rc_pingpong does without -e. When the CQ is empty this goroutine
// does the device's receive work (roce.CQ.Progress), so the spinning is
// the datapath at work rather than a poller starving the device's
// goroutines of the cores they need. It yields to other goroutines every
// few polls.
func PollCQ(ctx context.Context, cq *roce.CQ, wcs []roce.WC, deadline time.Time, timeout time.Duration) (int, error) {
	for i := 1; ; i++ {
		if n := cq.Poll(wcs); n > 0 {
			return n, nil
		}
		if cq.Progress() > 0 {
			if n := cq.Poll(wcs); n > 0 {
				return n, nil
			}
		}
		if i%SpinYield == 0 {
			runtime.Gosched()
		}
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("no completion for %v: is the peer still there?", timeout)
			}
		}
	}
}

// SpinYield is how many polls PollCQ and perf's spinning loops make
// between two yields to other goroutines.
const SpinYield = 16
