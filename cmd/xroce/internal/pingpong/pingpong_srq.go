//go:build linux

package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/device"
	"github.com/xroce/xroce/roce"
)

// ppMaxQP is the number of addresses ibv_srq_pingpong exchanges each way,
// whatever -q says (its MAX_QP); those beyond -q are zero.
const ppMaxQP = 256

// srqSide is one end of ibv_srq_pingpong: -q RC QPs whose receives come
// from one shared receive queue, all on one CQ and one buffer.
type srqSide struct {
	o       *pingpongOptions
	dev     *roce.Device
	cq      *roce.CQ
	srq     *roce.SRQ
	qps     []*roce.QP
	buf     []byte
	mr      *roce.MR
	pending []int
	wcs     []roce.WC
}

// pingpongSRQ is ibv_srq_pingpong: the same exchange as rc_pingpong but
// of 256 addresses each way, then every QP ping-pongs on its own; -n counts
// the exchanges of all QPs together, as srq_pingpong does.
func pingpongSRQ(ctx context.Context, e *base.Env, o *pingpongOptions) error {
	if o.numQP > o.rxDepth {
		return base.Usagef("pingpong: -q %d is more than the RX depth -r %d: raise -r", o.numQP, o.rxDepth)
	}
	dev, err := device.OpenDevice(e.Stderr, o.dev, o.host, "pingpong")
	if err != nil {
		return err
	}
	defer dev.Close()
	if device.MTUFromBytes(o.mtu) > dev.Info().ActiveMTU {
		return fmt.Errorf("pingpong: -m %d is above the RoCE MTU of %s (%d bytes): use -m %d or raise the interface MTU",
			o.mtu, dev.Info().Name, dev.Info().ActiveMTU.Bytes(), dev.Info().ActiveMTU.Bytes())
	}
	s := &srqSide{o: o, dev: dev, pending: make([]int, o.numQP), wcs: make([]roce.WC, o.numQP+o.rxDepth)}
	if err := s.setup(); err != nil {
		return fmt.Errorf("pingpong: %w", err)
	}
	for range o.rxDepth {
		if err := s.postRecv(); err != nil {
			return fmt.Errorf("pingpong: couldn't post receive: %w", err)
		}
	}
	local := make([]roce.Endpoint, o.numQP)
	for i, q := range s.qps {
		if local[i], err = device.LocalEndpoint(dev, q, o.gid); err != nil {
			return fmt.Errorf("pingpong: %w", err)
		}
		fmt.Fprintf(e.Stdout, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", local[i].LID, local[i].QPN, local[i].PSN, local[i].GID)
	}
	remote, err := s.exchange(ctx, local)
	if err != nil {
		return err
	}
	for _, r := range remote {
		fmt.Fprintf(e.Stdout, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", r.LID, r.QPN, r.PSN, r.GID)
	}
	start := time.Now()
	if err := s.run(ctx); err != nil {
		return fmt.Errorf("pingpong: %w", err)
	}
	usec := float64(time.Since(start).Nanoseconds()) / 1e3
	bytes := int64(o.size) * int64(o.iters) * 2
	fmt.Fprintf(e.Stdout, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(e.Stdout, "%d iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec/1e6, usec/float64(o.iters))
	if o.check {
		s.mr.Sync()
		ps := &ppSide{o: o, buf: s.buf}
		if bad := srqBadPages(ps); len(bad) > 0 {
			for _, p := range bad[:min(len(bad), 10)] {
				fmt.Fprintf(e.Stdout, "invalid data in page %d\n", p)
			}
			return fmt.Errorf("pingpong: -c: invalid data in %d of %d pages", len(bad), (o.size+ppPage-1)/ppPage)
		}
	}
	lingerAnswering(ctx, s.qps...)
	return nil
}

func (s *srqSide) setup() error {
	o := s.o
	pd, err := s.dev.AllocPD()
	if err != nil {
		return err
	}
	if s.cq, err = s.dev.CreateCQ(o.rxDepth + o.numQP); err != nil {
		return err
	}
	if s.srq, err = pd.CreateSRQ(roce.SRQConfig{MaxWR: o.rxDepth, MaxSGE: 1}); err != nil {
		return err
	}
	for range o.numQP {
		q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: s.cq, RecvCQ: s.cq, SRQ: s.srq, MaxSendWR: 1, MaxSGE: 1})
		if err != nil {
			return err
		}
		s.qps = append(s.qps, q)
	}
	s.buf = make([]byte, o.size)
	for i := range s.buf {
		s.buf[i] = 0x7b
	}
	s.mr, err = pd.RegMR(s.buf, roce.AccessLocalWrite)
	return err
}

func (s *srqSide) postRecv() error {
	return s.srq.PostRecv(&roce.RecvWR{ID: ppRecvWRID, SGL: []roce.SGE{s.mr.SGE(0, len(s.buf))}})
}

func (s *srqSide) postSend(i int) error {
	return s.qps[i].PostSend(&roce.SendWR{ID: ppSendWRID, Opcode: roce.WRSend, Flags: roce.SendSignaled, SGL: []roce.SGE{s.mr.SGE(0, s.o.size)}})
}

// exchange sends the 256 addresses (the unused ones zero) and reads the
// peer's, in srq_pingpong's order: client first; the server connects its
// QPs before it answers; "done" closes.
func (s *srqSide) exchange(ctx context.Context, local []roce.Endpoint) ([]roce.Endpoint, error) {
	o := s.o
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	conn, err := device.Dial(ctx, o.host, o.port, "pingpong")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	codec := roce.PingpongCodec
	peer := conn.RemoteAddr().String()
	fail := func(what string, err error) ([]roce.Endpoint, error) {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("the peer closed the connection")
		}
		return nil, fmt.Errorf("pingpong: %s %s: %w (is the peer an ibv_srq_pingpong?)", what, peer, device.UnwrapOp(err))
	}
	send := func() error {
		msg := make([]byte, codec.Size())
		for i := range ppMaxQP {
			var ep roce.Endpoint
			if i < len(local) {
				ep = local[i]
			}
			codec.Marshal(msg, ep)
			if _, err := conn.Write(msg); err != nil {
				return err
			}
		}
		return nil
	}
	recv := func() ([]roce.Endpoint, error) {
		msg := make([]byte, codec.Size())
		var eps []roce.Endpoint
		for i := range ppMaxQP {
			if _, err := io.ReadFull(conn, msg); err != nil {
				return nil, err
			}
			if i >= o.numQP {
				continue
			}
			ep, err := codec.Unmarshal(msg)
			if err != nil {
				return nil, err
			}
			eps = append(eps, ep)
		}
		return eps, nil
	}
	connect := func(remote []roce.Endpoint) error {
		for i, q := range s.qps {
			r := remote[i]
			if r.GID.IsUnspecified() {
				return fmt.Errorf("pingpong: the peer at %s sent no GID: give it one with -g", peer)
			}
			r.MTU = device.MTUFromBytes(o.mtu)
			if err := q.Connect(ctx, local[i], r, ppConnectOptions()); err != nil {
				return fmt.Errorf("pingpong: cannot connect QP %#x to %v: %w", q.QPN(), r.GID, err)
			}
		}
		return nil
	}
	if o.host != "" {
		if err := send(); err != nil {
			return fail("couldn't send local addresses to", err)
		}
		remote, err := recv()
		if err != nil {
			return fail("couldn't read remote addresses from", err)
		}
		if _, err := conn.Write([]byte("done\x00")); err != nil {
			return fail("couldn't send \"done\" to", err)
		}
		return remote, connect(remote)
	}
	remote, err := recv()
	if err != nil {
		return fail("couldn't read remote addresses from", err)
	}
	if err := connect(remote); err != nil {
		return nil, err
	}
	if err := send(); err != nil {
		return fail("couldn't send local addresses to", err)
	}
	done := make([]byte, 5)
	n, err := io.ReadAtLeast(conn, done, 4)
	if err != nil || string(done[:4]) != "done" {
		return fail("no \"done\" from", errors.Join(err, fmt.Errorf("got %q", done[:n])))
	}
	return remote, nil
}

// run is srq_pingpong's loop: the client starts every QP; each QP sends
// again once its send and a receive for it have completed; the receives,
// shared, are refilled when few are left.
func (s *srqSide) run(ctx context.Context) error {
	o := s.o
	if o.check && o.host != "" {
		for i := range s.buf {
			s.buf[i] = ppPattern(i)
		}
	}
	for i := range s.qps {
		s.pending[i] = ppRecvWRID
		if o.host != "" {
			if err := s.postSend(i); err != nil {
				return fmt.Errorf("couldn't post send: %w", err)
			}
			s.pending[i] |= ppSendWRID
		}
	}
	qpIndex := make(map[uint32]int, len(s.qps))
	for i, q := range s.qps {
		qpIndex[q.QPN()] = i
	}
	routs := o.rxDepth
	scnt, rcnt := 0, 0
	for rcnt < o.iters || scnt < o.iters {
		var n int
		var err error
		if o.events {
			ctx, cancel := context.WithTimeout(ctx, o.timeout)
			err = s.cq.Wait(ctx)
			cancel()
			n = s.cq.Poll(s.wcs)
		} else {
			n, err = device.PollCQ(ctx, s.cq, s.wcs, time.Now().Add(o.timeout), o.timeout)
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("no completion for %v: is the peer still there?", o.timeout)
			}
			return fmt.Errorf("after %d sends and %d receives: %w", scnt, rcnt, err)
		}
		for _, wc := range s.wcs[:n] {
			if wc.Status != roce.WCSuccess {
				return fmt.Errorf("failed status %v (%d) for wr_id %d", wc.Status, int(wc.Status), wc.ID)
			}
			i, ok := qpIndex[wc.QPN]
			if !ok {
				return fmt.Errorf("couldn't find QPN %06x", wc.QPN)
			}
			switch wc.ID {
			case ppSendWRID:
				scnt++
			case ppRecvWRID:
				routs--
				if routs <= o.numQP {
					for ; routs < o.rxDepth; routs++ {
						if err := s.postRecv(); err != nil {
							return fmt.Errorf("couldn't post receive: %w", err)
						}
					}
				}
				rcnt++
			default:
				return fmt.Errorf("completion for unknown wr_id %d", wc.ID)
			}
			s.pending[i] &^= int(wc.ID)
			if scnt < o.iters && s.pending[i] == 0 {
				if err := s.postSend(i); err != nil {
					return fmt.Errorf("couldn't post send: %w", err)
				}
				s.pending[i] = ppRecvWRID | ppSendWRID
			}
		}
	}
	return nil
}

// srqBadPages is validate for --srq: ibv_srq_pingpong zero-fills its
// buffer where ibv_rc_pingpong fills 0x7b, so a page of zeros is good data
// from it too.
func srqBadPages(ps *ppSide) []int {
	b := ps.data()
	return slices.DeleteFunc(ps.validate(), func(p int) bool {
		return !slices.ContainsFunc(b[p*ppPage:min(len(b), (p+1)*ppPage)], func(c byte) bool { return c != 0 })
	})
}
