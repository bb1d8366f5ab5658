//go:build linux

package rping

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
)

// xroce rping is rdma-core's rping (librdmacm/examples/rping.c, rdma-core
// 44 as Debian bookworm ships it), so that either end can be the
// original: the same flags read the same way, the same connection (RC
// over RDMA_PS_TCP, responder resources and initiator depth 1, retry and
// RNR retry 7), the same per-ping exchange and the same lines on stdout
// and stderr, with the same exit statuses.
//
// Each ping: the client SENDs the address, rkey and length of its start
// buffer (struct rping_rdma_info, 16 bytes big-endian); the server RDMA
// READs the ping data from it and SENDs 16 zero bytes to go on; the
// client SENDs its sink buffer's; the server RDMA WRITEs the data back
// into it and SENDs again; the client checks it (-V) and prints it (-v).

// Cmd is xroce rping.
var Cmd = base.Command{Name: "rping", Summary: "RDMA CM ping-pong (READ and WRITE) with a peer, as rdma-core's rping", Run: runRping}

// rping's defaults and limits (rping.c).
const (
	rpingSize    = 64
	rpingBufSize = 64 * 1024 // RPING_BUFSIZE: -S must be below it
	// rpingMinSize is RPING_MIN_BUFSIZE: sizeof "INT_MAX" (the macro's
	// name, stringified unexpanded) plus sizeof "rdma-ping-%d: ".
	rpingMinSize = 8 + 15
	rpingSQDepth = 16 // RPING_SQ_DEPTH: send queue; the CQ has twice as many entries
	// rpingMaxQuirkSize bounds the sizes outside rping's range that its
	// argument quirk (see parseRping) lets through.
	rpingMaxQuirkSize = 1 << 24
)

// rpingState is rping's enum test_state; error messages print the number.
type rpingState int

const (
	rpIdle rpingState = iota + 1
	rpConnectRequest
	rpAddrResolved
	rpRouteResolved
	rpConnected
	rpReadAdv
	rpReadComplete
	rpWriteAdv
	rpWriteComplete
	rpDisconnected
	rpError
)

var rpingStateNames = [...]string{rpIdle: "IDLE", rpConnectRequest: "CONNECT_REQUEST", rpAddrResolved: "ADDR_RESOLVED",
	rpRouteResolved: "ROUTE_RESOLVED", rpConnected: "CONNECTED", rpReadAdv: "RDMA_READ_ADV",
	rpReadComplete: "RDMA_READ_COMPLETE", rpWriteAdv: "RDMA_WRITE_ADV", rpWriteComplete: "RDMA_WRITE_COMPLETE",
	rpDisconnected: "DISCONNECTED", rpError: "ERROR"}

// String returns the state's name in rping.c.
func (s rpingState) String() string {
	if s < rpIdle || s > rpError {
		return "rpingState(" + strconv.Itoa(int(s)) + ")"
	}
	return rpingStateNames[s]
}

// rpingOptions is rping's command line.
type rpingOptions struct {
	server     int        // -s 1, -c 0, neither -1
	addr       netip.Addr // -a: the server's (client) or bound (server) address; 0.0.0.0 by default
	src        netip.Addr // -I: the client's source address; invalid if not given
	port       uint16     // -p
	count      int        // -C: pings, 0 for ever
	size       int        // -S
	verbose    bool       // -v
	validate   bool       // -V
	debug      bool       // -d
	persistent bool       // -P
	selfQP     bool       // -q
}

// rpingUsage prints rping's usage (to stdout, as rping does).
func rpingUsage(w io.Writer) {
	fmt.Fprint(w, "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n"+
		"rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n"+
		"\t-c\t\tclient side\n"+
		"\t-I\t\tSource address to bind to for client.\n"+
		"\t-s\t\tserver side.  To bind to any address with IPv6 use -a ::0\n"+
		"\t-v\t\tdisplay ping data to stdout\n"+
		"\t-V\t\tvalidate ping data\n"+
		"\t-d\t\tdebug printfs\n"+
		"\t-S size \tping data size\n"+
		"\t-C count\tping count times\n"+
		"\t-a addr\t\taddress\n"+
		"\t-p port\t\tport\n"+
		"\t-P\t\tpersistent server mode allowing multiple connections\n"+
		"\t-q\t\tuse self-created, self-modified QP\n")
}

// EINVAL is rping's status for a bad command line.
const rpingEINVAL = 22

// parseRping reads rping's command line as rping's main does, printing
// what it prints. It returns the options, or done with the exit status:
// usage (stdout) and 22 for an unknown flag or neither -s nor -c; 22 for
// a bad -S or -C (unless a later -a or -I succeeded: rping's ret is
// overwritten, a quirk kept here); getaddrinfo's code for an address
// that does not resolve.
func parseRping(ctx context.Context, stdout, stderr io.Writer, args []string) (o *rpingOptions, code int, done bool) {
	o = &rpingOptions{server: -1, addr: netip.IPv4Unspecified(), port: rdmacm.RpingPort, size: rpingSize}
	debugf := func(format string, a ...any) {
		if o.debug {
			fmt.Fprintf(stdout, format, a...)
		}
	}
	getAddr := func(s string, to *netip.Addr) int {
		a, gerr := rdmacm.LookupAddr(ctx, s, false)
		if gerr != nil {
			fmt.Fprintf(stdout, "getaddrinfo failed (%s) - invalid hostname or IP address\n", gerr.Msg)
			return gerr.Code
		}
		*to = a
		return 0
	}
	ret := 0
	opts, _ := base.Getopt(args, "a:I:Pp:C:S:t:scvVdq")
	for _, op := range opts {
		switch op.C {
		case 'a':
			ret = getAddr(op.Arg, &o.addr)
		case 'I':
			ret = getAddr(op.Arg, &o.src)
		case 'P':
			o.persistent = true
		case 'p':
			o.port = uint16(base.Atoi(op.Arg))
			debugf("port %d\n", base.Atoi(op.Arg))
		case 's':
			o.server = 1
			debugf("server\n")
		case 'c':
			o.server = 0
			debugf("client\n")
		case 'S':
			o.size = base.Atoi(op.Arg)
			if o.size < rpingMinSize || o.size > rpingBufSize-1 {
				fmt.Fprintf(stderr, "Invalid size %d (valid range is %d to %d)\n", o.size, rpingMinSize, rpingBufSize)
				ret = rpingEINVAL
			} else {
				debugf("size %d\n", base.Atoi(op.Arg))
			}
		case 'C':
			o.count = base.Atoi(op.Arg)
			if o.count < 0 {
				fmt.Fprintf(stderr, "Invalid count %d\n", o.count)
				ret = rpingEINVAL
			} else {
				debugf("count %d\n", o.count)
			}
		case 'v':
			o.verbose = true
			debugf("verbose\n")
		case 'V':
			o.validate = true
			debugf("validate data\n")
		case 'd':
			o.debug = true
		case 'q':
			o.selfQP = true
		default: // '?', and -t, which rping lists but does not handle
			rpingUsage(stdout)
			return nil, rpingEINVAL, true
		}
	}
	if ret != 0 {
		return nil, ret, true
	}
	if o.server == -1 {
		rpingUsage(stdout)
		return nil, rpingEINVAL, true
	}
	if o.size < 1 || o.size > rpingMaxQuirkSize {
		// A size the quirk above let through: rping would go on with
		// it; the clone does for sizes it can allocate.
		fmt.Fprintf(stderr, "Invalid size %d (valid range is %d to %d)\n", o.size, rpingMinSize, rpingBufSize)
		return nil, rpingEINVAL, true
	}
	return o, 0, false
}

// rpingInfo is rping's struct rping_rdma_info, the 16-byte message each
// side SENDs: a buffer the peer may READ or WRITE.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    buf (virtual address, 64 bits)             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             rkey                              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             size                              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// All three are big-endian. The client sends its own -S as size; the
// server's "go ahead" messages are 16 zero bytes.
type rpingInfo []byte

const (
	rpingInfoBuf  = 0
	rpingInfoRKey = 8
	rpingInfoLen  = 12
)

// Buf returns the buffer's virtual address.
func (b rpingInfo) Buf() uint64 { return binary.BigEndian.Uint64(b[rpingInfoBuf:]) }

// RKey returns the buffer's remote key.
func (b rpingInfo) RKey() uint32 { return binary.BigEndian.Uint32(b[rpingInfoRKey:]) }

// Size returns the buffer's length.
func (b rpingInfo) Size() uint32 { return binary.BigEndian.Uint32(b[rpingInfoLen:]) }

// Encode writes a buffer's address, rkey and length into b.
func (b rpingInfo) Encode(buf uint64, rkey, size uint32) {
	binary.BigEndian.PutUint64(b[rpingInfoBuf:], buf)
	binary.BigEndian.PutUint32(b[rpingInfoRKey:], rkey)
	binary.BigEndian.PutUint32(b[rpingInfoLen:], size)
}
