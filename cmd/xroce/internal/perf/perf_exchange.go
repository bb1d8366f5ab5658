//go:build linux

// The exchanges with the peer: versions, MTU, the QPs' addresses, the
// barriers between phases and the end of a run, over TCP or rdma_cm's
// control connection (perf_rdmacm.go).

package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/device"
	"github.com/xroce/xroce/internal/perftest"
	"github.com/xroce/xroce/roce"
)

// deadline bounds the next exchanges (on the TCP connection, or rdma_cm's
// control connection) by d.
func (r *perfRun) deadline(d time.Duration) { r.ctl.SetDeadline(time.Now().Add(d)) }

// start runs the first exchanges: versions, system data and MTU.
func (r *perfRun) start() error {
	r.deadline(r.o.timeout)
	if r.o.perftest == "25.01" {
		r.conn.Version = perftest.Style2501.Version()
	}
	if err := r.conn.Versions(); err != nil {
		return err
	}
	// The banner and tables look like the release chosen, or like the
	// peer's (perftest 4.5's towards another xroce, which says 6.06).
	switch r.o.perftest {
	case "25.01":
		r.style = perftest.Style2501
	case "auto":
		r.style = perftest.StyleOf(r.conn.RemoteVersion)
	}
	var err error
	if r.cycle, _, err = r.conn.SysData(os.Getpagesize(), 64); err != nil {
		return err
	}
	active := r.dev.Info().ActiveMTU
	want := active
	if r.o.mtu != 0 {
		want = device.MTUFromBytes(r.o.mtu)
		if want > active {
			return fmt.Errorf("-m %d is above the RoCE MTU of %s (%d bytes): use -m %d or raise the interface MTU", r.o.mtu, r.dev.Info().Name, active.Bytes(), active.Bytes())
		}
	}
	m, err := r.conn.MTU(int(want))
	if err != nil {
		return err
	}
	r.mtu = roce.MTU(m)
	if o := r.o; o.conn == "UD" && o.size > r.mtu.Bytes() {
		if o.sizeSet && !o.all {
			return fmt.Errorf("-s %d: a UD message cannot be larger than the MTU (%d bytes)", o.size, r.mtu.Bytes())
		}
		fmt.Fprintf(r.e.Stderr, " Max msg size in UD is MTU %d\n Changing to this MTU\n", r.mtu.Bytes())
		o.size = r.mtu.Bytes()
	}
	return nil
}

// hsAll exchanges the addresses of every QP; with print, the peer's are
// printed.
func (r *perfRun) hsAll(print bool) error {
	for i := range r.my {
		d, err := r.hs(i)
		if err != nil {
			return err
		}
		r.rem[i] = d
		if print {
			perftest.PrintDest(r.e.Stdout, &r.rem[i], true, r.destVerb())
		}
	}
	return nil
}

// hs is one address exchange of QP i, bounded by the timeout.
func (r *perfRun) hs(i int) (perftest.Dest, error) {
	r.deadline(r.o.timeout)
	return r.conn.HandShake(&r.my[i])
}

// barrier is the exchange perftest uses to wait for the peer: QP 0's
// address once more, bounded by wait.
func (r *perfRun) barrier(wait time.Duration) error {
	r.deadline(wait)
	_, err := r.conn.HandShake(&r.my[0])
	return err
}

// perfConnectOptions are perftest's read/atomic depths: as requester, as
// many outstanding as the peer advertised it takes (its out_reads); as
// responder, our own out_reads. A peer advertising none gets the default.
func perfConnectOptions(my, rem *perftest.Dest) roce.ConnectOptions {
	return roce.ConnectOptions{MaxRdAtomic: uint8(min(rem.OutReads, 128)), MaxDestRdAtomic: uint8(min(my.OutReads, 128))}
}

// connect brings every QP to RTS towards the peer's.
func (r *perfRun) connect(ctx context.Context) error {
	var mine, theirs [16]byte = r.my[0].GID, r.rem[0].GID
	v4 := func(g [16]byte) bool { return string(g[:12]) == "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff" }
	if v4(mine) != v4(theirs) {
		return errors.New("found incompatibility issue with GID types (one side IPv4, the other IPv6): use the same IP version on both (-x)")
	}
	for i, p := range r.qps {
		// Send from the GID we advertised (the peer checks it).
		local := roce.Endpoint{QPN: r.my[i].QPN, PSN: r.my[i].PSN, GID: netip.AddrFrom16(r.my[i].GID)}
		remote := roce.Endpoint{LID: r.rem[i].LID, QPN: r.rem[i].QPN, PSN: r.rem[i].PSN, MTU: r.mtu}
		remote.GID = netip.AddrFrom16(r.rem[i].GID)
		cctx, cancel := context.WithTimeout(ctx, r.o.timeout)
		err := p.qp.Connect(cctx, local, remote, perfConnectOptions(&r.my[i], &r.rem[i]))
		if err == nil && r.o.conn == "UD" {
			var av roce.AddressVector
			av, err = r.dev.Resolve(cctx, remote.GID)
			p.av, p.rqpn, p.qkey = &av, remote.QPN, perfQKey
		}
		cancel()
		if err != nil {
			return fmt.Errorf("unable to connect QP %#x to %v: %w", r.my[i].QPN, remote.GID, err)
		}
	}
	return nil
}

// destVerb is the verb the addresses are printed for: with -R perftest
// prints them as its control connection's, a SEND's.
func (r *perfRun) destVerb() perftest.Verb {
	if r.o.rdmaCM {
		return perftest.Send
	}
	return r.o.test.verb
}

// runWait bounds the wait for the peer's whole run.
func (r *perfRun) runWait() time.Duration {
	if r.o.duration > 0 {
		return time.Duration(r.o.duration)*time.Second + 2*r.o.timeout
	}
	return 24 * time.Hour // the run is bounded by its iterations; a dead peer closes the connection
}

// serverWait is the server's part of a one-sided test: wait for the client
// to finish, print its results (bandwidth) and close.
func (r *perfRun) serverWait(wait time.Duration, bw bool) error {
	if bw {
		if err := r.barrier(wait); err != nil {
			return err
		}
		r.deadline(r.o.timeout)
		rep, err := r.conn.BWReports(perftest.BWReport{})
		if err != nil {
			return err
		}
		r.style.PrintBW(r.e.Stdout, rep, r.o.gbits)
		r.deadline(r.o.timeout)
		if err := r.conn.Close(&r.my[0]); err != nil {
			return err
		}
	} else {
		r.deadline(wait)
		if err := r.conn.Close(&r.my[0]); err != nil {
			return err
		}
	}
	io.WriteString(r.e.Stdout, perftest.ResultLine)
	return nil
}
