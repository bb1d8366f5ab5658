package roce

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/qp"
)

// Sentinel errors; errors.Is finds them in the errors this package returns.
var (
	// ErrClosed: the device (or the object's device) was closed.
	ErrClosed = errors.New("roce: device closed")
	// ErrDestroyed: the QP, SRQ, CQ or PD was destroyed.
	ErrDestroyed = errors.New("roce: object destroyed")
	// ErrBusy: the object is still in use (an MR referenced by outstanding
	// work requests, a CQ or SRQ used by a QP, a PD with QPs or MRs).
	ErrBusy = errors.New("roce: resource in use")
	// ErrInvalid: an argument is out of range or of the wrong device.
	ErrInvalid = errors.New("roce: invalid argument")
	// ErrPin: the memory of a region could not be locked (mlock); raise
	// RLIMIT_MEMLOCK or grant CAP_IPC_LOCK, or set Config.NoPin.
	ErrPin = errors.New("roce: cannot pin memory region (raise RLIMIT_MEMLOCK or grant CAP_IPC_LOCK)")
	// ErrUnreachable: address resolution found no route or no neighbour.
	ErrUnreachable = errors.New("roce: peer unreachable")
	// ErrCQOverflow: a completion queue was full and a completion was lost.
	ErrCQOverflow = errors.New("roce: completion queue overflow")
)

// Config configures NewDevice (and package nic's Open). The zero value
// gives the defaults.
type Config struct {
	// BusyPoll makes the workers spin on their links instead of sleeping:
	// lowest latency, one core per worker at 100%. CQ.Wait then sleeps on
	// the CQ's notification. Default: blocking mode.
	BusyPoll bool
	// Spin trades CPU for latency: the goroutine that watches a link
	// (recv.go) polls it that long before it sleeps. A spinning goroutine
	// holds a P (and a core) that others may need, the peer's included
	// when both run on one machine. Package nic sets it from XDP.Spin.
	Spin time.Duration
	// Batch is the most frames a worker receives at once; 0 means 64.
	Batch int
	// MaxMR is the number of memory region slots (keys) of the device; 0
	// means 4096, at most 1<<24.
	MaxMR int
	// NoPin registers memory regions without mlock.
	NoPin bool
	// Forward is the number of frames a worker can hold for another
	// worker (frames that arrive on one queue for a QP of another);
	// 0 means 1024.
	Forward int
	// MaxInflight bounds the request packets each worker's RC QPs
	// together have unacknowledged in the network (qp.EngineConfig):
	// beyond it QPs take turns, so that many QPs share the link instead
	// of overrunning the peer's receive ring. 0 means
	// qp.DefaultMaxInflight (512).
	MaxInflight int
	// LineRate is the port's speed in bits/s, DCQCN's highest rate and its
	// rate on a QP's first CNP. 0 means qp.DefaultLineRate (100 Gb/s);
	// the kernel's speed of a veth or tap says nothing, so it is not read.
	LineRate int64
	// PaceBurst is the default burst of the QPs' pacers in bytes
	// (qp.EngineConfig.PaceBurst); 0 means qp.DefaultPaceBurst.
	PaceBurst int
	// CC configures congestion control: ECT(0) on what the QPs send, CNPs
	// for CE-marked frames, DCQCN. The zero value is what ConnectX NICs
	// do by default (qp.CCConfig).
	CC CCConfig

	// Addrs are the device's IP addresses (its GIDs after the link-local
	// one).
	Addrs []netip.Addr
	// Neighbors are static IP → MAC entries that Resolve consults first.
	Neighbors map[netip.Addr]net.HardwareAddr
	// Resolver finds the peers that are not in Neighbors (package nic's
	// asks the kernel); nil: Resolve knows only Neighbors.
	Resolver Resolver
	// ResolveTimeout bounds Resolve's wait for the Resolver; 0 means 3 s.
	ResolveTimeout time.Duration

	// Closer, when set, is closed by Close (and by NewDevice when it
	// fails) after the workers stopped, in place of the links: whatever
	// opened them and must go with them, such as an xdp.Device and its
	// XDP program, and the Resolver. nil: the links are closed.
	Closer io.Closer

	// SequentialQPN numbers the QPs in order from 0x11, as rxe does, and
	// derives each QP's UDP source port from its number: the same numbers
	// every run, for captures and tests that compare them. By default QP
	// numbers and source ports are drawn from a generator seeded from
	// crypto/rand when the device opens, so that a peer off the path
	// cannot guess the QPN of a live connection to forge its packets or
	// the CM messages that name it (rxe's and ConnectX's are sequential).
	SequentialQPN bool

	// noGoroutines (tests) starts no worker goroutines and watches no
	// descriptor: Progress does all the work.
	noGoroutines bool
}

func (c Config) withDefaults() (Config, error) {
	if c.Batch == 0 {
		c.Batch = 64
	}
	if c.MaxMR == 0 {
		c.MaxMR = 4096
	}
	if c.Forward == 0 {
		c.Forward = 1024
	}
	if c.ResolveTimeout == 0 {
		c.ResolveTimeout = 3 * time.Second
	}
	switch {
	case c.Batch < 1 || c.Batch > 4096:
		return c, fmt.Errorf("config: batch %d out of range 1..4096: %w", c.Batch, ErrInvalid)
	case c.MaxMR < 1 || c.MaxMR > 1<<24-1:
		return c, fmt.Errorf("config: MaxMR %d out of range: %w", c.MaxMR, ErrInvalid)
	case c.Forward < 1:
		return c, fmt.Errorf("config: forward %d: %w", c.Forward, ErrInvalid)
	}
	return c, nil
}

// Info describes an open device.
type Info struct {
	Name      string           // interface (or first link) name
	Index     int              // interface index, 0 for links
	MAC       net.HardwareAddr // Ethernet address
	MTU       int              // interface MTU (IP packet size)
	ActiveMTU MTU              // the port's RoCE MTU: MTU − 80 rounded down, as rxe (1500 → 1024)
	Datapath  string           // the links' kind (link.Info.Kind): "af_xdp", "af_packet", "pipe"
	Mode      string           // link mode: "copy" or "zero-copy" for AF_XDP
	Queues    int              // workers, one per link
	BusyPoll  bool
	LineRate  int64 // bits/s, Config.LineRate (0: qp.DefaultLineRate)
}

// Device is a RoCE v2 device over one network interface (or a set of links):
// one worker goroutine per link runs the transport of the QPs sharded to
// it. All its methods, and those of the objects made from it, are safe for
// concurrent use.
type Device struct {
	cfg     Config
	info    Info
	gids    []netip.Addr
	local   []netip.Addr
	epoch   time.Time
	spin    time.Duration // Config.Spin
	workers []*worker
	closer  io.Closer // Config.Closer or the links, closed after the workers stop
	mrs     mrTable
	events  chan Event
	done    chan struct{} // closed by Close

	eventsDropped atomic.Uint64
	// readied is set when a CQ notification was delivered (see
	// CQ.signalLocked), which makes the goroutine waiting on it runnable
	// in the run queue of the goroutine that delivered it; that
	// goroutine yields before it sleeps on a link (watch.sleep).
	readied atomic.Bool

	// mu guards closed, nextQPN, qpnRand, rr and the object sets.
	mu      sync.Mutex
	closed  bool
	nextQPN uint32    // next QPN to try, 24-bit (SequentialQPN)
	qpnRand qpnSource // QPNs and UDP source ports (not SequentialQPN)
	rr      int       // round-robin worker for new QPs
	pds     map[*PD]struct{}
	cqs     map[*CQ]struct{}

	closeOnce sync.Once
	closeErr  error
}

// linksCloser closes a set of links.
type linksCloser []link.Link

func (l linksCloser) Close() error {
	var errs []error
	for _, x := range l {
		errs = append(errs, x.Close())
	}
	return errors.Join(errs...)
}

// NewDevice makes a device over the given links, one worker each: a
// network interface's queues (package nic's Open does this), or an
// in-memory link.NewPipe for tests and simulations. cfg.Addrs must name
// the device's IP addresses. The device owns the links (or cfg.Closer)
// and closes them on Close, also when NewDevice fails.
func NewDevice(links []link.Link, cfg Config) (*Device, error) {
	var closer io.Closer = linksCloser(links)
	if cfg.Closer != nil {
		closer = cfg.Closer
	}
	d, err := newDevice(links, closer, cfg)
	if err != nil {
		closer.Close()
		return nil, err
	}
	return d, nil
}

// activeMTU is the largest IB MTU not above the interface MTU minus 80
// (rxe's rule) whose frames fit maxFrame.
func activeMTU(mtu, maxFrame int) MTU {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= mtu-80 && qp.MaxFrameLen(m) <= maxFrame {
			return m
		}
	}
	return 0
}

// newDevice starts the workers over links; on error the caller closes closer.
func newDevice(links []link.Link, closer io.Closer, cfg Config) (*Device, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("roce: %w", err)
	}
	if len(links) == 0 || len(links) > 64 {
		return nil, fmt.Errorf("roce: %d links: %w", len(links), ErrInvalid)
	}
	li := links[0].Info()
	am := activeMTU(li.MTU, li.MaxFrame)
	if am == 0 {
		return nil, fmt.Errorf("roce: link MTU %d too small for RoCE: %w", li.MTU, ErrInvalid)
	}
	d := &Device{
		cfg:     cfg,
		epoch:   time.Now(),
		spin:    max(cfg.Spin, 0),
		closer:  closer,
		events:  make(chan Event, 256),
		done:    make(chan struct{}),
		nextQPN: 0x11,
		qpnRand: newQPNRand(),
		pds:     make(map[*PD]struct{}),
		cqs:     make(map[*CQ]struct{}),
		info: Info{
			Name: li.Name, Index: li.Index, MAC: li.MAC, MTU: li.MTU, ActiveMTU: am,
			Datapath: li.Kind, Mode: li.Mode, Queues: len(links), BusyPoll: cfg.BusyPoll, LineRate: cfg.LineRate,
		},
	}
	d.mrs.init(cfg.MaxMR, cfg.NoPin)
	d.gids = gidTable(li.MAC, cfg.Addrs)
	for _, g := range d.gids {
		d.local = append(d.local, g.Unmap())
	}
	for i, l := range links {
		w, err := newWorker(d, i, l, len(links))
		if err != nil {
			return nil, err
		}
		d.workers = append(d.workers, w)
	}
	for _, w := range d.workers {
		if cfg.noGoroutines {
			close(w.done)
			continue
		}
		go w.run()
	}
	return d, nil
}

// gidTable builds the GID table as rxe does: index 0 is the link-local
// fe80::/64 address made from the MAC (EUI-64), then each address, IPv4 ones
// as IPv4-mapped IPv6 (::ffff:a.b.c.d), without repeats.
func gidTable(mac net.HardwareAddr, addrs []netip.Addr) []netip.Addr {
	var gids []netip.Addr
	if len(mac) == 6 {
		var b [16]byte
		b[0], b[1] = 0xfe, 0x80
		b[8], b[9], b[10] = mac[0]^2, mac[1], mac[2]
		b[11], b[12] = 0xff, 0xfe
		b[13], b[14], b[15] = mac[3], mac[4], mac[5]
		gids = append(gids, netip.AddrFrom16(b))
	}
	for _, a := range addrs {
		g := netip.AddrFrom16(a.WithZone("").As16())
		dup := false
		for _, x := range gids {
			dup = dup || x == g
		}
		if !dup && a.IsValid() {
			gids = append(gids, g)
		}
	}
	return gids
}

// Info describes the device and the datapath it got.
func (d *Device) Info() Info { return d.info }

// GIDs returns the GID table: 16-byte addresses, index 0 the link-local one.
func (d *Device) GIDs() []netip.Addr { return append([]netip.Addr(nil), d.gids...) }

// GID returns the GID at index i.
func (d *Device) GID(i int) (netip.Addr, error) {
	if i < 0 || i >= len(d.gids) {
		return netip.Addr{}, fmt.Errorf("roce: gid index %d of %d: %w", i, len(d.gids), ErrInvalid)
	}
	return d.gids[i], nil
}

// now is the device's monotonic clock for the engines.
func (d *Device) now() time.Duration { return time.Since(d.epoch) }

// EventType is the kind of an asynchronous event.
type EventType uint8

// Asynchronous events (after ibv_event_type).
const (
	EventCQError         EventType = iota + 1 // a CQ overflowed; completions were lost
	EventQPFatal                              // a QP went to ERR because of an error
	EventSRQLimitReached                      // an SRQ fell below its armed limit
	// EventQPLastWQEReached: a QP on an SRQ entered ERR and will take no
	// more requests from it; after it the QP can be destroyed without
	// losing a receive completion.
	EventQPLastWQEReached
)

func (t EventType) String() string {
	switch t {
	case EventCQError:
		return "CQ_ERR"
	case EventQPFatal:
		return "QP_FATAL"
	case EventSRQLimitReached:
		return "SRQ_LIMIT_REACHED"
	case EventQPLastWQEReached:
		return "QP_LAST_WQE_REACHED"
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is an asynchronous event (ibv_async_event).
type Event struct {
	Type EventType
	QPN  uint32 // EventQPFatal, EventQPLastWQEReached
	CQ   *CQ    // EventCQError
	SRQ  *SRQ   // EventSRQLimitReached
}

// Events returns the channel of asynchronous events. It is buffered; when
// nobody reads it and it is full, further events are counted in
// Stats().EventsDropped.
func (d *Device) Events() <-chan Event { return d.events }

func (d *Device) event(e Event) {
	select {
	case d.events <- e:
	default:
		d.eventsDropped.Add(1)
	}
}

// Stats are a device's counters, summed over its workers.
type Stats struct {
	RxFrames, TxFrames     uint64 // frames into and out of the engines
	RxDropped              uint64 // frames the engines dropped (malformed, bad ICRC, unknown QP, wrong address)
	RxBadICRC, RxUnknownQP uint64
	TxNoBuffer             uint64 // the link had no transmit buffer
	Retransmits, Timeouts  uint64
	WindowCuts             uint64 // requester windows halved for a loss
	RNRNaksRx, RNRNaksTx   uint64
	SeqNaksRx, SeqNaksTx   uint64
	ErrNaksTx              uint64
	Duplicates             uint64
	ToError                uint64 // QPs moved to ERR by an error
	RxBytes, TxBytes       uint64 // bytes of the frames into and out of the engines
	// Error NAKs by kind (ErrNaksTx is the sum of the three sent).
	InvReqNaksRx, RemAccessNaksRx, RemOpNaksRx uint64
	InvReqNaksTx, RemAccessNaksTx, RemOpNaksTx uint64
	// Why frames were dropped (each also in RxDropped, but RxOutOfSeq):
	// malformed, tagged for a VLAN other than 0, not to one of our
	// addresses, QP in the wrong state,
	// P_Key/Q_Key mismatch, not from the QP's peer, no receive request,
	// refused (bad sequence, length or access, stray response); RC
	// requests after a PSN gap discarded until go-back-N.
	RxMalformed, RxWrongVLAN, RxWrongAddress             uint64
	RxBadState, RxBadKey, RxNotPeer, RxNoRecv, RxInvalid uint64
	RxOutOfSeq                                           uint64
	Forwarded                                            uint64 // frames handed from one worker to another
	ForwardDropped                                       uint64 // frames lost because the other worker's queue was full
	TxDropped                                            uint64 // frames the links could not send
	EventsDropped                                        uint64
	LinkErrors                                           uint64 // Receive errors other than a closed link
	Links                                                []link.Stats
	Batches                                              uint64 // worker loop iterations that found work
	CQOverflows                                          uint64
	MRs                                                  int // registered memory regions
	PinnedPages                                          int
	LinkRxFrames, LinkTxFrames                           uint64 // frames the links moved
	LinkRxBytes, LinkTxBytes                             uint64
	// Frames and batches received by Progress callers, and by
	// goroutines waiting in CQ.Wait that watched the link themselves
	// (recv.go); Handovers counts the times such a waiter took the link
	// over from the worker goroutine, Standbys the times that goroutine
	// woke (for its deadline) while a waiter or Progress callers had it.
	PolledFrames, PolledBatches uint64
	WaiterFrames, WaiterBatches uint64
	Handovers, Standbys         uint64
	// Congestion control: CE-marked data frames received, CNPs sent and
	// received, CNPs dropped as invalid, DCQCN rate cuts.
	RxCE, TxCNP, RxCNP, RxBadCNP, RateCuts uint64
}

// Stats returns a snapshot of the device's counters.
func (d *Device) Stats() Stats {
	var s Stats
	for _, w := range d.workers {
		e := w.eng.Stats()
		s.RxFrames += e.RxFrames.Load()
		s.TxFrames += e.TxFrames.Load()
		s.RxDropped += e.RxDropped.Load()
		s.RxBadICRC += e.RxBadICRC.Load()
		s.RxUnknownQP += e.RxUnknownQP.Load()
		s.TxNoBuffer += e.TxNoBuffer.Load()
		s.Retransmits += e.Retransmits.Load()
		s.Timeouts += e.Timeouts.Load()
		s.WindowCuts += e.WindowCuts.Load()
		s.RNRNaksRx += e.RNRNaksRx.Load()
		s.RNRNaksTx += e.RNRNaksTx.Load()
		s.SeqNaksRx += e.SeqNaksRx.Load()
		s.SeqNaksTx += e.SeqNaksTx.Load()
		s.ErrNaksTx += e.ErrNaksTx.Load()
		s.Duplicates += e.Duplicates.Load()
		s.ToError += e.ToError.Load()
		s.RxBytes += e.RxBytes.Load()
		s.TxBytes += e.TxBytes.Load()
		s.InvReqNaksRx += e.InvReqNaksRx.Load()
		s.RemAccessNaksRx += e.RemAccessNaksRx.Load()
		s.RemOpNaksRx += e.RemOpNaksRx.Load()
		s.InvReqNaksTx += e.InvReqNaksTx.Load()
		s.RemAccessNaksTx += e.RemAccessNaksTx.Load()
		s.RemOpNaksTx += e.RemOpNaksTx.Load()
		s.RxMalformed += e.RxMalformed.Load()
		s.RxWrongVLAN += e.RxWrongVLAN.Load()
		s.RxWrongAddress += e.RxWrongAddress.Load()
		s.RxBadState += e.RxBadState.Load()
		s.RxBadKey += e.RxBadKey.Load()
		s.RxNotPeer += e.RxNotPeer.Load()
		s.RxNoRecv += e.RxNoRecv.Load()
		s.RxInvalid += e.RxInvalid.Load()
		s.RxOutOfSeq += e.RxOutOfSeq.Load()
		s.RxCE += e.RxCE.Load()
		s.TxCNP += e.TxCNP.Load()
		s.RxCNP += e.RxCNP.Load()
		s.RxBadCNP += e.RxBadCNP.Load()
		s.RateCuts += e.RateCuts.Load()
		s.Forwarded += w.forwarded.Load()
		s.ForwardDropped += w.fwdDropped.Load()
		s.TxDropped += w.txDropped.Load()
		s.Batches += w.batches.Load()
		s.PolledFrames += w.polledFrames.Load()
		s.PolledBatches += w.polledBatches.Load()
		s.WaiterFrames += w.waiterFrames.Load()
		s.WaiterBatches += w.waiterBatches.Load()
		s.Handovers += w.handovers.Load()
		s.Standbys += w.standbys.Load()
		s.LinkErrors += w.linkErrors.Load()
		ls := w.link.Stats()
		s.Links = append(s.Links, ls)
		s.LinkRxFrames += ls.RxFrames
		s.LinkTxFrames += ls.TxFrames
		s.LinkRxBytes += ls.RxBytes
		s.LinkTxBytes += ls.TxBytes
	}
	s.EventsDropped = d.eventsDropped.Load()
	d.mu.Lock()
	for c := range d.cqs {
		s.CQOverflows += c.overflows.Load()
	}
	d.mu.Unlock()
	s.MRs, s.PinnedPages = d.mrs.counts()
	return s
}

// Close stops the device: every QP is moved to ERR, so that its
// outstanding work requests complete with WR_FLUSH_ERR on their CQs, the
// workers stop, the links (or Config.Closer) are closed and
// every memory region is unpinned. Objects of the device return ErrClosed
// afterwards; CQs can still be polled for the flushed completions. Close is
// idempotent.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
		close(d.done)
		for _, w := range d.workers {
			w.shutdown()
		}
		var errs []error
		if d.closer != nil {
			errs = append(errs, d.closer.Close())
		}
		d.mrs.closeAll()
		d.closeErr = errors.Join(errs...)
		if d.closeErr != nil {
			d.closeErr = fmt.Errorf("roce: close: %w", d.closeErr)
		}
	})
	return d.closeErr
}

// isClosed reports whether Close has begun.
func (d *Device) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}
