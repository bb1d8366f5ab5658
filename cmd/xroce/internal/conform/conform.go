//go:build linux

package conform

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/device"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
	"github.com/xroce/xroce/cmd/xroce/internal/seqdiag"
	"github.com/xroce/xroce/conform"
	"github.com/xroce/xroce/internal/perftest"
	"github.com/xroce/xroce/internal/rogue"
	pp "github.com/xroce/xroce/interop/pingpong"
	"github.com/xroce/xroce/link"
)

const conformAbout = `
Probes the RoCE v2 transport of a device under test rule by rule (IBTA
Vol. 1 r1.4 ch. 9, annex A17), from an AF_PACKET socket on -d.

Its responder (--via TOOL HOST): the device runs an ordinary tool as a
server at HOST (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw of
perftest 4.5, ibv_rc_pingpong, ibv_ud_pingpong, or rping -P over RDMA CM); xroce
connects as its client, gets the server's QPs from the tool's TCP exchange
(rping: the REQ and the REP), and drives them with a puppet QP that sends
exactly the packets each check is about.

Its requester (--serve TOOL): xroce listens as the tool's server on -p
and the device runs the tool's client against it; xroce's responder
answers its QPs and, on one QP per check, withholds, replaces or adds
answers as the check says, and judges what the requester does.

Each check runs on a QP of its own: give the tool enough QPs (perftest
-q N, and the same -q here) or restart it in a loop; xroce reconnects for
the next QPs. Exit status 1 if any check FAILs.`

const conformExamples = `
  ib_write_bw -d rxe0 -x 1 -F -q 24 -n 1000000          # on the device under test, 198.18.1.2
  xroce conform -d tap0 --via ib_write_bw -q 24 198.18.1.2
  xroce conform -d tap0 --via ib_write_bw -q 24 -run 'dup|psn' -v 198.18.1.2
  xroce conform -d tap0 --via rping 198.18.1.2          # rping -s -P -a 198.18.1.2 on the device
  xroce conform -d tap0 --serve ib_send_bw -q 8 -s 64   # then, on the device: ib_send_bw -d rxe0 -x 1 -F -q 8 -s 64 -D 30 198.18.1.1
  xroce conform -list`

// Cmd is xroce conform.
var Cmd = base.Command{Name: "conform", Summary: "probe a peer's RoCE v2 responder or requester against the specification, rule by rule", Run: runConform}

// conformTool is what the device under test runs: how to get its QPs and
// what they offer.
type conformTool struct {
	name     string
	verb     perftest.Verb // perftest tools
	perftest bool
	allows   conform.Ops
	recv     bool // receives posted
	size     int  // default message size (perftest -s, pingpong -s)
	// errKills: a QP of the server entering the error state ends the
	// server (it polls its receive CQ and exits on the flushed
	// receives), so each fatal check needs a session of its own.
	errKills bool
	ud       bool // its QP is UD (Q_Key udPingpongQKey)
	// rdmacm: the server is reached over RDMA CM, not TCP (rping): one
	// connection, and so one QP, per check.
	rdmacm bool
}

// udPingpongQKey is the Q_Key of ibv_ud_pingpong's QPs.
const udPingpongQKey = 0x11111111

var conformTools = []conformTool{
	{name: "ib_write_bw", verb: perftest.Write, perftest: true, allows: conform.OpWrite, size: 65536},
	{name: "ib_read_bw", verb: perftest.Read, perftest: true, allows: conform.OpRead, size: 65536},
	{name: "ib_atomic_bw", verb: perftest.Atomic, perftest: true, allows: conform.OpAtomic, size: 4096}, // the region is a page (perftest's cycle buffer)
	{name: "ib_send_bw", verb: perftest.Send, perftest: true, recv: true, size: 65536, errKills: true},
	{name: "ibv_rc_pingpong", recv: true, size: 4096, errKills: true},
	{name: "ibv_ud_pingpong", recv: true, size: 2048, ud: true},
	// rping -s -P: a receive of its 16-byte info message posted, no
	// region it names (its -S buffer is READ and WRITE enabled, but its
	// key never leaves the server).
	{name: "rping", recv: true, size: rdmacm.RpingInfoSize, rdmacm: true},
}

type conformOptions struct {
	dev, via, host    string
	serve             string        // --serve TOOL: the requester checks
	peerTimeout       int           // --serve: the client's ACK timeout code
	peerRetry         int           // --serve: the client's retry count (-1: unknown)
	linger            time.Duration // --serve: how long the client may take to end its run
	expect, observed  string        // -expect, -observed: profile files
	expected          profile
	port, size, qps   int
	mtu               int
	run, skip         string
	grants, denies    string
	verbose, json     bool
	list              bool
	junit, pcap       string
	wait, timeout     time.Duration
	tool              conformTool
	runRE, skipRE     *regexp.Regexp
	grantOps, denyOps conform.Ops
}

func runConform(ctx context.Context, e *base.Env, args []string) error {
	var o conformOptions
	fs := base.NewFlagSet(e, "conform", "-d IF {--via TOOL HOST | --serve TOOL} [-q N] [-run RE] [-skip RE] [-v] [-json] [-junit FILE] [-pcap FILE]",
		conformAbout, conformExamples)
	fs.StringVar(&o.dev, "d", "", "the network `interface` towards HOST")
	fs.StringVar(&o.via, "via", "", "the `tool` the device under test runs as a server: ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw, ibv_rc_pingpong, ibv_ud_pingpong, rping")
	fs.StringVar(&o.serve, "serve", "", "serve as the `tool`'s server for its client on the device under test, and check its requester: ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw")
	fs.IntVar(&o.peerTimeout, "peer-timeout", 14, "--serve: the client's local ACK timeout `code` (perftest -u; 4.096 µs × 2^code; 0: unknown)")
	fs.IntVar(&o.peerRetry, "peer-retry", 7, "--serve: the client's retry `count` (perftest sets 7; -1: unknown)")
	fs.DurationVar(&o.linger, "linger", 30*time.Second, "--serve: how long the client may take to end its run after the checks (perftest -D)")
	fs.IntVar(&o.port, "p", 0, "the tool's TCP (rping: RDMA CM) `port` (0: the tool's, 18515, rping 7174)")
	fs.IntVar(&o.qps, "q", 1, "QPs the perftest server has (its -q): `N` checks per connection")
	fs.IntVar(&o.size, "s", 0, "the server's message `size` (its -s): the region or receive length (0: the tool's default)")
	fs.IntVar(&o.mtu, "m", 1024, "path MTU in `bytes` for ibv_rc_pingpong (its -m); perftest negotiates it")
	fs.StringVar(&o.run, "run", "", "run only the checks whose names match `regexp`")
	fs.StringVar(&o.skip, "skip", "", "skip the checks whose names match `regexp`")
	fs.StringVar(&o.grants, "grants", "", "remote operations the server's region allows, of `w,r,a` (default: the tool's own)")
	fs.StringVar(&o.denies, "denies", "", "remote operations known to be refused, of `w,r,a` (enables resp.access-denied)")
	fs.BoolVar(&o.verbose, "v", false, "draw each check's packets as a sequence diagram")
	fs.BoolVar(&o.json, "json", false, "print the results as JSON instead of the table")
	fs.StringVar(&o.junit, "junit", "", "also write the results as JUnit XML to `file`")
	fs.StringVar(&o.pcap, "pcap", "", "write every frame sent and received to `file` (pcap)")
	fs.StringVar(&o.expect, "expect", "", "compare the verdicts with the profile in `file` (lines ROLE TOOL CHECK VERDICT): exit status 1 when one differs, whatever it is")
	fs.StringVar(&o.observed, "observed", "", "write the verdicts as a profile to `file` (the form -expect reads)")
	fs.BoolVar(&o.list, "list", false, "list the checks and exit")
	fs.DurationVar(&o.wait, "wait", 30*time.Second, "how long to retry connecting to the server (restarted between connections)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "bound on each exchange with the server")
	pos, err := base.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if o.list {
		return conformList(e.Stdout)
	}
	if err := o.check(pos); err != nil {
		return err
	}
	if o.serve != "" {
		return conformServe(ctx, e, &o)
	}
	return conformRun(ctx, e, &o)
}

func (o *conformOptions) check(pos []string) error {
	if o.serve != "" {
		return o.checkServe(pos)
	}
	i := slices.IndexFunc(conformTools, func(t conformTool) bool { return t.name == o.via })
	switch {
	case len(pos) != 1:
		return base.Usagef("conform: want one HOST, got %q", pos)
	case o.via == "":
		return base.Usagef("conform: --via names what the device under test runs (%s)", conformToolNames())
	case i < 0:
		return base.Usagef("conform: --via %q: want one of %s", o.via, conformToolNames())
	case o.dev == "":
		return base.Usagef("conform: -d names the interface towards %s", pos[0])
	case o.qps < 1 || o.qps > 256:
		return base.Usagef("conform: -q %d: want 1..256", o.qps)
	case o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 && o.mtu != 4096:
		return base.Usagef("conform: -m %d: want 256, 512, 1024, 2048 or 4096", o.mtu)
	}
	o.host, o.tool = pos[0], conformTools[i]
	if !o.tool.perftest {
		o.qps = 1
	}
	if o.tool.rdmacm {
		// rping's receives are its info message, whatever its -S.
		o.size = rdmacm.RpingInfoSize
		if o.port == 0 {
			o.port = rdmacm.RpingPort
		}
	}
	return o.checkCommon()
}

// checkCommon checks and completes the options both roles share.
func (o *conformOptions) checkCommon() error {
	if o.port == 0 {
		o.port = 18515
	}
	if o.size == 0 {
		o.size = o.tool.size
	}
	var err error
	if o.run != "" {
		if o.runRE, err = regexp.Compile(o.run); err != nil {
			return base.Usagef("conform: -run: %v", err)
		}
	}
	if o.skip != "" {
		if o.skipRE, err = regexp.Compile(o.skip); err != nil {
			return base.Usagef("conform: -skip: %v", err)
		}
	}
	if o.grantOps, err = parseOps(o.grants); err != nil {
		return base.Usagef("conform: -grants: %v", err)
	}
	if o.denyOps, err = parseOps(o.denies); err != nil {
		return base.Usagef("conform: -denies: %v", err)
	}
	if o.expect != "" {
		if o.expected, err = readProfile(o.expect); err != nil {
			return base.Usagef("conform: -expect: %v", err)
		}
	}
	if o.grants == "" {
		o.grantOps = o.tool.allows
	}
	return nil
}

func parseOps(s string) (conform.Ops, error) {
	var ops conform.Ops
	for f := range strings.SplitSeq(s, ",") {
		switch f {
		case "":
		case "w":
			ops |= conform.OpWrite
		case "r":
			ops |= conform.OpRead
		case "a":
			ops |= conform.OpAtomic
		default:
			return 0, fmt.Errorf("%q: want w, r or a", f)
		}
	}
	return ops, nil
}

func conformToolNames() string {
	var s []string
	for _, t := range conformTools {
		s = append(s, t.name)
	}
	return strings.Join(s, ", ")
}

// conformList prints every check: name, rule, what it sends and requires.
func conformList(w io.Writer) error {
	for _, c := range conform.Checks() {
		fatal := ""
		if c.Fatal {
			fatal = " (leaves the QP in error)"
		}
		role := "the peer's responder (--via)"
		if c.IsRequester() {
			role = "the peer's requester (--serve)"
		}
		fmt.Fprintf(w, "%s%s\n  checks:   %s\n  rule:     %s\n  sends:    %s\n  requires: %s\n", c.Name, fatal, role, c.Rule, c.Sends, c.Requires)
	}
	return nil
}

// selected returns the checks to run, those that keep the QP alive first
// (so that tools that die with a QP die last).
func (o *conformOptions) selected() []*conform.Check {
	var keep, fatal []*conform.Check
	for _, c := range conform.Checks() {
		if c.IsRequester() != (o.serve != "") {
			continue
		}
		if o.runRE != nil && !o.runRE.MatchString(c.Name) || o.skipRE != nil && o.skipRE.MatchString(c.Name) {
			continue
		}
		if c.Fatal {
			fatal = append(fatal, c)
		} else {
			keep = append(keep, c)
		}
	}
	return append(keep, fatal...)
}

// toolConn is conform's side of a tool's connection, either role: the
// TCP connection and its exchange, both sides' QP addresses, and which QP
// the next check takes.
type toolConn struct {
	o             *conformOptions
	tcp           net.Conn
	pc            *perftest.Conn // nil: ibv_*_pingpong's exchange
	my, rem       []perftest.Dest
	mtu           int
	local, remote netip.Addr // the TCP connection's ends
	next          int        // the next QP for a check
	dead          bool       // a fatal check ran: the tool ends with an error
}

// newToolConn takes tcp as the connection for o's tool.
func newToolConn(o *conformOptions, tcp net.Conn) toolConn {
	la, _ := netip.ParseAddrPort(tcp.LocalAddr().String())
	ra, _ := netip.ParseAddrPort(tcp.RemoteAddr().String())
	return toolConn{o: o, tcp: tcp, local: la.Addr().Unmap(), remote: ra.Addr().Unmap()}
}

// endExchange runs the exchanges a perftest bandwidth test ends with
// once its run is over, as both sides do: a barrier and the results (not
// for send), then the last address exchange.
func (c *toolConn) endExchange() error {
	if c.o.tool.verb != perftest.Send {
		if _, err := c.pc.HandShake(&c.my[0]); err != nil {
			return err
		}
		if _, err := c.pc.BWReports(perftest.BWReport{}); err != nil {
			return err
		}
	}
	return c.pc.Close(&c.my[0])
}

// conformSession is one connection to the server: its QPs, handed out
// one per check.
type conformSession struct{ toolConn }

// target returns the next unused QP as a conform target, and the puppet
// QPN and PSN it was promised; ok false when the session has none left.
func (s *conformSession) target() (t conform.Target, self uint32, ok bool) {
	if s.next >= len(s.rem) || s.dead {
		return t, 0, false
	}
	i := s.next
	s.next++
	o := s.o
	r := &s.rem[i]
	t = o.template()
	t.QPN, t.PSN, t.MTU, t.VA, t.RKey = r.QPN, bth.PSN(s.my[i].PSN&bth.PSNMask), s.mtu, r.VAddr, r.RKey
	if o.tool.perftest {
		t.MaxDestRdAtomic = int(r.OutReads) // the server's max_dest_rd_atomic
	} // else ibv_rc_pingpong's max_dest_rd_atomic, 1
	return t, s.my[i].QPN, true
}

// template is the target every QP of the tool is, but for its numbers.
func (o *conformOptions) template() conform.Target {
	t := conform.Target{MTU: o.mtu, Allows: o.grantOps, Denies: o.denyOps, RecvPosted: o.tool.recv, MinRNRTimer: 12, MaxDestRdAtomic: 1,
		UD: o.tool.ud}
	if t.UD {
		t.QKey = udPingpongQKey
	}
	if o.tool.recv {
		t.RecvLen = uint32(o.size)
	} else {
		t.Len = uint32(o.size)
	}
	return t
}

// dial opens a session: the TCP connection and the tool's exchange.
func conformDial(ctx context.Context, o *conformOptions, qpnBase uint32) (*conformSession, error) {
	deadline := time.Now().Add(o.wait)
	var tcp net.Conn
	for {
		dctx, cancel := context.WithTimeout(ctx, o.timeout)
		var err error
		tcp, err = device.Dial(dctx, o.host, o.port, "conform")
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
	s := &conformSession{newToolConn(o, tcp)}
	tcp.SetDeadline(time.Now().Add(o.timeout))
	if err := s.exchange(qpnBase); err != nil {
		tcp.Close()
		return nil, fmt.Errorf("conform: %s exchange with %s: %w", o.tool.name, o.host, err)
	}
	tcp.SetDeadline(time.Time{})
	return s, nil
}

func (s *conformSession) exchange(qpnBase uint32) error {
	o := s.o
	gid := netip.AddrFrom16(s.local.As16()).As16()
	for i := range o.qps {
		s.my = append(s.my, perftest.Dest{OutReads: 16, QPN: qpnBase + uint32(i), PSN: rand.Uint32() & 0xffffff, GID: gid})
	}
	if !o.tool.perftest {
		s.mtu = o.mtu
		local := pp.Dest{QPN: s.my[0].QPN, PSN: s.my[0].PSN, GID: netip.AddrFrom16(gid)}
		r, err := pp.ClientExchange(s.tcp, local)
		if err != nil {
			return err
		}
		s.rem = []perftest.Dest{{QPN: r.QPN, PSN: r.PSN, GID: r.GID.As16()}}
		return nil
	}
	s.pc = perftest.NewConn(s.tcp, true)
	var err error
	if _, s.mtu, err = perftestStart(s.pc, o.mtu); err != nil {
		return err
	}
	s.rem = make([]perftest.Dest, len(s.my))
	return perftestAddresses(s.pc, s.my, s.rem, o.tool.verb == perftest.Send, nil)
}

// perftestStart runs the first exchanges of perftest's: versions, system
// data and the MTU; it returns the larger cycle buffer and the path MTU in
// bytes (the smaller of both sides', mtu being this side's).
func perftestStart(pc *perftest.Conn, mtu int) (cycle, pmtu int, err error) {
	if err := pc.Versions(); err != nil {
		return 0, 0, err
	}
	if cycle, _, err = pc.SysData(os.Getpagesize(), 64); err != nil {
		return 0, 0, err
	}
	m, err := pc.MTU(mtuCode(mtu))
	if err != nil {
		return 0, 0, err
	}
	return cycle, 128 << m, nil
}

// perftestAddresses runs the address exchanges of a perftest bandwidth
// test as both its sides do: every QP's address (rem gets the peer's),
// then ready (nil: nothing; the QPs can go to RTS and receives be
// posted), for send a barrier, every address again and a last barrier.
// Then the test runs.
func perftestAddresses(pc *perftest.Conn, my, rem []perftest.Dest, send bool, ready func() error) error {
	all := func() error {
		for i := range my {
			d, err := pc.HandShake(&my[i])
			if err != nil {
				return err
			}
			rem[i] = d
		}
		return nil
	}
	if err := all(); err != nil {
		return err
	}
	if ready != nil {
		if err := ready(); err != nil {
			return err
		}
	}
	if send {
		if _, err := pc.HandShake(&my[0]); err != nil {
			return err
		}
	}
	if err := all(); err != nil {
		return err
	}
	_, err := pc.HandShake(&my[0])
	return err
}

// mtuCode is the ibv_mtu of a size in bytes.
func mtuCode(b int) int {
	c := 1
	for 256<<(c-1) < b {
		c++
	}
	return c
}

// close ends the session as the tool's client would, so that the server
// exits cleanly where it can.
func (s *conformSession) close() {
	defer s.tcp.Close()
	if s.pc == nil || s.dead {
		return
	}
	s.tcp.SetDeadline(time.Now().Add(s.o.timeout))
	s.endExchange()
}

// start selects the checks and opens the puppet's socket; the lines of
// progress go to the returned writer (stderr with -json).
func (o *conformOptions) start(e *base.Env) ([]*conform.Check, *puppetLink, io.Writer, error) {
	checks := o.selected()
	if len(checks) == 0 {
		return nil, nil, nil, base.Usagef("conform: no check matches -run %q -skip %q", o.run, o.skip)
	}
	pl, err := openPuppetLink(o.dev, o.pcap)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("conform: %w", err)
	}
	if o.json {
		return checks, pl, e.Stderr, nil
	}
	return checks, pl, e.Stdout, nil
}

// skipUnhosted SKIPs check c (the i-th of n) without spending a QP when
// the tool's QPs cannot host it, and says so on progress.
func (o *conformOptions) skipUnhosted(progress io.Writer, rep *Report, c *conform.Check, i, n int) bool {
	tmpl := o.template()
	if tmpl.Has(c.Needs) {
		return false
	}
	r := conform.NewTrial(c, &tmpl, nil, 0).Result()
	rep.Results = append(rep.Results, r)
	fmt.Fprintf(progress, "  [%2d/%d] %-26s %-5v %s\n", i+1, n, c.Name, r.Verdict, r.Observed)
	return true
}

// reportRun keeps the result of the i-th of n checks, run on the QP qpn,
// with its progress line and, with -v, its diagram between a and b.
func (o *conformOptions) reportRun(e *base.Env, progress io.Writer, rep *Report, r *conform.Result, i, n int, qpn uint32, a, b netip.Addr) {
	rep.Results = append(rep.Results, *r)
	fmt.Fprintf(progress, "  [%2d/%d] %-26s %-5v %5.2f s  QP %#06x\n", i+1, n, r.Name, r.Verdict, r.Duration.Seconds(), qpn)
	if o.verbose && !o.json {
		conformDiagram(e.Stdout, r, a, b)
	}
}

// Report is the JSON form of a run.
type Report struct {
	Tool    string           `json:"tool"`
	Host    string           `json:"host"`
	Results []conform.Result `json:"results"`
}

func conformRun(ctx context.Context, e *base.Env, o *conformOptions) error {
	checks, pl, progress, err := o.start(e)
	if err != nil {
		return err
	}
	defer pl.Close()
	rep := Report{Tool: o.tool.name, Host: o.host}
	var s *conformSession
	defer func() {
		if s != nil {
			s.close()
		}
	}()
	base := uint32(0x100000 + rand.IntN(0xe00000))
	if o.tool.rdmacm {
		return conformRunCM(ctx, e, o, checks, pl, progress, &rep, base)
	}
	sessions := 0
	for i, c := range checks {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if o.skipUnhosted(progress, &rep, c, i, len(checks)) {
			continue
		}
		var t conform.Target
		var self uint32
		ok := false
		if s != nil {
			t, self, ok = s.target()
		}
		if !ok {
			if s != nil {
				s.close()
				s = nil
			}
			sessions++
			if s, err = conformDial(ctx, o, base+uint32(sessions*o.qps)); err != nil {
				return err
			}
			if sessions == 1 {
				fmt.Fprintf(progress, "xroce conform: %s at %s, puppet %s on %s, path MTU %d, %d checks\n",
					o.tool.name, s.remote, s.local, o.dev, s.mtu, len(checks))
			}
			t, self, _ = s.target()
		}
		vmac, err := neighborMAC(o.dev, netip.AddrFrom16(s.rem[s.next-1].GID).Unmap())
		if err != nil {
			return fmt.Errorf("conform: %w", err)
		}
		peer := &rogue.Peer{Link: pl.link, MAC: pl.mac, IP: s.local, QPN: self,
			VictimMAC: vmac, VictimIP: netip.AddrFrom16(s.rem[s.next-1].GID).Unmap(), VictimQPN: t.QPN}
		r := conform.Run(rogue.NewPuppet(peer), c, &t, peer, self)
		o.reportRun(e, progress, &rep, &r, i, len(checks), t.QPN, s.local, peer.VictimIP)
		if c.Fatal && r.Verdict != conform.Skip && o.tool.errKills {
			s.dead = true
		}
	}
	return o.finish(e, pl, &rep)
}

// finish reports a run's results (the table or JSON, JUnit, the observed
// profile, the pcap) and returns its exit status: 1 if a check FAILed,
// or with -expect, if a verdict differs from the profile.
func (o *conformOptions) finish(e *base.Env, pl *puppetLink, rep *Report) error {
	if o.json {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		conformTable(e.Stdout, rep.Results)
	}
	if o.junit != "" {
		if err := writeJUnit(o.junit, rep); err != nil {
			return fmt.Errorf("conform: %w", err)
		}
	}
	if o.observed != "" {
		if err := os.WriteFile(o.observed, []byte(o.profileOf(rep.Results)), 0o644); err != nil {
			return fmt.Errorf("conform: -observed: %w", err)
		}
	}
	if err := pl.flush(); err != nil {
		return fmt.Errorf("conform: pcap: %w", err)
	}
	if o.expect != "" {
		w := e.Stdout
		if o.json {
			w = e.Stderr
		}
		return o.compareProfile(w, rep.Results)
	}
	return conformExit(rep.Results)
}

// conformExit is the command's end: exit status 1 if any check failed.
func conformExit(rs []conform.Result) error {
	for _, r := range rs {
		if r.Verdict == conform.Fail {
			return base.Status(1)
		}
	}
	return nil
}

// conformTable prints the results: check, verdict, rule, observation.
func conformTable(w io.Writer, rs []conform.Result) {
	count := map[conform.Verdict]int{}
	fmt.Fprintf(w, "\n%-26s %-7s %s\n", "check", "verdict", "rule / observed")
	for _, r := range rs {
		count[r.Verdict]++
		fmt.Fprintf(w, "%-26s %-7v %s\n%-34s %s\n", r.Name, r.Verdict, r.Rule, "", r.Observed)
		if r.Note != "" {
			fmt.Fprintf(w, "%-34s known: %s\n", "", r.Note)
		}
	}
	fmt.Fprintf(w, "\n%d checks: %d PASS, %d FAIL, %d KNOWN, %d SKIP\n", len(rs),
		count[conform.Pass], count[conform.Fail], count[conform.Known], count[conform.Skip])
}

// conformDiagram draws a check's frames as the lab does: the puppet on
// the left (A), the device under test on the right (B).
func conformDiagram(w io.Writer, r *conform.Result, a, b netip.Addr) {
	if len(r.Frames) == 0 {
		return
	}
	d := seqdiag.New(w, a, b)
	d.Header("puppet "+a.String(), "device under test "+b.String())
	epoch := time.Unix(0, 0)
	for i, f := range r.Frames {
		if i == 60 {
			d.Skip(len(r.Frames) - i)
			break
		}
		d.Frame(seqdiag.Frame{Time: epoch.Add(f.At), Data: f.Data})
	}
	fmt.Fprintln(w)
}

// JUnitSuite is the little of the JUnit XML format CI systems read.
type JUnitSuite struct {
	XMLName  xml.Name    `xml:"testsuite"`
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Class   string     `xml:"classname,attr"`
	Name    string     `xml:"name,attr"`
	Time    float64    `xml:"time,attr"`
	Failure *junitText `xml:"failure,omitempty"`
	Skipped *junitText `xml:"skipped,omitempty"`
	Out     string     `xml:"system-out,omitempty"`
}

type junitText struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

func writeJUnit(path string, rep *Report) error {
	s := JUnitSuite{Name: "xroce conform " + rep.Tool + " " + rep.Host}
	for _, r := range rep.Results {
		c := junitCase{Class: "conform", Name: r.Name, Time: r.Duration.Seconds(), Out: r.Verdict.String() + ": " + r.Observed}
		switch r.Verdict {
		case conform.Fail:
			s.Failures++
			c.Failure = &junitText{Message: r.Observed, Text: r.Rule}
		case conform.Skip:
			s.Skipped++
			c.Skipped = &junitText{Message: r.Observed}
		case conform.Known:
			c.Out += "\nknown deviation: " + r.Note
		}
		s.Cases = append(s.Cases, c)
	}
	s.Tests = len(s.Cases)
	b, err := xml.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte(xml.Header), append(b, '\n')...), 0o644)
}

// puppetLink is the puppet's socket on the interface, with its pcap.
type puppetLink struct {
	link  link.Link
	mac   [6]byte
	flush func() error
	close func()
}

func (p *puppetLink) Close() { p.close() }
