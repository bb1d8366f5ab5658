//go:build linux

package perf

import (
	"flag"
	"fmt"
	"strings"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/internal/perftest"
)

// perftest's rate limiter (src/perftest_parameters.c): --rate_limit with
// --rate_units M (MiB/s of payload), g (Gb/s of payload, the default) or
// p (messages/s), and --burst_size messages (default: the send queue
// depth). perftest's software limiter posts a burst, then waits; its
// "hardware" one on RoCE falls back to software. xroce holds each QP to
// the rate with the engine's pacer (qp.QP.SetRateLimit), which counts
// frames on the wire: the payload rate is turned into the wire rate of
// the messages of each size (their packets' headers, ICRC and Ethernet's
// 24 bytes of preamble, FCS and gap), and the burst into as many
// messages' bytes.
//
// As in perftest, the limit is for bandwidth tests other than atomic_bw.
// It paces what the QP sends: for read_bw the data are the server's READ
// responses, so give the server the limit too.

// perfRate holds the rate limiter's flags.
type perfRate struct {
	limit float64
	units string
	burst int
	typ   string
}

// addFlags registers the rate limiter's flags on fs.
func (p *perfRate) addFlags(fs *flag.FlagSet) {
	fs.Float64Var(&p.limit, "rate_limit", 0, "pace each QP at this `rate` in --rate_units (bandwidth tests; perftest's software limiter)")
	fs.StringVar(&p.units, "rate_units", "g", "`units` of --rate_limit: M (MiB/s), g (Gbit/s) or p (messages/s)")
	fs.IntVar(&p.burst, "burst_size", 0, "with --rate_limit: `messages` sent back to back at most (default the send queue depth)")
	fs.StringVar(&p.typ, "rate_limit_type", "SW", "`type` of limiter: SW or HW (both xroce's pacer; perftest's HW falls back to SW on RoCE); PP is Raw Ethernet only")
}

// check validates the flags against the test, as perftest does.
func (p *perfRate) check(o *perfOptions) error {
	p.typ = strings.ToUpper(p.typ)
	switch {
	case p.limit < 0:
		return base.Usagef("perf: --rate_limit %v: want a rate", p.limit)
	case p.units != "M" && p.units != "g" && p.units != "p":
		return base.Usagef("perf: --rate_units %q: want M, g or p", p.units)
	case p.burst < 0:
		return base.Usagef("perf: --burst_size %d: want a number of messages", p.burst)
	case p.burst > 0 && p.limit == 0:
		return base.Usagef("perf: --burst_size needs --rate_limit (perftest: can't enable burst mode when rate limiter is off)")
	case p.typ == "PP":
		return base.Usagef("perf: --rate_limit_type PP: packet pacing is for Raw Ethernet QPs only")
	case p.typ != "SW" && p.typ != "HW":
		return base.Usagef("perf: --rate_limit_type %q: want SW or HW", p.typ)
	case p.limit > 0 && (o.test.lat || o.test.verb == perftest.Atomic):
		return base.Usagef("perf: --rate_limit: the rate limiter is for bandwidth tests other than atomic_bw (as perftest's)")
	}
	if p.limit > 0 && p.burst == 0 {
		p.burst = o.txDepth
	}
	return nil
}

// perfWireBytes returns the bytes one message of size bytes takes on the
// wire over a QP of type conn with path MTU mtu: each packet's Ethernet,
// IP, UDP, BTH, extension headers, pad and ICRC, and the 24 bytes Ethernet
// adds.
func perfWireBytes(size, mtu int, conn string, v6 bool, write bool) int64 {
	pkts := max((size+mtu-1)/mtu, 1)
	ip := bth.IPv4Size
	if v6 {
		ip = bth.IPv6Size
	}
	per := bth.EthernetSize + ip + bth.UDPSize + bth.BTHSize + bth.ICRCSize + 24
	n := int64(size) + int64(pkts)*int64(per) + int64(-size&3)
	if conn == "UD" {
		n += bth.DETHSize
	}
	if write {
		n += bth.RETHSize // on the first packet
	}
	return n
}

// pace sets every QP's limit for messages of size bytes.
func (r *perfRun) pace(size int) error {
	p := &r.o.rate
	if p.limit == 0 {
		return nil
	}
	v6 := len(r.my) > 0 && !isV4Mapped(r.my[0].GID)
	wire := perfWireBytes(size, r.mtu.Bytes(), r.o.conn, v6, r.o.test.verb == perftest.Write)
	var msgs float64 // messages per second
	switch p.units {
	case "M":
		msgs = p.limit * 1024 * 1024 / float64(size)
	case "g":
		msgs = p.limit * 1e9 / 8 / float64(size)
	case "p":
		msgs = p.limit
	}
	rate := int64(msgs * float64(wire) * 8)
	burst := min(int64(p.burst)*wire, 1<<30)
	if rate < 1 {
		return fmt.Errorf("--rate_limit %v%s is below one bit per second for %d-byte messages", p.limit, p.units, size)
	}
	for _, q := range r.qps {
		if err := q.qp.SetRateLimit(rate, int(burst)); err != nil {
			return fmt.Errorf("rate limit: %w", err)
		}
	}
	return nil
}

func isV4Mapped(g [16]byte) bool {
	return string(g[:12]) == "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff"
}
