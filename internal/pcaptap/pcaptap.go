// Package pcaptap records the Ethernet frames a link.Link moves into a pcap
// file, for Wireshark and `xroce dump`.
//
// Frames that an AF_XDP socket sends or receives never pass the kernel's
// capture points (packet taps see neither the XDP_REDIRECT on receive nor
// the transmit from the UMEM), so tcpdump on the interface shows nothing of
// them. A capture of RoCE traffic over AF_XDP has to be taken inside the
// process, where the frames are handed to and from the link: Wrap puts a
// Link in front of another that copies each frame to a Recorder on its way
// through Transmit (before the frame is given to the link, which then owns
// it) and Receive (after the link handed it out).
//
// A Recorder is off until Enable and costs one atomic load per batch while
// off. Recording takes a lock shared by every link that records into the
// same Recorder and writes through a buffer; it does not allocate. It can
// be limited to a number of frames, after which it turns itself off, so
// that measuring throughput with the tap in place does not measure the
// disk.
package pcaptap

import (
	"bufio"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xroce/xroce/link"
)

// Dir is the set of directions a tapped link records.
type Dir uint8

// Directions.
const (
	TX   Dir = 1 << iota // frames given to Transmit
	RX                   // frames returned by Receive
	Both = TX | RX
)

func (d Dir) String() string {
	switch d {
	case TX:
		return "tx"
	case RX:
		return "rx"
	case Both:
		return "tx+rx"
	}
	return "none"
}

// Frame is a recorded frame as Config.OnFrame sees it. Data is only valid
// during the call.
type Frame struct {
	Label string // the tapped link's label (Wrap's label)
	Dir   Dir    // TX or RX
	Time  time.Time
	Data  []byte
}

// Config configures a Recorder. The zero value writes full frames of up to
// 65535 bytes and calls nothing.
type Config struct {
	// Snaplen is the largest frame length recorded in full; longer frames
	// are cut (their ICRC then cannot be checked). 0 means 65535.
	Snaplen int
	// OnFrame, when set, is called with each recorded frame, under the
	// Recorder's lock, after it was written. It must not call the
	// Recorder's methods.
	OnFrame func(Frame)
}

// unlimited is the value of Recorder.left when no frame limit is set.
const unlimited = -1

// Recorder writes frames to a pcap stream (microsecond timestamps,
// Ethernet link type). Its methods are safe for concurrent use.
type Recorder struct {
	cfg Config
	// left is the number of frames still to record: 0 when off,
	// unlimited when on without a limit.
	left atomic.Int64

	missed atomic.Uint64 // frames seen while off or after an error

	// mu guards the writer, err and the counters below it.
	mu      sync.Mutex
	bw      *bufio.Writer
	pw      *pcapgo.Writer
	err     error // first write error; recording stops with it
	frames  uint64
	bytes   uint64
	cut     uint64 // frames cut to Snaplen
	snaplen int
}

// New starts a pcap stream on w (it writes the file header at once) and
// returns a Recorder that is off: call Enable.
func New(w io.Writer, cfg Config) (*Recorder, error) {
	if cfg.Snaplen == 0 {
		cfg.Snaplen = 65535
	}
	if cfg.Snaplen < 64 || cfg.Snaplen > 1<<18 {
		return nil, fmt.Errorf("pcaptap: snaplen %d out of range 64..262144", cfg.Snaplen)
	}
	r := &Recorder{cfg: cfg, bw: bufio.NewWriterSize(w, 1<<16), snaplen: cfg.Snaplen}
	r.pw = pcapgo.NewWriter(r.bw)
	if err := r.pw.WriteFileHeader(uint32(cfg.Snaplen), layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("pcaptap: write header: %w", err)
	}
	return r, nil
}

// Enable turns recording on for the next limit frames, or for every frame
// when limit is 0 or negative.
func (r *Recorder) Enable(limit int) {
	if limit <= 0 {
		r.left.Store(unlimited)
		return
	}
	r.left.Store(int64(limit))
}

// Disable turns recording off.
func (r *Recorder) Disable() { r.left.Store(0) }

// Enabled reports whether frames are being recorded.
func (r *Recorder) Enabled() bool { return r.left.Load() != 0 }

// Stats are a Recorder's counters.
type Stats struct {
	Frames uint64 // frames written
	Bytes  uint64 // frame bytes written (after cutting)
	Missed uint64 // frames that passed a tapped link while the recorder was off
	Cut    uint64 // frames longer than Snaplen, written cut
}

// Stats returns the counters.
func (r *Recorder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{Frames: r.frames, Bytes: r.bytes, Missed: r.missed.Load(), Cut: r.cut}
}

// Flush writes buffered frames out and returns the first write error.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		if err := r.bw.Flush(); err != nil {
			r.err = fmt.Errorf("pcaptap: %w", err)
		}
	}
	return r.err
}

// record writes a batch of frames, all stamped with the time of the call.
func (r *Recorder) record(label string, dir Dir, bufs [][]byte) {
	if len(bufs) == 0 {
		return
	}
	if r.left.Load() == 0 {
		r.missed.Add(uint64(len(bufs)))
		return
	}
	t := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, b := range bufs {
		if r.err != nil || !r.take() {
			r.missed.Add(uint64(len(bufs) - i))
			return
		}
		data := b
		if len(data) > r.snaplen {
			data = data[:r.snaplen]
			r.cut++
		}
		ci := gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(data), Length: len(b)}
		if err := r.pw.WritePacket(ci, data); err != nil {
			r.err = fmt.Errorf("pcaptap: %w", err)
			r.missed.Add(uint64(len(bufs) - i))
			return
		}
		r.frames++
		r.bytes += uint64(len(data))
		if r.cfg.OnFrame != nil {
			r.cfg.OnFrame(Frame{Label: label, Dir: dir, Time: t, Data: b})
		}
	}
}

// take spends one frame of the limit; false when the recorder is off.
func (r *Recorder) take() bool {
	for {
		left := r.left.Load()
		switch {
		case left == 0:
			return false
		case left < 0:
			return true
		case r.left.CompareAndSwap(left, left-1):
			return true
		}
	}
}

// Link is a link.Link that records what passes through it. It has the
// concurrency contract of the link it wraps.
type Link struct {
	link.Link
	r     *Recorder
	label string
	dirs  Dir
}

// Wrap returns a link that forwards every call to l and records the frames
// of the directions dirs into r, labelled label for Config.OnFrame. Closing
// it closes l.
func Wrap(l link.Link, r *Recorder, label string, dirs Dir) *Link {
	return &Link{Link: l, r: r, label: label, dirs: dirs}
}

// WrapAll wraps each of links, all with the same recorder, label and
// directions.
func WrapAll(links []link.Link, r *Recorder, label string, dirs Dir) []link.Link {
	out := make([]link.Link, len(links))
	for i, l := range links {
		out[i] = Wrap(l, r, label, dirs)
	}
	return out
}

// ConcurrentTransmit forwards the wrapped link's answer
// (link.ConcurrentTransmitter): recording takes the Recorder's lock, so
// Transmit may run beside Receive when the wrapped link allows it.
func (l *Link) ConcurrentTransmit() bool { return link.ConcurrentTransmit(l.Link) }

// Unwrap returns the wrapped link.
func (l *Link) Unwrap() link.Link { return l.Link }

// Transmit records the frames, then hands them to the wrapped link.
func (l *Link) Transmit(bufs [][]byte) (int, error) {
	if l.dirs&TX != 0 {
		l.r.record(l.label, TX, bufs)
	}
	return l.Link.Transmit(bufs)
}

// Receive receives from the wrapped link and records what it returns.
func (l *Link) Receive(bufs [][]byte, timeout time.Duration) (int, error) {
	n, err := l.Link.Receive(bufs, timeout)
	if n > 0 && l.dirs&RX != 0 {
		l.r.record(l.label, RX, bufs[:n])
	}
	return n, err
}
