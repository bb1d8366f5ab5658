package roce

import (
	"errors"
	"math"
	"time"

	"github.com/xroce/xroce/link"
)

// Progress lets the calling goroutine do the receive work of the device's
// workers, without waiting: for each worker that is not busy (another
// goroutine holds its lock, or its own goroutine is still receiving), it
// receives one batch of frames, feeds them to the QPs, runs their timers
// and transmits what they have ready, and it returns the number of frames
// it fed. Completions land in the CQs as they do from the workers.
//
// A goroutine that busy-polls a CQ thus takes the received message
// through the transport itself, instead of waiting for a worker goroutine
// to be woken, run and hand it over: on a machine with few cores, where
// the poller and the workers compete for them, that hop costs more than
// the work. CQ.Poll calls Progress when it finds the CQ empty (unless
// Config.NoPollProgress), so a loop of Poll is all a user writes; call
// Progress directly to wait for something that completes nothing here,
// such as an RDMA WRITE landing in a local buffer.
//
// The hand-over is lazy: the first Progress only records that someone
// polls, and a worker goroutine that was sleeping in its link's receive
// keeps the link until its next batch (which it handles itself), then
// parks. From then on pollers receive, and the parked goroutine wakes only
// for timers, for work that user calls queue on links that do not let
// them transmit, and to take the link back: at once when a poller goes to
// sleep in CQ.Wait or fetches CQ.Notify, else when it finds that nobody
// has polled for a millisecond (pollLease; it looks 1 to 10 ms apart).
// Only one goroutine receives from a link at a time, so frames reach the
// transport in order. With Config.BusyPoll the workers spin and Progress
// does nothing.
//
// The ACKs and responses to what Progress received are held back until
// the next Progress or post on that worker, so that a poller that answers
// a message at once sends both in one transmit call; a parked goroutine
// that wakes sends them too.
//
// Progress does not allocate and is safe for concurrent use.
func (d *Device) Progress() int { return d.progress(^uint64(0)) }

// progress is Progress for the workers in mask (bit i: worker i).
func (d *Device) progress(mask uint64) int {
	if d.cfg.BusyPoll {
		return 0
	}
	n := 0
	for i, w := range d.workers {
		if mask&(1<<i) != 0 {
			n += w.progress()
		}
	}
	return n
}

// unpoll tells the workers in mask that a poller goes to sleep: they take
// their links back.
func (d *Device) unpoll(mask uint64) {
	for i, w := range d.workers {
		if mask&(1<<i) != 0 {
			w.unpoll()
		}
	}
}

// pollLease is how long after the latest poll the link counts as
// abandoned: a poller that stops polling without saying so (CQ.Wait,
// CQ.Notify) leaves frames waiting until the parked goroutine next looks,
// pollLease to idleTick later. While pollers go on polling the goroutine
// looks less and less often (it doubles leaseLen up to idleTick), so that
// it does not take a core from them a thousand times a second.
const pollLease = time.Millisecond

// noPoll is polled's value when nobody polls.
const noPoll = math.MinInt64 / 2

// parkBatch is the goroutine's loop while pollers receive: it sleeps until
// the engine's next deadline, a kick or the end of the pollers' lease,
// then runs the engine (timers, requests queued by user calls, frames
// other workers forwarded) and takes the link back once nobody has polled
// for pollLease. It reports whether the worker is stopping.
func (w *worker) parkBatch() bool {
	now := w.d.now()
	polled := time.Duration(w.polled.Load())
	lease := polled + w.leaseLen
	until := min(time.Duration(w.deadline.Load()), lease)
	w.sleepUntil.Store(int64(until))
	w.parked.Store(true)
	w.sleeping.Store(true)
	// Look again after publishing parked: a user call or unpoll that
	// came in between did not see it and did not wake us.
	if !w.pending.Swap(false) && until > now &&
		time.Duration(w.deadline.Load()) >= until && time.Duration(w.polled.Load()) >= polled {
		w.parks.Add(1)
		w.timer.Reset(until - now)
		select {
		case <-w.park:
		case <-w.timer.C:
		}
		w.timer.Stop()
	}
	w.sleeping.Store(false)
	w.parked.Store(false)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop {
		return true
	}
	now = w.d.now()
	w.inputForwarded(now)
	w.deadline.Store(int64(w.eng.Poll(now)))
	w.out.flush()
	w.afterBatch()
	switch {
	case time.Duration(w.polled.Load())+pollLease <= now:
		w.receiving.Store(true)
		w.leaseLen = pollLease
	case now >= lease:
		w.leaseLen = min(2*w.leaseLen, idleTick)
	}
	return false
}

// progress is Device.Progress for one worker: if nobody holds mu and the
// goroutine has handed the link over, it receives one batch without
// waiting, feeds the engine and sends what is ready, and returns the
// number of frames it fed. Otherwise it only records the poll: the
// goroutine hands the link over after its next batch.
func (w *worker) progress() int {
	now := w.d.now()
	w.polled.Store(int64(now))
	if !w.mu.TryLock() {
		return 0
	}
	if w.stop || w.receiving.Load() {
		w.mu.Unlock()
		return 0
	}
	w.out.flush() // what the previous call held back
	n, err := w.link.Receive(w.pbufs, 0)
	if err != nil {
		if n > 0 {
			w.link.Release(w.pbufs[:n])
		}
		if !errors.Is(err, link.ErrClosed) {
			w.linkErrors.Add(1)
		}
		// Give the link back to the goroutine, which pauses on
		// errors and stops on a closed link.
		w.out.flush()
		w.receiving.Store(true)
		w.polled.Store(noPoll)
		w.mu.Unlock()
		w.unpark()
		return 0
	}
	if n > 0 {
		w.polledBatches.Add(1)
		w.polledFrames.Add(uint64(n))
		w.input(w.pbufs[:n], now)
		w.link.Release(w.pbufs[:n])
	}
	fed := n + w.inputForwarded(now)
	wake := false
	// Run the engine for the frames, for expired timers, and for work
	// that user calls queued for the goroutine (it then finds nothing).
	if fed > 0 || w.pending.Swap(false) || time.Duration(w.deadline.Load()) <= now {
		dl := w.eng.Poll(now)
		w.deadline.Store(int64(dl))
		if fed == 0 {
			w.out.flush()
		}
		// Otherwise hold the answers to the frames (ACKs, responses)
		// back: the poller is likely to post its own request at once,
		// which sends them along in the same transmit call (one system
		// call instead of two with AF_XDP); else its next Progress
		// does, or the goroutine when it wakes.
		w.afterBatch()
		wake = dl < time.Duration(w.sleepUntil.Load())
	}
	w.mu.Unlock()
	if wake {
		w.kick()
	}
	return fed
}

// unpoll ends the pollers' lease: a goroutine that polled is going to
// sleep, so the worker's goroutine must receive again.
func (w *worker) unpoll() {
	if w.polled.Load() == noPoll {
		return
	}
	w.polled.Store(noPoll)
	if w.parked.Load() {
		w.unpark()
	}
}
