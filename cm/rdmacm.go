package cm

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/roce"
)

// ConnParam is what each side asks of a connection (librdmacm's
// rdma_conn_param). Dial and Accept take a *ConnParam; nil means what
// librdmacm does with a NULL one: the device's most READs and atomics
// both ways (rdma_connect) or what the REQ asks (rdma_accept), retry and
// RNR retry 7.
type ConnParam struct {
	// ResponderResources is how many of the peer's READs and atomics this
	// side serves at once (its QP's max_dest_rd_atomic); the peer's
	// initiator depth is bounded by it.
	ResponderResources uint8
	// InitiatorDepth is how many READs and atomics this side has
	// outstanding (its QP's max_rd_atomic).
	InitiatorDepth uint8
	FlowControl    bool  // end-to-end flow control (REQ and REP bit)
	RetryCount     uint8 // transport retries, 0..7 (7: rxe retries for ever)
	RNRRetryCount  uint8 // RNR retries, 0..7 (7: for ever)
	// MinRNRTimer is the RNR NAK timer code this side's QP sends; the
	// kernel's CM sets 0 (655.36 ms) unless the application chose one
	// (rdma_set_min_rnr_timer).
	MinRNRTimer uint8
	PrivateData []byte // the user's data: at most 56 bytes in a REQ, 196 in a REP
	// ACKTimeout is the QP's local ACK time-out (4.096 µs × 2^ACKTimeout),
	// as rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT); 0 means what the
	// kernel computes from the path (about 0.5 s; the REQ carries it).
	ACKTimeout uint8
}

// maxRdAtomic is the device's limit on READs and atomics each way (rxe's
// max_qp_rd_atom and max_qp_init_rd_atom).
const maxRdAtomic = 128

// The connection parameters librdmacm fills in for a NULL rdma_conn_param.
func defaultConnParam() ConnParam {
	return ConnParam{ResponderResources: maxRdAtomic, InitiatorDepth: maxRdAtomic, RetryCount: 7, RNRRetryCount: 7}
}

// Constants of the rdma_cm path on RoCE (kernel cma.c, current).
const (
	// PacketLifeTime is CMA_IBOE_PACKET_LIFETIME: 16 since Linux 6.2 (18 before).
	PacketLifeTime = 16
	// ResponseTimeout is CMA_CM_RESPONSE_TIMEOUT: 18 since Linux 6.14 (20 before).
	ResponseTimeout = 18
	// MaxCMRetries is CMA_MAX_CM_RETRIES.
	MaxCMRetries = 15
	// CAAckDelay is the local CA ACK delay rxe reports (local_ca_ack_delay),
	// sent as the REP's Target ACK Delay.
	CAAckDelay = 15
)

// ackTimeout is the kernel's cm_ack_timeout: the local ACK time-out code
// from the CA's ACK delay and the path's packet life time, about
// max(2·plt, ack delay) in time.
func ackTimeout(caAckDelay, plt uint8) uint8 {
	t := plt + 1
	if t >= caAckDelay {
		if caAckDelay >= t-1 {
			t++
		}
	} else {
		t = caAckDelay
		if plt+1 >= caAckDelay-1 {
			t++
		}
	}
	return min(t, 31)
}

// gidOf is the GID of an IP address: IPv4 addresses map into ::ffff:0:0/96.
func gidOf(a netip.Addr) [16]byte { return a.Unmap().As16() }

// addrOf is the IP address of a GID.
func addrOf(g [16]byte) netip.Addr { return netip.AddrFrom16(g).Unmap() }

// RejectError is the error of a connection the peer refused.
type RejectError struct {
	Reason      mad.RejReason
	ARI         []byte
	PrivateData []byte // 148 bytes, as librdmacm reports them
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("cm: rejected by the peer: reason %d (%v)", uint16(e.Reason), e.Reason)
}

// More errors of connections.
var (
	// ErrUnreachable: the peer did not answer, after every retry.
	ErrUnreachable = errors.New("cm: peer unreachable (no answer after every retry)")
	// ErrDisconnected: the peer disconnected (DREQ).
	ErrDisconnected = errors.New("cm: disconnected by the peer")
	// ErrClosed: the agent or the connection was closed.
	ErrClosed = errors.New("cm: closed")
	// ErrAddrNotLocal: Listen or Dial was given an address the device
	// does not have (EADDRNOTAVAIL).
	ErrAddrNotLocal = errors.New("not an address")
)

// connPSNs returns the PSNs a side sends from and receives from, given the
// Starting PSNs of the REQ and the REP: each is what its sender receives
// (the kernel's cm_req_handler and cm_rep_handler), so the active side
// sends from the REP's and the passive side from the REQ's. rxe's rping
// capture shows it: REQ 0xce3d5f, REP 0x2d66fc, and the client's first
// SEND carries PSN 0x2d66fc.
func connPSNs(active bool, reqPSN, repPSN uint32) (sq, rq uint32) {
	if active {
		return repPSN, reqPSN
	}
	return reqPSN, repPSN
}

// rtrAttrs are the RTR attributes of a connection's QP (the kernel's
// cm_init_qp_rtr_attr): towards the peer's QP, expecting the Starting PSN
// this side sent (IBTA §12.7.9: a Starting PSN is what its sender
// receives), the REQ's MTU, max_dest_rd_atomic the side's responder
// resources.
func rtrAttrs(av roce.AddressVector, mtu roce.MTU, destQPN, rqPSN uint32, respRes, minRNR uint8) (roce.Attr, roce.AttrMask) {
	a := roce.Attr{State: roce.StateRTR, AV: av, PathMTU: mtu, DestQPN: destQPN, RQPSN: bth.PSN(rqPSN & bth.PSNMask),
		MaxDestRdAtomic: respRes, MinRNRTimer: minRNR}
	return a, roce.AttrState | roce.AttrAV | roce.AttrPathMTU | roce.AttrDestQPN | roce.AttrRQPSN
}

// rtsAttrs are the RTS attributes (cm_init_qp_rts_attr): sending from the
// peer's Starting PSN, the ACK time-out, the REQ's retry count, the RNR retry count
// the side was given, max_rd_atomic its initiator depth.
func rtsAttrs(sqPSN uint32, timeout, retry, rnr, initDepth uint8) (roce.Attr, roce.AttrMask) {
	a := roce.Attr{State: roce.StateRTS, SQPSN: bth.PSN(sqPSN & bth.PSNMask), Timeout: timeout, RetryCnt: retry, RNRRetry: rnr,
		MaxRdAtomic: initDepth}
	return a, roce.AttrState | roce.AttrSQPSN
}

// PrepareQP moves q from RESET to INIT, as rdma_create_qp does, so that
// receive requests can be posted before Dial or Request.Accept (ucmatose,
// rping and perftest post theirs before connecting). Its remote access is
// set when the connection is made.
func PrepareQP(q *roce.QP) error {
	if q.State() != roce.StateReset {
		return nil
	}
	init := roce.Attr{State: roce.StateInit, PKey: 0xffff, Port: 1, AccessFlags: roce.AccessLocalWrite}
	if err := q.Modify(&init, roce.AttrState|roce.AttrPKey|roce.AttrPort|roce.AttrAccessFlags); err != nil {
		return fmt.Errorf("cm: prepare qp %#x: %w", q.QPN(), err)
	}
	return nil
}

// readyQP moves q from RESET or INIT through RTR to RTS with the
// attributes of a connection, as the kernel's rdma_cm does: remote WRITE
// always allowed, READ and atomics only when the side serves any
// (cm_init_qp_init_attr).
func readyQP(q *roce.QP, rtr roce.Attr, rtrMask roce.AttrMask, rts roce.Attr, rtsMask roce.AttrMask) error {
	if err := PrepareQP(q); err != nil {
		return err
	}
	rtr.AccessFlags = roce.AccessLocalWrite | roce.AccessRemoteWrite
	if rtr.MaxDestRdAtomic > 0 {
		rtr.AccessFlags |= roce.AccessRemoteRead | roce.AccessRemoteAtomic
	}
	rtrMask |= roce.AttrAccessFlags
	if q.Type() == roce.RC {
		rtrMask |= roce.AttrMaxDestRdAtomic | roce.AttrMinRNRTimer
		rtsMask |= roce.AttrTimeout | roce.AttrRetryCnt | roce.AttrRNRRetry | roce.AttrMaxRdAtomic
	}
	if err := q.Modify(&rtr, rtrMask); err != nil {
		return err
	}
	return q.Modify(&rts, rtsMask)
}
