package bpf

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// bpfFXDPHasFrags is BPF_F_XDP_HAS_FRAGS (include/uapi/linux/bpf.h).
const bpfFXDPHasFrags = 1 << 5

// verifierTail is how many lines of the verifier log a load error quotes.
const verifierTail = 20

// A Program is the loaded XDP program with its maps (the XSKMAP, the loss
// threshold, the counters), attached to at most one interface at a time.
//
// All methods may be called from any goroutine.
type Program struct {
	opts     Options
	insns    asm.Instructions
	prog     *ebpf.Program
	xsks     *ebpf.Map
	loss     *ebpf.Map // array, one u32: the loss threshold
	counters *ebpf.Map // per-CPU array, one struct counters

	// mu guards the attachment, the loss threshold and closed. Map
	// updates, lookups and test runs hold it shared, so Close cannot close
	// the descriptors under them; SetLoss holds it exclusively, so the map
	// and threshold agree.
	mu        sync.RWMutex
	link      link.Link
	mode      AttachMode
	ifindex   int
	threshold uint32 // loss_map[0].loss
	mark      uint32 // loss_map[0].mark
	closed    bool
}

// Load creates the maps and loads the program into the kernel, with no loss
// injected. A program the verifier rejects comes back as an error quoting
// the end of the verifier log; missing features and privileges wrap
// ErrNoBPF, ErrNoXDP, ErrNoFrags or ErrPermission.
func Load(opts Options) (*Program, error) {
	if opts.MaxQueues < 0 {
		return nil, fmt.Errorf("load xdp program: MaxQueues %d < 0", opts.MaxQueues)
	}
	if opts.MaxQueues == 0 {
		opts.MaxQueues = DefaultMaxQueues
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later ones
	// use memory cgroups and this does nothing.
	if err := rlimit.RemoveMemlock(); err != nil && !errors.Is(err, unix.EPERM) {
		return nil, fmt.Errorf("load xdp program: raise memlock limit: %w", err)
	}

	// Until the program is loaded, every return closes the maps made so far.
	var maps []*ebpf.Map
	loaded := false
	defer func() {
		if !loaded {
			for _, m := range maps {
				m.Close()
			}
		}
	}()
	newMap := func(what string, spec *ebpf.MapSpec) (*ebpf.Map, error) {
		m, err := ebpf.NewMap(spec)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", what, classify(err))
		}
		maps = append(maps, m)
		return m, nil
	}
	xsks, err := newMap("xskmap", &ebpf.MapSpec{
		Name:       mapSymbol,
		Type:       ebpf.XSKMap,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: uint32(opts.MaxQueues),
	})
	if err != nil {
		return nil, err
	}
	// The program only reads the thresholds: BPF_F_RDONLY_PROG (Linux 5.2).
	loss, err := newMap("loss map", &ebpf.MapSpec{
		Name:       lossSymbol,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  thresholdsSize,
		MaxEntries: 1,
		Flags:      unix.BPF_F_RDONLY_PROG,
	})
	if err != nil {
		return nil, err
	}
	counters, err := newMap("counters map", &ebpf.MapSpec{
		Name:       countersSymbol,
		Type:       ebpf.PerCPUArray,
		KeySize:    4,
		ValueSize:  countersSize,
		MaxEntries: 1,
	})
	if err != nil {
		return nil, err
	}

	insns := instructions()
	for _, a := range []struct {
		sym string
		m   *ebpf.Map
	}{{mapSymbol, xsks}, {lossSymbol, loss}, {countersSymbol, counters}} {
		if err := insns.AssociateMap(a.sym, a.m); err != nil {
			return nil, fmt.Errorf("load xdp program: %w", err)
		}
	}
	prog, err := loadProgram(insns, opts.Frags)
	if err != nil {
		return nil, err
	}
	loaded = true
	return &Program{opts: opts, insns: insns, prog: prog, xsks: xsks, loss: loss, counters: counters}, nil
}

func loadProgram(insns asm.Instructions, frags bool) (*ebpf.Program, error) {
	spec := &ebpf.ProgramSpec{
		Name:         "xroce_xdp",
		Type:         ebpf.XDP,
		AttachType:   ebpf.AttachXDP,
		Instructions: insns,
		License:      "Dual MIT/GPL",
	}
	if frags {
		spec.Flags = bpfFXDPHasFrags
	}
	prog, err := ebpf.NewProgram(spec)
	if err == nil {
		return prog, nil
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) && len(ve.Log) > 0 {
		log := ve.Log
		if len(log) > verifierTail {
			log = log[len(log)-verifierTail:]
		}
		return nil, fmt.Errorf("load xdp program: verifier rejected it (log tail:\n%s\n): %w",
			strings.Join(log, "\n"), classify(err))
	}
	if frags && errors.Is(err, unix.EINVAL) {
		// An old kernel refuses the unknown flag: tell so if the plain
		// variant loads.
		spec.Flags = 0
		if plain, perr := ebpf.NewProgram(spec); perr == nil {
			plain.Close()
			return nil, fmt.Errorf("load xdp program: %w: %w", ErrNoFrags, err)
		}
	}
	return nil, fmt.Errorf("load xdp program: %w", classify(err))
}

// classify adds the matching sentinel error to a kernel error.
func classify(err error) error {
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: %w", ErrPermission, err)
	case errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("%w: %w", ErrNoBPF, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("%w: %w", ErrNoXDP, err)
	}
	return err
}

// Instructions returns the program as loaded (a copy), for tests and docs;
// print it with %v.
func (p *Program) Instructions() asm.Instructions {
	out := make(asm.Instructions, len(p.insns))
	copy(out, p.insns)
	return out
}

// Options returns the options the program was loaded with, defaults filled in.
func (p *Program) Options() Options { return p.opts }

// FD returns the program's file descriptor (for netlink attachment by hand
// or BPF_PROG_TEST_RUN); it is valid until Close.
func (p *Program) FD() int { return p.prog.FD() }

// MapFD returns the XSKMAP's file descriptor; it is valid until Close.
func (p *Program) MapFD() int { return p.xsks.FD() }

// Run runs the program once on frame with BPF_PROG_TEST_RUN on receive queue
// 0 and returns its verdict (XDPPass, XDPRedirect, ...). It does not send
// anything anywhere: a redirect is only reported.
func (p *Program) Run(frame []byte) (uint32, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return 0, ErrClosed
	}
	ret, err := p.prog.Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		return 0, fmt.Errorf("test run xdp program: %w", classify(err))
	}
	return ret, nil
}

// Attach attaches the program to the interface with index ifindex through a
// bpf_link, in driver mode if the driver supports native XDP and in generic
// mode otherwise, and returns the mode it got. The index is looked up in the
// network namespace of the calling thread. Driver mode can fail where
// generic succeeds for reasons worth knowing (an MTU too large for the plain
// variant, ERANGE); use AttachWithMode(ifindex, ModeDriver) to see them.
func (p *Program) Attach(ifindex int) (AttachMode, error) {
	return p.AttachWithMode(ifindex, ModeNone)
}

// AttachWithMode is Attach with the mode forced: ModeDriver or ModeGeneric
// try only that mode, ModeNone tries driver then generic.
func (p *Program) AttachWithMode(ifindex int, mode AttachMode) (AttachMode, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ModeNone, ErrClosed
	}
	if p.link != nil {
		return ModeNone, fmt.Errorf("attach xdp to ifindex %d: %w (ifindex %d)", ifindex, ErrAttached, p.ifindex)
	}
	try := func(m AttachMode) error {
		flags := link.XDPDriverMode
		if m == ModeGeneric {
			flags = link.XDPGenericMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: flags})
		if err != nil {
			return attachHint(err, p.opts.Frags)
		}
		p.link, p.mode, p.ifindex = l, m, ifindex
		return nil
	}
	switch mode {
	case ModeDriver, ModeGeneric:
		if err := try(mode); err != nil {
			return ModeNone, fmt.Errorf("attach xdp to ifindex %d in %s mode: %w", ifindex, mode, err)
		}
		return mode, nil
	case ModeNone:
		derr := try(ModeDriver)
		if derr == nil {
			return ModeDriver, nil
		}
		gerr := try(ModeGeneric)
		if gerr == nil {
			return ModeGeneric, nil
		}
		return ModeNone, fmt.Errorf("attach xdp to ifindex %d: driver mode: %w; generic mode: %w", ifindex, derr, gerr)
	}
	return ModeNone, fmt.Errorf("attach xdp to ifindex %d: unknown mode %s", ifindex, mode)
}

// attachHint says what to do about the usual attach failures.
func attachHint(err error, frags bool) error {
	switch {
	case errors.Is(err, unix.ERANGE) && !frags:
		return fmt.Errorf("mtu too large for single-buffer xdp, load with Options.Frags: %w", err)
	case errors.Is(err, unix.ERANGE):
		return fmt.Errorf("mtu too large for xdp on this device: %w", err)
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		return fmt.Errorf("another xdp program is attached to the interface: %w", err)
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("no such interface: %w", err)
	}
	return classify(err)
}

// Mode returns how the program is attached, ModeNone if it is not.
func (p *Program) Mode() AttachMode {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.mode
}

// Ifindex returns the index of the interface the program is attached to, 0
// if none.
func (p *Program) Ifindex() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.ifindex
}

// SetSocket registers the AF_XDP socket fd for receive queue queue: RoCE
// frames arriving on that queue go to it. The socket must be bound to the
// interface and queue.
func (p *Program) SetSocket(queue int, fd int) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if err := p.checkQueue(queue); err != nil {
		return fmt.Errorf("set xsk for queue %d: %w", queue, err)
	}
	if fd < 0 {
		return fmt.Errorf("set xsk for queue %d: bad fd %d", queue, fd)
	}
	if err := p.xsks.Put(uint32(queue), uint32(fd)); err != nil {
		return fmt.Errorf("set xsk for queue %d: %w", queue, classify(err))
	}
	return nil
}

// ClearSocket removes queue's socket: its RoCE frames go up the kernel's
// stack again. Clearing an empty queue is not an error.
func (p *Program) ClearSocket(queue int) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if err := p.checkQueue(queue); err != nil {
		return fmt.Errorf("clear xsk for queue %d: %w", queue, err)
	}
	err := p.xsks.Delete(uint32(queue))
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("clear xsk for queue %d: %w", queue, classify(err))
	}
	return nil
}

// checkQueue needs mu held.
func (p *Program) checkQueue(queue int) error {
	if p.closed {
		return ErrClosed
	}
	if queue < 0 || queue >= p.opts.MaxQueues {
		return fmt.Errorf("queue out of range [0, %d)", p.opts.MaxQueues)
	}
	return nil
}

// Detach detaches the program from its interface. It is idempotent.
func (p *Program) Detach() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.detachLocked()
}

func (p *Program) detachLocked() error {
	if p.link == nil {
		return nil
	}
	err := p.link.Close()
	p.link, p.mode, p.ifindex = nil, ModeNone, 0
	if err != nil {
		return fmt.Errorf("detach xdp: %w", err)
	}
	return nil
}

// Close detaches the program and releases the program and its maps. It is
// idempotent.
func (p *Program) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return errors.Join(p.detachLocked(), p.prog.Close(), p.xsks.Close(), p.loss.Close(), p.counters.Close())
}
