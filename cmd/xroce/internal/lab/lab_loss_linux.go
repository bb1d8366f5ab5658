//go:build linux

package lab

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/xroce/xroce/bpf"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/seqdiag"
	"github.com/xroce/xroce/roce"
)

// Work of the loss phase, on the rc-loss QPs.
const (
	lossWrites  = 16       // RDMA WRITEs of lossChunk into disjoint slots
	lossReads   = 16       // RDMA READs of lossChunk
	lossChunk   = 32 << 10 // bytes per WRITE and READ
	lossSends   = 16       // SENDs of lossSendLen
	lossSendLen = 4 << 10
	lossAdds    = 32    // FETCH_ADDs of 1 on one word
	lossKeep    = 20000 // frames kept to find the first NAK
	lossLimit   = 60 * time.Second
)

// lossCounters are the counters the loss phase compares.
type lossCounters struct {
	a, b   roce.Stats
	ca, cb bpf.Counters
}

func (r *labRun) lossCounters() lossCounters {
	var c lossCounters
	c.a, c.b = r.a.dev.Stats(), r.b.dev.Stats()
	c.ca, _ = r.a.prog.Counters()
	c.cb, _ = r.b.prog.Counters()
	return c
}

// lossPhase runs a checked workload while the XDP programs drop frames.
func (r *labRun) lossPhase() error {
	if err := r.enter("loss"); err != nil {
		return err
	}
	w := r.out
	q := r.qpsNamed("rc-loss")
	a, b := q[0], q[1]
	fmt.Fprintln(w)
	fmt.Fprintf(w, "loss: both XDP programs drop %g%% of the RoCE frames they receive; RC recovers (ACK timeout 4.2 ms)\n",
		r.o.loss*100)
	before := r.lossCounters()
	r.keepFrames(lossKeep)
	for _, h := range []*labHost{r.a, r.b} {
		if err := h.prog.SetLoss(r.o.loss); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.ctx, lossLimit)
	defer cancel()
	saved := r.ctx
	r.ctx = ctx
	steps := []struct {
		title string
		fn    func(a, b *labQP) (string, error)
	}{
		{fmt.Sprintf("RC WRITE %d x %s", lossWrites, base.ByteSize(lossChunk)), r.lossWrites},
		{fmt.Sprintf("RC READ %d x %s", lossReads, base.ByteSize(lossChunk)), r.lossReads},
		{fmt.Sprintf("RC SEND %d x %s", lossSends, base.ByteSize(lossSendLen)), r.lossSendsStep},
		{fmt.Sprintf("RC FETCH_ADD %d x +1", lossAdds), r.lossAddsStep},
	}
	var err error
	for _, s := range steps {
		r.progress("loss: %s ...", s.title)
		err = r.tourStep(s.title, func() (string, error) { return s.fn(a, b) })
		r.res.tourOps-- // counted in the loss line, not the tour's
		if err != nil {
			break
		}
	}
	r.progressDone()
	r.ctx = saved
	for _, h := range []*labHost{r.a, r.b} {
		if serr := h.prog.SetLoss(0); serr != nil && err == nil {
			err = fmt.Errorf("lab: %w", serr)
		}
	}
	if err != nil {
		if r.ctx.Err() == nil && ctx.Err() != nil {
			return fmt.Errorf("lab: loss phase did not finish in %v", lossLimit)
		}
		return err
	}
	r.res.lossTime = time.Since(start)
	after := r.lossCounters()
	kept := r.takeKept()
	r.keepFrames(0)
	r.lossTable(before, after)
	if r.o.trace > 0 {
		r.drawFirstNAK(kept)
	}
	r.res.lossDone = true
	return nil
}

func (r *labRun) lossWrites(a, b *labQP) (string, error) {
	fillRandom(a.buf[:lossWrites*lossChunk], 0x1055)
	clear(b.buf[:lossWrites*lossChunk])
	b.fence()
	for i := range lossWrites {
		off := i * lossChunk
		if err := a.post(&roce.SendWR{ID: uint64(i), Opcode: roce.WRRDMAWrite, Flags: roce.SendSignaled,
			SGL: []roce.SGE{a.mr.SGE(off, lossChunk)}, RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()}); err != nil {
			return "", err
		}
	}
	for range lossWrites {
		if _, err := r.expect(a, roce.WCRDMAWrite); err != nil {
			return "", err
		}
	}
	n := lossWrites * lossChunk
	b.fence()
	return fmt.Sprintf("B's memory holds all %s, byte-exact", base.ByteSize(n)), sameBytes("B's buffer", b.buf[:n], a.buf[:n])
}

func (r *labRun) lossReads(a, b *labQP) (string, error) {
	fillRandom(b.buf[:lossReads*lossChunk], 0x2055)
	b.fence()
	clear(a.buf[:lossReads*lossChunk])
	for i := range lossReads {
		off := i * lossChunk
		if err := a.post(&roce.SendWR{ID: uint64(i), Opcode: roce.WRRDMARead, Flags: roce.SendSignaled,
			SGL: []roce.SGE{a.mr.SGE(off, lossChunk)}, RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()}); err != nil {
			return "", err
		}
	}
	for range lossReads {
		if _, err := r.expect(a, roce.WCRDMARead); err != nil {
			return "", err
		}
	}
	n := lossReads * lossChunk
	return fmt.Sprintf("A read all %s, byte-exact", base.ByteSize(n)), sameBytes("A's buffer", a.buf[:n], b.buf[:n])
}

func (r *labRun) lossSendsStep(a, b *labQP) (string, error) {
	const base = 1 << 20
	n := lossSends * lossSendLen
	fillRandom(a.buf[base:base+n], 0x3055)
	clear(b.buf[base : base+n])
	for i := range lossSends {
		if err := b.recv(uint64(i), base+i*lossSendLen, lossSendLen); err != nil {
			return "", err
		}
	}
	for i := range lossSends {
		if err := a.post(&roce.SendWR{ID: uint64(i), Opcode: roce.WRSend, Flags: roce.SendSignaled,
			SGL: []roce.SGE{a.mr.SGE(base+i*lossSendLen, lossSendLen)}}); err != nil {
			return "", err
		}
	}
	for range lossSends {
		if _, err := r.expect(a, roce.WCSend); err != nil {
			return "", err
		}
	}
	for i := range lossSends {
		wc, err := r.expect(b, roce.WCRecv)
		if err != nil {
			return "", err
		}
		if wc.ID != uint64(i) || wc.ByteLen != lossSendLen {
			return "", fmt.Errorf("host B's receive %d: id %d, %d bytes", i, wc.ID, wc.ByteLen)
		}
	}
	return fmt.Sprintf("B received all %d in order, byte-exact", lossSends),
		sameBytes("B's buffers", b.buf[base:base+n], a.buf[base:base+n])
}

func (r *labRun) lossAddsStep(a, b *labQP) (string, error) {
	const word = 1<<20 + 64<<10 // B's counter
	const res = 1<<20 + 64<<10  // A's results, 8 bytes each
	binary.LittleEndian.PutUint64(b.buf[word:], 0)
	b.fence()
	clear(a.buf[res : res+8*lossAdds])
	for i := range lossAdds {
		if err := a.post(&roce.SendWR{ID: uint64(i), Opcode: roce.WRAtomicFetchAdd, Flags: roce.SendSignaled, CompareAdd: 1,
			SGL: []roce.SGE{a.mr.SGE(res+8*i, 8)}, RemoteAddr: b.mr.Addr() + word, RKey: b.mr.RKey()}); err != nil {
			return "", err
		}
	}
	for range lossAdds {
		if _, err := r.expect(a, roce.WCFetchAdd); err != nil {
			return "", err
		}
	}
	got := make([]int, lossAdds)
	for i := range got {
		got[i] = int(binary.LittleEndian.Uint64(a.buf[res+8*i:]))
	}
	sort.Ints(got)
	for i, v := range got {
		if v != i {
			return "", fmt.Errorf("the old values returned are not 0..%d once each (sorted: %v)", lossAdds-1, got)
		}
	}
	b.fence()
	if v := binary.LittleEndian.Uint64(b.buf[word:]); v != lossAdds {
		return "", fmt.Errorf("host B's word is %d after %d adds of 1", v, lossAdds)
	}
	return fmt.Sprintf("B's word is %d, old values 0..%d once each: none ran twice", lossAdds, lossAdds-1), nil
}

// lossTable prints what the counters did during the loss phase.
func (r *labRun) lossTable(before, after lossCounters) {
	w := r.out
	d := func(x, y uint64) uint64 { return y - x }
	rows := []struct {
		name string
		a, b uint64
	}{
		{"frames sent", d(before.a.TxFrames, after.a.TxFrames), d(before.b.TxFrames, after.b.TxFrames)},
		{"frames dropped by XDP on arrival", d(before.ca.InjectedDrops, after.ca.InjectedDrops), d(before.cb.InjectedDrops, after.cb.InjectedDrops)},
		{"PSN sequence NAKs sent", d(before.a.SeqNaksTx, after.a.SeqNaksTx), d(before.b.SeqNaksTx, after.b.SeqNaksTx)},
		{"PSN sequence NAKs received", d(before.a.SeqNaksRx, after.a.SeqNaksRx), d(before.b.SeqNaksRx, after.b.SeqNaksRx)},
		{"ACK timeouts", d(before.a.Timeouts, after.a.Timeouts), d(before.b.Timeouts, after.b.Timeouts)},
		{"requester windows halved", d(before.a.WindowCuts, after.a.WindowCuts), d(before.b.WindowCuts, after.b.WindowCuts)},
		{"go-back-N retransmissions", d(before.a.Retransmits, after.a.Retransmits), d(before.b.Retransmits, after.b.Retransmits)},
		{"duplicate requests answered", d(before.a.Duplicates, after.a.Duplicates), d(before.b.Duplicates, after.b.Duplicates)},
		{"requests discarded after a PSN gap", d(before.a.RxOutOfSeq, after.a.RxOutOfSeq), d(before.b.RxOutOfSeq, after.b.RxOutOfSeq)},
		{"responses discarded (gap or stale)", d(before.a.RxDropped, after.a.RxDropped), d(before.b.RxDropped, after.b.RxDropped)},
	}
	fmt.Fprintf(w, "\n  %-36s %14s %14s\n", "counter (during the loss phase)", "A requester", "B responder")
	for _, row := range rows {
		fmt.Fprintf(w, "  %-36s %14d %14d\n", row.name, row.a, row.b)
	}
	r.res.lossDrops = rows[1].a + rows[1].b
	r.res.lossNaks = rows[2].a + rows[2].b
	r.res.lossRetrans = rows[6].a + rows[6].b
}

// drawFirstNAK draws the first PSN sequence NAK of the loss phase
// (seqdiag.DrawFirstNAK).
func (r *labRun) drawFirstNAK(kept []seqdiag.Frame) {
	seqdiag.DrawFirstNAK(r.out, r.a.h.IP, r.b.h.IP, kept)
}
