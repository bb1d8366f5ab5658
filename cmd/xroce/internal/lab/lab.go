// Package lab is xroce lab: two network namespaces joined by a veth pair,
// an xroce device in each over AF_XDP, and a tour of every operation, a
// loss phase and bandwidth and latency measurements between them, with a
// pcap of every frame, its HTML page, and counters for xroce stat. The lab
// runs on Linux only (the *_linux.go files); elsewhere it says so
// (lab_other.go).
package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/capture"
	"github.com/xroce/xroce/internal/statsock"
)

const labAbout = `
Run a RoCE v2 lab on this machine, no RDMA hardware needed: two network
namespaces (A 198.18.0.1 and B 198.18.0.2) joined by a veth pair, an xroce
device in each over AF_XDP, and queue pairs of each transport (RC, UC, UD)
connected between them. Then, in order:

  tour     the RC pair connects through RDMA CM (REQ, REP and RTU on each
           device's QP 1, as rdma_cm programs connect); then every
           operation once, each checked: SEND, SEND_WITH_IMM, RDMA
           WRITE, WRITE_WITH_IMM and READ at each of --sizes (data
           byte-exact), CMP_SWAP and FETCH_ADD (returned and remote values
           right), UC SEND and WRITE, a UD datagram. The first --trace
           packets are drawn as a sequence diagram, A on the left, B on the
           right: opcode, PSN, AckReq (A), the AETH of each ACK.
  loss     the XDP programs drop --loss of the RoCE frames at random; RC
           WRITEs, READs, SENDs and FETCH_ADDs still complete byte-exact,
           recovered by NAKs, timeouts and go-back-N retransmission, shown
           by the devices' counters before and after (and the packets
           around the first NAK).
  measure  RC WRITE bandwidth and 8-byte SEND latency with xroce, beside a
           TCP stream and a 64-byte TCP ping-pong on the same veth, each
           for --duration.

A results table ends the run. Every frame either host sends is written to
--pcap (lab.pcap in the current directory by default) for Wireshark or
'xroce dump' (AF_XDP frames never reach tcpdump, so the lab records them
itself); during the measurements only the first frames are kept. While it
runs, the lab serves its counters to 'xroce stat'. It needs root (network
namespaces, XDP); it removes its namespaces when it ends, also on Ctrl-C.`

const labExamples = `  sudo xroce lab                              # all of it, about 10 s
  sudo xroce lab --duration 0 --trace 100     # tour and loss only, more packets traced
  sudo xroce lab --loss 0.3 --sizes 64,65536 --pcap /tmp/lab.pcap
  xroce dump /tmp/lab.pcap                    # every packet decoded, ICRC checked
  sudo xroce stat -w                          # from another terminal, while it runs`

// Cmd is xroce lab.
var Cmd = base.Command{Name: "lab", Summary: "run a RoCE v2 lab between two network namespaces: tour, loss, bandwidth and latency", Run: runLab}

// labOptions are the lab's settings.
type labOptions struct {
	duration time.Duration // each measurement; 0 skips them
	sizes    []int         // message sizes of the tour
	size     int           // message size of the bandwidth measurement
	mtu      int           // veth MTU
	queues   int           // veth queues, AF_XDP sockets and workers per device
	loss     float64       // loss probability of the loss phase; 0 skips it
	trace    int           // packets drawn in the sequence diagram
	pcap     string        // pcap file; "" for none
	html     string        // page drawn from the pcap afterwards; "" for none
	quiet    bool          // only the results table
	statDir  string        // where the stat socket goes; "" for none
}

// sizesFlag parses a comma-separated list of byte counts.
type sizesFlag struct{ v *[]int }

func (f sizesFlag) String() string {
	if f.v == nil {
		return ""
	}
	s := make([]string, len(*f.v))
	for i, n := range *f.v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (f sizesFlag) Set(s string) error {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := parseSize(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		out = append(out, n)
	}
	*f.v = out
	return nil
}

// parseSize reads a byte count, with an optional k/K or m/M suffix (KiB, MiB).
func parseSize(s string) (int, error) {
	mul := 1
	switch {
	case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
		mul, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "m"), strings.HasSuffix(s, "M"):
		mul, s = 1<<20, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mul, nil
}

// sizeFlag is one byte count with parseSize's suffixes.
type sizeFlag struct{ v *int }

func (f sizeFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strconv.Itoa(*f.v)
}

func (f sizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err == nil {
		*f.v = n
	}
	return err
}

// lossFlag is a probability, as 0.1 or 10%.
type lossFlag struct{ v *float64 }

func (f lossFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strconv.FormatFloat(*f.v, 'g', -1, 64)
}

func (f lossFlag) Set(s string) error {
	pct := strings.HasSuffix(s, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil {
		return fmt.Errorf("bad probability %q", s)
	}
	if pct {
		v /= 100
	}
	*f.v = v
	return nil
}

func runLab(ctx context.Context, e *base.Env, args []string) error {
	o := labOptions{
		duration: 2 * time.Second,
		sizes:    []int{64, 4096},
		size:     64 << 10,
		mtu:      1500,
		queues:   1,
		loss:     0.1,
		trace:    40,
		pcap:     "lab.pcap",
		statDir:  statsock.DefaultDir,
	}
	fs := base.NewFlagSet(e, "lab", "[flags]", labAbout, labExamples)
	fs.DurationVar(&o.duration, "duration", o.duration, "length of each bandwidth and latency measurement (0: no measurements)")
	fs.Var(sizesFlag{&o.sizes}, "sizes", "message sizes of the tour, comma-separated (k and M suffixes)")
	fs.Var(sizeFlag{&o.size}, "size", "message size of the bandwidth measurement")
	fs.IntVar(&o.mtu, "mtu", o.mtu, "veth MTU (RoCE MTU is MTU-80 rounded down to 256·2^n, as rxe: 1500 gives 1024)")
	fs.IntVar(&o.queues, "queues", o.queues, "veth queues: AF_XDP sockets and workers per device (1 leaves a core to each device's worker on a 2-core machine)")
	fs.Var(lossFlag{&o.loss}, "loss", "frame loss injected in the loss phase, as 0.1 or 10% (0: no loss phase)")
	fs.IntVar(&o.trace, "trace", o.trace, "packets of the tour drawn as a sequence diagram (0: none)")
	fs.StringVar(&o.pcap, "pcap", o.pcap, "write the frames to `FILE` (\"\" or none: no capture)")
	fs.StringVar(&o.html, "html", "", "afterwards, draw the --pcap capture as one HTML page in `FILE` (as xroce dump --html)")
	fs.BoolVar(&o.quiet, "quiet", false, "print only the results table")
	fs.StringVar(&o.statDir, "stat-dir", o.statDir, "serve counters to 'xroce stat' on a socket in `DIR` (\"\": no socket)")
	pos, err := base.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if o.pcap == "none" {
		o.pcap = ""
	}
	switch {
	case len(pos) > 0:
		return base.Usagef("lab: unexpected argument %q", pos[0])
	case o.duration < 0 || o.duration > time.Minute:
		return base.Usagef("lab: --duration %v out of range 0..1m", o.duration)
	case len(o.sizes) == 0 || len(o.sizes) > 16:
		return base.Usagef("lab: --sizes wants 1 to 16 sizes")
	case o.size < 1 || o.size > 16<<20:
		return base.Usagef("lab: --size %d out of range 1..16M", o.size)
	case o.mtu < 576 || o.mtu > 9000:
		return base.Usagef("lab: --mtu %d out of range 576..9000", o.mtu)
	case o.queues < 1 || o.queues > 8:
		return base.Usagef("lab: --queues %d out of range 1..8", o.queues)
	case !(o.loss >= 0 && o.loss <= 0.5):
		return base.Usagef("lab: --loss %v out of range 0..0.5 (50%%)", o.loss)
	case o.trace < 0 || o.trace > 100000:
		return base.Usagef("lab: --trace %d out of range 0..100000", o.trace)
	case o.html != "" && o.pcap == "":
		return base.Usagef("lab: --html draws the frames of --pcap: give it a file")
	}
	for _, n := range o.sizes {
		if n > 4<<20 {
			return base.Usagef("lab: tour size %d above 4M", n)
		}
	}
	err = lab(ctx, e, o)
	if o.html != "" && ctx.Err() == nil {
		err = errors.Join(err, labHTML(e, o))
	}
	return err
}

// labHTML draws the lab's capture, with its hosts named A and B.
func labHTML(e *base.Env, o labOptions) error {
	d := capture.NewDumper(io.Discard, capture.Options{Quiet: true})
	d.HTML = capture.NewHTMLPage(o.pcap, "xroce lab: the tour, the loss phase and the first frames of each measurement", labNames())
	if err := d.File(o.pcap); err != nil {
		return fmt.Errorf("lab: html: %s: %w", o.pcap, err)
	}
	if err := d.HTML.Write(o.html); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if !o.quiet {
		fmt.Fprintf(e.Stdout, "  %-34s the pcap drawn: sequence diagrams, PSN graphs, headers bit by bit\n", "html "+o.html)
	}
	return nil
}

// gbits formats a rate of bytes over d in Gbit/s.
func gbits(bytes uint64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f Gbit/s", float64(bytes)*8/d.Seconds()/1e9)
}

// micros formats a duration in microseconds.
func micros(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}
