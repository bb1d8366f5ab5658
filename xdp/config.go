package xdp

import (
	"fmt"
	"time"
)

// Mode values for Config.Mode and Info().Mode.
const (
	ModeAuto     = ""          // zero-copy if the driver supports it, else copy
	ModeZeroCopy = "zero-copy" // XDP_ZEROCOPY: fail if the driver cannot
	ModeCopy     = "copy"      // XDP_COPY: the kernel copies frames in and out of the UMEM
)

// Attach values for Config.Attach and Device.AttachMode.
const (
	AttachAuto    = ""        // driver (native) mode if the driver has it, else generic
	AttachDriver  = "driver"  // native XDP in the driver (XDP_FLAGS_DRV_MODE)
	AttachGeneric = "generic" // generic XDP on the SKB path (XDP_FLAGS_SKB_MODE)
)

// Config configures Open. The zero value means the defaults.
type Config struct {
	// Queues lists the NIC queues to serve, one Socket each, sharing one
	// UMEM. Default: {0}.
	Queues []int

	// Mode is ModeAuto (default), ModeZeroCopy or ModeCopy.
	Mode string

	// FrameSize is the UMEM chunk size in bytes: 2048 or 4096 (default).
	FrameSize int

	// Headroom is the number of bytes reserved at the start of every chunk
	// before the frame (UMEM headroom), on receive and on transmit. Default 0.
	Headroom int

	// RingSize is the number of entries of each ring (fill, completion, RX,
	// TX), a power of two. Default 2048.
	RingSize int

	// RxFrames is the number of UMEM chunks each socket uses for receive.
	// Default 2 × RingSize.
	RxFrames int

	// TxFrames is the number of transmit buffers each socket can have
	// allocated or in flight. Default RingSize.
	TxFrames int

	// LinearBuffers is the number of MaxFrame-sized buffers each socket keeps
	// to hand out received frames that span several UMEM chunks (MTU larger
	// than a chunk). Default 512; unused when frames fit a chunk.
	LinearBuffers int

	// Frags forces multi-buffer (XDP_USE_SG and a frags-aware XDP program)
	// even when the MTU does not need it. Multi-buffer is always used when a
	// frame of MTU bytes does not fit in a receive chunk.
	Frags bool

	// BusyPoll, when non-zero, turns on busy polling: SO_PREFER_BUSY_POLL,
	// SO_BUSY_POLL with this duration (microsecond granularity) and
	// SO_BUSY_POLL_BUDGET with BusyPollBudget (default 64 frames).
	BusyPoll       time.Duration
	BusyPollBudget int

	// Spin is how long a Receive that may wait keeps looking at the RX
	// ring (yielding the processor in between) before it sleeps in
	// poll(2). Sleeping costs the sender a wakeup and the receiver a
	// context switch per batch; spinning costs CPU while the link is idle.
	// Default 0: sleep at once.
	Spin time.Duration

	// BusyRetry is how long binding keeps retrying a queue the kernel
	// reports busy (EBUSY), which happens right after a previous socket on
	// it was closed. Default 2 s; negative: do not retry.
	BusyRetry time.Duration

	// Attach is how Open attaches the XDP program when it loads it: ""
	// (driver mode, else generic), AttachDriver or AttachGeneric. On veth,
	// generic mode skips a copy and can be faster; see the benchmarks.
	Attach string

	// Steering, when set, is an already attached XDP program whose XSKMAP
	// Open fills with the sockets (and clears on Close); the caller keeps
	// ownership of the program. When nil, Open loads package bpf's program,
	// attaches it to the interface and detaches it on Close.
	Steering Steering
}

// Steering is the part of an XDP program Open needs: an XSKMAP from queue
// index to socket.
type Steering interface {
	SetSocket(queue, fd int) error
	ClearSocket(queue int) error
}

// withDefaults checks c and fills in the defaults.
func (c Config) withDefaults() (Config, error) {
	if len(c.Queues) == 0 {
		c.Queues = []int{0}
	}
	seen := make(map[int]bool, len(c.Queues))
	for _, q := range c.Queues {
		if q < 0 || seen[q] {
			return c, fmt.Errorf("config: bad or repeated queue %d", q)
		}
		seen[q] = true
	}
	switch c.Mode {
	case ModeAuto, ModeZeroCopy, ModeCopy:
	default:
		return c, fmt.Errorf("config: unknown mode %q", c.Mode)
	}
	switch c.Attach {
	case AttachAuto, AttachDriver, AttachGeneric:
	default:
		return c, fmt.Errorf("config: unknown attach mode %q", c.Attach)
	}
	if c.FrameSize == 0 {
		c.FrameSize = 4096
	}
	if c.FrameSize != 2048 && c.FrameSize != 4096 {
		return c, fmt.Errorf("config: frame size %d: want 2048 or 4096", c.FrameSize)
	}
	if c.Headroom < 0 || c.Headroom > c.FrameSize/2 {
		return c, fmt.Errorf("config: headroom %d out of range [0, %d]", c.Headroom, c.FrameSize/2)
	}
	if c.RingSize == 0 {
		c.RingSize = 2048
	}
	if c.RingSize < 64 || c.RingSize&(c.RingSize-1) != 0 || c.RingSize > 1<<16 {
		return c, fmt.Errorf("config: ring size %d: want a power of two in [64, 65536]", c.RingSize)
	}
	if c.RxFrames == 0 {
		c.RxFrames = 2 * c.RingSize
	}
	if c.TxFrames == 0 {
		c.TxFrames = c.RingSize
	}
	if c.RxFrames < 1 || c.TxFrames < 1 {
		return c, fmt.Errorf("config: need at least one rx and one tx frame")
	}
	if c.LinearBuffers == 0 {
		c.LinearBuffers = 512
	}
	if c.BusyPollBudget == 0 {
		c.BusyPollBudget = 64
	}
	if c.BusyRetry == 0 {
		c.BusyRetry = 2 * time.Second
	}
	if c.Spin < 0 {
		return c, fmt.Errorf("config: negative spin time")
	}
	if c.BusyPoll < 0 {
		return c, fmt.Errorf("config: negative busy poll time")
	}
	return c, nil
}
