//go:build linux

// What perf prints besides the result tables (package perftest prints
// those): the banner, the addresses, progress lines, and the snapshot for
// xroce stat.

package perf

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/statcount"
	"github.com/xroce/xroce/internal/perftest"
	"github.com/xroce/xroce/internal/statsock"
)

// info prints perftest's banner.
func (r *perfRun) info() {
	o := r.o
	in := perftest.Info{Verb: o.test.verb, Atomic: o.atomicType, Latency: o.test.lat, Server: r.server,
		Device: r.dev.Info().Name, QPs: o.qps, Connection: o.conn, TxDepth: o.txDepth, RxDepth: o.rxDepth,
		CQMod: o.cqMod, MTU: r.mtu.Bytes(), GIDIndex: o.gid, OutReads: perfOutReads, RDMACM: o.rdmaCM, TOS: o.tos,
		Style: r.style}
	// perftest picks a GID on RoCE and shows its index: so does this.
	if in.GIDIndex < 0 {
		in.GIDIndex = int(r.my[0].GIDIndex)
	}
	perftest.PrintInfo(r.e.Stdout, &in)
}

// printLocal prints this side's addresses.
func (r *perfRun) printLocal() {
	for i := range r.my {
		perftest.PrintDest(r.e.Stdout, &r.my[i], false, r.destVerb())
	}
}

// snapshot is what xroce stat shows of the run; the QPs and peers are
// fixed once connect has run.
func (r *perfRun) snapshot() *statsock.Snapshot {
	s := &statsock.Snapshot{PID: os.Getpid(), Command: "perf " + r.o.test.name, Started: r.started}
	s.Phase, _ = r.phase.Load().(string)
	info := r.dev.Info()
	d := statsock.Device{Name: "perf", Ifname: info.Name, Addr: netip.AddrFrom16(r.my[0].GID).Unmap().String(),
		Datapath: strings.TrimSpace(info.Datapath + " " + info.Mode), Counters: statcount.Of(r.dev.Stats())}
	for i, p := range r.qps {
		d.QPs = append(d.QPs, statsock.QP{Name: r.o.test.name, QPN: p.qp.QPN(), Type: p.qp.Type().String(),
			State: p.qp.State().String(), Peer: fmt.Sprintf("%v %#x", netip.AddrFrom16(r.rem[i].GID).Unmap(), r.rem[i].QPN),
			Counters: statcount.QP(p.qp.Stats())})
	}
	s.Devices = append(s.Devices, d)
	return s
}

// progress prints a progress line to stderr every 2 seconds of a run.
type progress struct {
	w     io.Writer
	start time.Time
	next  time.Time
	what  string
}

func newProgress(w io.Writer, what string) *progress {
	now := time.Now()
	return &progress{w: w, start: now, next: now.Add(2 * time.Second), what: what}
}

func (p *progress) tick(now time.Time, done, total int, bytes int64) {
	if now.Before(p.next) {
		return
	}
	p.next = now.Add(2 * time.Second)
	el := now.Sub(p.start).Seconds()
	of := ""
	if total > 0 {
		of = fmt.Sprintf(" of %d", total)
	}
	fmt.Fprintf(p.w, "perf: %s: %d%s iterations in %.0f s, %.2f MB/sec so far\n", p.what, done, of, el, float64(bytes)/el/(1<<20))
}
