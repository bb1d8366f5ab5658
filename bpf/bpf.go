// Package bpf holds the XDP program that steers RoCE v2 frames to AF_XDP
// sockets and leaves every other frame to the kernel.
//
// RoCE v2 (IBTA Vol. 1 Release 1.4, Annex A17 "RoCE v2") carries the
// InfiniBand transport over UDP destination port 4791 on IPv4 or IPv6. The
// program, written instruction by instruction with github.com/cilium/ebpf/asm
// (no C, no clang, nothing generated), parses
//
//	Ethernet [802.1Q] | IPv4 (IHL 5, not a fragment) or IPv6 (next header UDP) | UDP dst 4791
//
// and returns bpf_redirect_map(xsks_map, rx_queue_index, XDP_PASS): the frame
// goes to the AF_XDP socket registered for the receive queue it arrived on,
// or, when that queue has no socket, up the kernel's stack as if the program
// were not there (the fallback action in the flags argument needs Linux 5.3).
// Everything else — ARP, TCP, other UDP, IPv4 with options, fragments,
// truncated frames — gets XDP_PASS, so the host's own traffic is untouched.
// Each packet access is bounds-checked against data_end, as the verifier
// (kernel/bpf/verifier.c) requires.
//
// # Loss injection
//
// The program can also drop a fraction of the RoCE v2 frames it would
// redirect, each independently at random, before the redirect: SetLoss(p)
// stores a threshold in a one-entry array map, and the program drops a
// RoCE frame with XDP_DROP when bpf_get_prandom_u32() is below it. Frames
// that are not RoCE are never dropped, and with no loss set (the default)
// the check costs a load and a compare. Per-CPU counters of redirected and dropped frames are
// read with Counters. This is how xroce injects loss on a link (its lossy
// tests and `xroce lab`) where netem is missing (a kernel without
// CONFIG_NET_SCH_NETEM) or cannot see the traffic: AF_XDP bypasses qdiscs
// and netfilter, since copy-mode transmit hands frames straight to the
// driver and receive redirects them before netfilter. Set on the receiving
// end, it loses frames on their way in, whichever way they were sent.
//
// # CE marking
//
// In the same way SetMarkCE(p) makes the program mark a fraction of the
// ECN-capable RoCE v2 frames it redirects Congestion Experienced, as a
// congested switch does, before they reach the socket: how tests exercise
// RoCE v2 congestion control (CNPs, DCQCN) where no qdisc marks ECN (a
// kernel without sch_red) or cannot see the traffic (AF_XDP transmit skips
// the sender's qdiscs). The IPv4 checksum is updated as RFC 1624 says; the
// ICRC does not cover the TOS byte.
//
// Two variants exist: the plain one, and one loaded with BPF_F_XDP_HAS_FRAGS
// (Options.Frags) for multi-buffer XDP (Linux 5.18), which veth and most
// drivers require before they accept an MTU above one page minus headroom
// (about 3.5 KB on veth; attach fails with ERANGE otherwise). With frags the
// program sees only the first buffer, which always holds the headers.
//
// A Program is attached through a bpf_link (BPF_LINK_CREATE, Linux 5.9), in
// driver mode when the driver supports it and generic (SKB) mode otherwise,
// so it is detached when the link is closed or the process exits.
package bpf

import (
	"errors"
	"fmt"
)

// Sentinel errors for missing kernel features and privileges; errors.Is
// finds them in the errors Load, Attach and SetSocket return. Tests turn them
// into skips.
var (
	// ErrNoBPF: the kernel does not support BPF programs or maps here.
	ErrNoBPF = errors.New("bpf not supported by this kernel (need CONFIG_BPF_SYSCALL)")
	// ErrNoXDP: XDP programs, the XSKMAP or bpf_link XDP attachment are
	// missing (need Linux ≥ 5.9 with CONFIG_XDP_SOCKETS).
	ErrNoXDP = errors.New("xdp not supported by this kernel (need Linux >= 5.9 with CONFIG_XDP_SOCKETS)")
	// ErrNoFrags: the kernel does not know BPF_F_XDP_HAS_FRAGS (Linux < 5.18).
	ErrNoFrags = errors.New("multi-buffer xdp (frags) not supported by this kernel (need Linux >= 5.18)")
	// ErrPermission: the caller lacks the capabilities.
	ErrPermission = errors.New("need CAP_BPF and CAP_NET_ADMIN (run as root)")
	// ErrAttached: Attach was called on a Program that is already attached.
	ErrAttached = errors.New("program already attached")
	// ErrClosed: the Program was closed.
	ErrClosed = errors.New("program closed")
)

// Options configure Load. The zero value is the plain variant with 64 queues.
type Options struct {
	// Frags loads the multi-buffer variant (BPF_F_XDP_HAS_FRAGS), needed
	// for MTUs above about 3.5 KB.
	Frags bool
	// MaxQueues is the number of XSKMAP entries, one per NIC receive queue;
	// 0 means 64.
	MaxQueues int
}

// DefaultMaxQueues is the XSKMAP size when Options.MaxQueues is 0.
const DefaultMaxQueues = 64

// AttachMode says how a Program is attached to its interface.
type AttachMode int

// Attach modes.
const (
	// ModeNone: not attached.
	ModeNone AttachMode = iota
	// ModeDriver: native XDP in the driver's receive path (XDP_FLAGS_DRV_MODE).
	ModeDriver
	// ModeGeneric: generic XDP on the SKB path (XDP_FLAGS_SKB_MODE), slower,
	// for drivers without native XDP.
	ModeGeneric
)

// String returns "driver", "generic" or "none".
func (m AttachMode) String() string {
	switch m {
	case ModeNone:
		return "none"
	case ModeDriver:
		return "driver"
	case ModeGeneric:
		return "generic"
	default:
		return fmt.Sprintf("AttachMode(%d)", int(m))
	}
}

// Counters are the program's frame counters, summed over CPUs. They count
// RoCE v2 frames only; frames the program passes to the kernel are not
// counted.
type Counters struct {
	// Redirected is the number of frames bpf_redirect_map handed to an
	// AF_XDP socket (XDP_REDIRECT). The kernel can still drop one after
	// the program returns, when the socket's receive ring is full.
	Redirected uint64
	// InjectedDrops is the number of frames dropped (XDP_DROP) by the loss
	// that SetLoss injects.
	InjectedDrops uint64
	// MarkedCE is the number of frames SetMarkCE's marking set to CE.
	MarkedCE uint64
}
