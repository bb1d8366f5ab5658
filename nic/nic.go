// Package nic opens RoCE v2 devices (package roce) on Linux network
// interfaces: it opens the datapath, AF_XDP sockets one per NIC queue
// (package xdp) fed by package bpf's XDP program, or one AF_PACKET socket
// (package afpacket), makes a roce.Device over its links, and gives the
// device a Resolver that finds peers' Ethernet addresses through the
// kernel's routing and neighbour tables (rtnetlink), as the kernel's rxe
// driver uses them.
//
// Open with DatapathAuto tries AF_XDP first and falls back to AF_PACKET
// when AF_XDP cannot be opened (no kernel support, no privilege, a driver
// or configuration it refuses); Device.Fallback says why, and a program
// should tell its user, since AF_PACKET moves frames through the kernel's
// network stack and is the slower of the two.
package nic

import (
	"errors"

	"github.com/xroce/xroce/afpacket"
	"github.com/xroce/xroce/roce"
	"github.com/xroce/xroce/xdp"
)

// Datapath values for Config.Datapath; the last two are also the
// roce.Info.Datapath of the devices that Open makes.
const (
	DatapathAuto     = ""          // AF_XDP if it opens, else AF_PACKET (Device.Fallback says why)
	DatapathXDP      = "af_xdp"    // AF_XDP sockets (package xdp)
	DatapathAFPacket = "af_packet" // one AF_PACKET socket (package afpacket)
)

// ErrNoDatapath: neither AF_XDP nor AF_PACKET could be opened.
var ErrNoDatapath = errors.New("nic: no datapath available (AF_XDP and AF_PACKET both failed)")

// Config configures Open. The zero value gives the defaults.
type Config struct {
	// Device configures the roce.Device. Open reads Device.Addrs from the
	// interface when it is empty, supplies a Resolver of the interface
	// when Device.Resolver is nil, and sets Device.Closer to close what it
	// opened (and then the caller's Device.Closer, if any).
	Device roce.Config
	// Datapath is DatapathAuto (default), DatapathXDP or
	// DatapathAFPacket.
	Datapath string
	// Queues is the number of NIC queues, queues 0 to Queues-1, with one
	// AF_XDP socket and one device worker each. 0 means all the
	// interface's receive queues (at most 64): RoCE frames the NIC steers
	// to a queue without a socket go to the kernel and are lost, so serve
	// them all (or steer RoCE to the served queues with ethtool).
	// AF_PACKET always uses one.
	Queues int
	// XDP configures the AF_XDP sockets; Open fills in XDP.Queues. Set
	// XDP.Steering to supply your own attached XDP program
	// (Device.XDPProgram gives the one Open loaded, for example to inject
	// loss with bpf.Program.SetLoss). XDP.Spin, when Device.Spin is 0,
	// becomes Device.Spin: the goroutine watching a socket polls it that
	// long before it sleeps.
	XDP xdp.Config
	// AFPacket configures the AF_PACKET socket.
	AFPacket afpacket.Config
}
