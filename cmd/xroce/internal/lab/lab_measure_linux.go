//go:build linux

package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/roce"
)

// Bounds of the measurements.
const (
	measureFrames = 1000    // frames of each measurement recorded to the pcap
	bwDepth       = 16      // WRITEs outstanding
	latMaxIters   = 200000  // ping-pongs at most
	latDepth      = 16      // receives posted ahead in the ping-pong
	tcpBuf        = 1 << 16 // bytes per TCP write
	tcpPort       = 47911
	latSize       = 8                     // bytes of each xroce ping-pong SEND
	latBufSize    = 64 + latDepth*latSize // bytes of each rc-lat QP's buffer: its SEND, then a slot per receive
	tcpLatSize    = 64                    // bytes of each TCP ping-pong message
)

// measure runs the bandwidth and latency measurements. The pcap gets the
// first measureFrames frames of each, so the xroce latency ping-pong runs
// on a QP pair of its own (rc-lat): on the bandwidth's pair its PSNs would
// follow, in the file, a pause of the recording across the rest of the
// bandwidth run, which xroce dump, seeing a PSN jump in the pair's
// requests, has to count as PSNs missing (a pcap file does not say that
// its writer skipped frames). With a pair per measurement each flow's
// frames in the pcap are a contiguous prefix of what it sent.
func (r *labRun) measure() error {
	if err := r.enter("measure"); err != nil {
		return err
	}
	w := r.out
	fmt.Fprintln(w)
	fmt.Fprintf(w, "measure: %v each; only the first %d frames of each go to the pcap\n", r.o.duration, measureFrames)
	r.rec.Disable()
	steps := []struct {
		name string
		fn   func() (string, error)
	}{
		{"xroce RC WRITE bandwidth", r.rdmaBandwidth},
		{"xroce RC SEND latency", r.rdmaLatency},
		{"TCP bandwidth", r.tcpBandwidth},
		{"TCP latency", r.tcpLatency},
	}
	for _, s := range steps {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		r.rec.Enable(measureFrames)
		r.checks++
		detail, err := s.fn()
		r.rec.Disable()
		r.progressDone()
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		status := "ok  "
		if err != nil {
			r.failures++
			status, detail = "FAIL", err.Error()
		}
		fmt.Fprintf(w, "  %s %-28s %s\n", status, s.name, detail)
	}
	r.res.measured = true
	return nil
}

// rdmaBandwidth keeps bwDepth WRITEs of --size bytes in flight from A to B
// for --duration.
func (r *labRun) rdmaBandwidth() (string, error) {
	a, b := r.rc[0], r.rc[1]
	n := r.o.size
	fillRandom(a.buf[:n], 0xba)
	wr := roce.SendWR{Opcode: roce.WRRDMAWrite, Flags: roce.SendSignaled, SGL: []roce.SGE{a.mr.SGE(0, n)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	start := time.Now()
	end := start.Add(r.o.duration)
	var done uint64
	out := 0
	nextShow := start.Add(250 * time.Millisecond)
	for {
		now := time.Now()
		for out < bwDepth && now.Before(end) {
			wr.ID = uint64(out)
			if err := a.post(&wr); err != nil {
				return "", err
			}
			out++
		}
		if out == 0 {
			break
		}
		if _, err := r.expect(a, roce.WCRDMAWrite); err != nil {
			return "", err
		}
		out--
		done += uint64(n)
		if now.After(nextShow) {
			r.progress("xroce RC WRITE: %.1f s, %s", now.Sub(start).Seconds(), gbits(done, now.Sub(start)))
			nextShow = now.Add(250 * time.Millisecond)
		}
	}
	el := time.Since(start)
	r.res.rdmaBytes, r.res.rdmaTime, r.res.rdmaMeasured = done, el, true
	return fmt.Sprintf("%s in %.2f s: %s (%s messages, %d in flight)", base.ByteSize(int(min(done, 1<<40))), el.Seconds(),
		gbits(done, el), base.ByteSize(n), bwDepth), nil
}

// rdmaLatency bounces a latSize-byte SEND between A and B over the rc-lat
// pair; B answers from its own goroutine. Both sides wait for each
// completion in waitOn: a CQ.Poll, then the blocking CQ.Wait, which sleeps
// in poll(2) on the AF_XDP socket (no busy poll), as the TCP ping-pong's
// reads sleep in Go's netpoller.
func (r *labRun) rdmaLatency() (string, error) {
	a, b := r.lat[0], r.lat[1]
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	for i := range latDepth {
		if err := a.recv(uint64(i), 64+i*latSize, latSize); err != nil {
			return "", err
		}
		if err := b.recv(uint64(i), 64+i*latSize, latSize); err != nil {
			return "", err
		}
	}
	var wg sync.WaitGroup
	echoErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			if p := recover(); p != nil { // end the lab with an error, not a crash that leaves the namespaces
				echoErr <- fmt.Errorf("echo: panic: %v", p)
				cancel()
			}
		}()
		echoErr <- r.echo(ctx, b)
	}()
	defer wg.Wait()
	defer cancel()

	send := roce.SendWR{Opcode: roce.WRSend, SGL: []roce.SGE{a.mr.SGE(0, latSize)}}
	rtts := make([]time.Duration, 0, 4096)
	start := time.Now()
	end := start.Add(r.o.duration)
	for i := 0; i < latMaxIters && time.Now().Before(end); i++ {
		t0 := time.Now()
		send.ID = uint64(i)
		send.Flags = signalEvery(i)
		if err := a.post(&send); err != nil {
			return "", err
		}
		if err := r.awaitRecv(ctx, a); err != nil {
			select {
			case eerr := <-echoErr:
				if eerr != nil {
					return "", eerr
				}
			default:
			}
			return "", err
		}
		rtts = append(rtts, time.Since(t0))
		if i%1000 == 0 {
			r.progress("xroce RC SEND ping-pong: %d round trips", i)
		}
	}
	cancel()
	wg.Wait()
	if len(rtts) == 0 {
		return "", errors.New("no round trip")
	}
	r.res.rdmaLat, r.res.rdmaLatIters = halves(rtts), len(rtts)
	return latencyLine(r.res.rdmaLat, latSize) + "; blocking waits (CQ.Wait), no busy poll", nil
}

// signalEvery asks for a completion on one send in 64 of the ping-pong:
// fewer wakeups of the waiting goroutine, as ib_send_lat does with its
// unsignaled sends.
func signalEvery(i int) roce.SendFlags {
	if i%64 == 63 {
		return roce.SendSignaled
	}
	return 0
}

// awaitRecv waits for a receive completion on q, reposting the receive;
// send completions on the way are only counted.
func (r *labRun) awaitRecv(ctx context.Context, q *labQP) error {
	for {
		wc, err := r.waitOn(ctx, q)
		if err != nil {
			return err
		}
		if wc.Status != roce.WCSuccess {
			return fmt.Errorf("%s %s: completion %v %v", q.host.name, q.name, wc.Opcode, wc.Status)
		}
		if wc.Opcode == roce.WCRecv {
			return q.recv(wc.ID, 64+int(wc.ID%latDepth)*latSize, latSize)
		}
	}
}

// echo answers every SEND B receives with one of its own, until ctx ends.
func (r *labRun) echo(ctx context.Context, b *labQP) error {
	send := roce.SendWR{Opcode: roce.WRSend, SGL: []roce.SGE{b.mr.SGE(0, latSize)}}
	for i := 0; ; i++ {
		if err := r.awaitRecv(ctx, b); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		send.ID = uint64(i)
		send.Flags = signalEvery(i)
		if err := b.post(&send); err != nil {
			return err
		}
	}
}

// waitOn returns the next completion of q's CQ, within 10 s and ctx.
func (r *labRun) waitOn(ctx context.Context, q *labQP) (roce.WC, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var wc [1]roce.WC
	for {
		if q.cq.Poll(wc[:]) == 1 {
			q.completed.Add(1)
			if wc[0].Status != roce.WCSuccess {
				q.failed.Add(1)
			} else {
				q.bytes.Add(uint64(wc[0].ByteLen))
			}
			return wc[0], nil
		}
		if err := q.cq.Wait(ctx); err != nil {
			return roce.WC{}, fmt.Errorf("%s %s: no completion: %w", q.host.name, q.name, err)
		}
	}
}

// tcpPair connects a TCP socket in A's namespace to one in B's.
func (r *labRun) tcpPair() (ca, cb net.Conn, err error) {
	var ln net.Listener
	if err := r.b.h.Do(func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(r.b.h.IP.String(), fmt.Sprint(tcpPort)))
		return err
	}); err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	err = r.a.h.Do(func() (err error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		ca, err = d.DialContext(r.ctx, "tcp4", ln.Addr().String())
		return err
	})
	if err != nil {
		ln.Close()
		if acc := <-ch; acc.c != nil {
			acc.c.Close()
		}
		return nil, nil, err
	}
	acc := <-ch
	if acc.err != nil {
		ca.Close()
		return nil, nil, acc.err
	}
	return ca, acc.c, nil
}

// closeOnCancel closes the conns when the lab is interrupted.
func (r *labRun) closeOnCancel(cs ...net.Conn) func() bool {
	return context.AfterFunc(r.ctx, func() {
		for _, c := range cs {
			c.Close()
		}
	})
}

// tcpBandwidth streams from A to B for --duration and counts what B reads.
func (r *labRun) tcpBandwidth() (string, error) {
	ca, cb, err := r.tcpPair()
	if err != nil {
		return "", err
	}
	defer ca.Close()
	defer cb.Close()
	defer r.closeOnCancel(ca, cb)()
	limit := time.Now().Add(r.o.duration + 5*time.Second)
	ca.SetDeadline(limit)
	cb.SetDeadline(limit)
	type result struct {
		n   uint64
		el  time.Duration
		err error
	}
	ch := make(chan result, 1)
	go func() {
		buf := make([]byte, 1<<20)
		var n uint64
		var first time.Time
		for {
			m, err := cb.Read(buf)
			if m > 0 && first.IsZero() {
				first = time.Now()
			}
			n += uint64(m)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				ch <- result{n, time.Since(first), err}
				return
			}
		}
	}()
	buf := make([]byte, tcpBuf)
	start := time.Now()
	end := start.Add(r.o.duration)
	nextShow := start.Add(250 * time.Millisecond)
	var sent uint64
	for now := start; now.Before(end); now = time.Now() {
		m, err := ca.Write(buf)
		sent += uint64(m)
		if err != nil {
			return "", err
		}
		if now.After(nextShow) {
			r.progress("TCP: %.1f s, %s", now.Sub(start).Seconds(), gbits(sent, now.Sub(start)))
			nextShow = now.Add(250 * time.Millisecond)
		}
	}
	ca.(*net.TCPConn).CloseWrite()
	res := <-ch
	if res.err != nil {
		return "", res.err
	}
	r.res.tcpBytes, r.res.tcpTime = res.n, res.el
	return fmt.Sprintf("%s in %.2f s: %s (one stream, %s writes)", base.ByteSize(int(min(res.n, 1<<40))), res.el.Seconds(),
		gbits(res.n, res.el), base.ByteSize(tcpBuf)), nil
}

// tcpLatency bounces tcpLatSize bytes between A and B: Go net.Conns of
// this process over the lab's veth pair, each read asleep in Go's
// netpoller, as xroce's waits are asleep in CQ.Wait.
func (r *labRun) tcpLatency() (string, error) {
	ca, cb, err := r.tcpPair()
	if err != nil {
		return "", err
	}
	defer ca.Close()
	defer cb.Close()
	defer r.closeOnCancel(ca, cb)()
	limit := time.Now().Add(r.o.duration + 5*time.Second)
	ca.SetDeadline(limit)
	cb.SetDeadline(limit)
	go func() {
		buf := make([]byte, tcpLatSize)
		for {
			if _, err := io.ReadFull(cb, buf); err != nil {
				return
			}
			if _, err := cb.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, tcpLatSize)
	rtts := make([]time.Duration, 0, 4096)
	end := time.Now().Add(r.o.duration)
	for i := 0; i < latMaxIters && time.Now().Before(end); i++ {
		t0 := time.Now()
		if _, err := ca.Write(buf); err != nil {
			return "", err
		}
		if _, err := io.ReadFull(ca, buf); err != nil {
			return "", err
		}
		rtts = append(rtts, time.Since(t0))
		if i%1000 == 0 {
			r.progress("TCP ping-pong: %d round trips", i)
		}
	}
	if len(rtts) == 0 {
		return "", errors.New("no round trip")
	}
	r.res.tcpLat, r.res.tcpLatIters, r.res.tcpLatDone = halves(rtts), len(rtts), true
	return latencyLine(r.res.tcpLat, tcpLatSize) + "; Go net.Conn in this process, same veth", nil
}

// halves returns the round trips halved (one-way figures, as ib_send_lat
// and netperf's TCP_RR report them), sorted.
func halves(rtts []time.Duration) []time.Duration {
	out := make([]time.Duration, len(rtts))
	for i, d := range rtts {
		out[i] = d / 2
	}
	slices.Sort(out)
	return out
}

func latencyLine(lat []time.Duration, size int) string {
	return fmt.Sprintf("%d round trips of %d bytes: half round trip median %s, p99 %s, min %s",
		len(lat), size, micros(base.Percentile(lat, 50)), micros(base.Percentile(lat, 99)), micros(lat[0]))
}

// report prints the results table.
func (r *labRun) report() {
	w := r.e.Stdout
	res := &r.res
	fmt.Fprintln(w)
	fmt.Fprintf(w, "results (veth MTU %d, RoCE MTU %d, %s per device, AF_XDP %s mode)\n", r.o.mtu,
		r.a.dev.Info().ActiveMTU.Bytes(), base.Plural(r.o.queues, "queue"), r.a.mode)
	okText := "all byte-exact"
	if r.failures > 0 {
		okText = fmt.Sprintf("%d FAILED", r.failures)
	}
	fmt.Fprintf(w, "  %-34s %d operations checked, %s\n", "tour (RC, UC, UD)", res.tourOps, okText)
	if res.lossDone {
		fmt.Fprintf(w, "  %-34s 4 workloads checked in %.2f s: %d frames dropped, %d NAKs, %d retransmissions\n",
			fmt.Sprintf("loss %g%% (RC)", r.o.loss*100), res.lossTime.Seconds(), res.lossDrops, res.lossNaks, res.lossRetrans)
	}
	if r.o.pcap != "" {
		ps := r.rec.Stats()
		fmt.Fprintf(w, "  %-34s %d frames, %.1f MB (tour and loss whole, %d frames of each measurement): xroce dump %s\n",
			"pcap "+r.o.pcap, ps.Frames, float64(ps.Bytes+16*ps.Frames+24)/1e6, measureFrames, r.o.pcap)
	}
	if !res.measured {
		return
	}
	fmt.Fprintf(w, "  %-34s %-24s %s\n", "", "xroce RC (AF_XDP)", "TCP (kernel, Go net.Conn)")
	bw := func(n uint64, d time.Duration, ok bool) string {
		if !ok {
			return "-"
		}
		return gbits(n, d)
	}
	fmt.Fprintf(w, "  %-34s %-24s %s\n", fmt.Sprintf("bandwidth, %s messages/writes", base.ByteSize(r.o.size)),
		bw(res.rdmaBytes, res.rdmaTime, res.rdmaMeasured), bw(res.tcpBytes, res.tcpTime, res.tcpTime > 0))
	lat := func(l []time.Duration, p float64, size int) string {
		if len(l) == 0 {
			return "-"
		}
		return fmt.Sprintf("%s (%d B)", micros(base.Percentile(l, p)), size)
	}
	fmt.Fprintf(w, "  %-34s %-24s %s\n", "latency, half round trip, median", lat(res.rdmaLat, 50, latSize), lat(res.tcpLat, 50, tcpLatSize))
	fmt.Fprintf(w, "  %-34s %-24s %s\n", "latency, half round trip, p99", lat(res.rdmaLat, 99, latSize), lat(res.tcpLat, 99, tcpLatSize))
	if len(res.rdmaLat) > 0 || len(res.tcpLat) > 0 {
		fmt.Fprintf(w, "  %s\n  %s\n",
			"latency: ping-pongs between A and B over the same veth, both ends in this process; xroce waits",
			"         in CQ.Wait (asleep in poll(2) on the AF_XDP socket, no busy poll), TCP in Go's netpoller")
	}
}
