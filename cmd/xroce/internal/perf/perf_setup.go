//go:build linux

// The resources of a test: PD, CQs, QPs and their buffers, and this side's
// addresses.

package perf

import (
	"math/rand/v2"
	"net/netip"

	"github.com/xroce/xroce/cmd/xroce/internal/device"
	"github.com/xroce/xroce/internal/perftest"
	"github.com/xroce/xroce/roce"
)

// perfQP is one QP of a test with its buffer: the first half is what it
// sends (or reads into), the second what the peer writes or reads.
type perfQP struct {
	qp   *roce.QP
	buf  []byte
	mr   *roce.MR
	half int
	av   *roce.AddressVector // UD: the peer's
	rqpn uint32              // UD: the peer's QP
	qkey uint32              // UD: the peer's Q_Key
}

func (p *perfQP) sendSGE(n int) roce.SGE { return p.mr.SGE(0, n) }
func (p *perfQP) recvSGE(n int) roce.SGE { return p.mr.SGE(p.half, n) }

// udGRH is the room for the GRH at the start of each UD receive.
const udGRH = 40

// perfQKey is the Q_Key of perftest's UD QPs when the TCP exchange
// connects them (DEF_QKEY); with -R they take rdma_cm's (mad.RDMAUDPQKey).
const perfQKey = 0x11111111

// perfOutReads is the READs and atomics each side allows outstanding,
// shown as out_reads.
const perfOutReads = 16

// resources makes the CQs, QPs and buffers and this side's addresses.
func (r *perfRun) resources() error {
	o := r.o
	var err error
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return err
	}
	n := o.qps * (o.txDepth + o.rxDepth + 16)
	if r.scq, err = r.dev.CreateCQ(n); err != nil {
		return err
	}
	if r.rcq, err = r.dev.CreateCQ(n); err != nil {
		return err
	}
	half := o.size
	if o.all {
		half = maxAllSize
	}
	typ := roce.RC
	switch o.conn {
	case "UC":
		typ = roce.UC
	case "UD":
		typ, half = roce.UD, r.mtu.Bytes()+udGRH
	}
	// perftest moves the address of each request on by its size within
	// the cycle buffer (a page), so offer at least that much.
	half = (max(half, r.cycle) + 63) &^ 63
	gid, err := device.LocalEndpoint(r.dev, nil, o.gid)
	if err != nil {
		return err
	}
	for range o.qps {
		q, err := r.pd.CreateQP(roce.QPConfig{Type: typ, SendCQ: r.scq, RecvCQ: r.rcq,
			MaxSendWR: o.txDepth + 16, MaxRecvWR: o.rxDepth, MaxSGE: 1})
		if err != nil {
			return err
		}
		p := &perfQP{qp: q, buf: make([]byte, 2*half), half: half}
		if p.mr, err = r.pd.RegMR(p.buf, roce.AccessLocalWrite|roce.AccessRemoteWrite|roce.AccessRemoteRead|roce.AccessRemoteAtomic); err != nil {
			return err
		}
		r.qps = append(r.qps, p)
		d := perftest.Dest{OutReads: perfOutReads, QPN: q.QPN(), PSN: rand.Uint32() & 0xffffff, RKey: p.mr.RKey(),
			VAddr: p.mr.Addr() + uint64(half), GID: gid.GID.As16(), GIDIndex: int32(gidIndex(r.dev, gid.GID))}
		r.my = append(r.my, d)
	}
	r.rem = make([]perftest.Dest, o.qps)
	return nil
}

// gidIndex is the index of gid in dev's table, -1 if it is not there.
func gidIndex(dev *roce.Device, gid netip.Addr) int {
	for i, g := range dev.GIDs() {
		if g.As16() == gid.As16() {
			return i
		}
	}
	return -1
}
