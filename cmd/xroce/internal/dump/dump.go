// Package dump is xroce dump: RoCE v2 packets decoded from a capture file
// or live from an interface (AF_PACKET, live_linux.go), printed one line
// each with a summary, and optionally drawn as an HTML page. The decoding,
// printing and drawing are package capture's, which lab shares; this
// package holds the command's flags and the live capture.
package dump

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/capture"
)

const dumpAbout = `
Decode every RoCE v2 packet in a capture (pcap or pcapng; Ethernet, Linux
cooked or raw IP links), one line each: time, addresses, opcode, destination
QP, PSN, AckReq (A), the key fields of the extension headers, payload length
and whether the ICRC is right. Packets that are not RoCE v2 (not UDP port
4791) are counted and skipped. A summary follows: packets per opcode, CM
messages, ICRC failures, and for each queue pair the PSN gaps and
retransmissions seen.

A UD SEND to QP 1 carries a management datagram: dump decodes its
Communication Manager message (REQ, REP, RTU, REJ, MRA, DREQ, DREP, SIDR_REQ,
SIDR_REP) on a second line: transaction ID, communication IDs, service ID
(PORTSPACE:port when it is an rdma_cm one), QPN, starting PSN, path MTU,
responder resources/initiator depth, the rdma_cm header's addresses and port,
the REJ reason, the MRA service timeout, and "pdata N/M": the private data up
to its last nonzero byte (N) out of the M bytes the message carries.

Captures as they come: a frame cut by a snap length is decoded as far as
captured ("ICRC not captured", never malformed); a frame with UDP source port
4791 whose ICRC matches with another port (0xC000-0xFFFF) comes from the
ConnectX RDMA sniffer, which rewrites the port: it is marked, and the port is
named per flow; Mellanox DC (the RD opcode range) and RoCE v1 (EtherType
0x8915) are decoded and their ICRC checked; native InfiniBand (ERF) is counted.
ICRCs print as Wireshark prints them: the four bytes in wire order.

With -v every header field is printed, and the BTH, extension headers and MAD
header are drawn as the IBTA specification draws them, bit by bit; a CM
message is listed field by field, with its rdma_cm header and private data.

With -i, dump captures live through an AF_PACKET socket (root or CAP_NET_RAW)
with a filter that keeps only RoCE v2 frames, sent and received. Frames that an
AF_XDP program sends or receives on that host bypass the kernel's capture
points and are not seen there: capture on the peer, or use the pcap that
xroce's own commands write.`

const dumpExamples = `  xroce dump bth/testdata/01_rc_pingpong.pcap
  xroce dump -v -c 3 capture.pcapng
  xroce dump -q capture.pcap                  # the summary only
  xroce dump -q --html page.html capture.pcap # and the capture drawn: diagrams, PSN graphs, headers
  xroce dump -i eth0 -w roce.pcap             # live, until Ctrl-C; also saved for Wireshark`

// Cmd is xroce dump.
var Cmd = base.Command{Name: "dump", Summary: "decode RoCE v2 packets from a capture file or live from an interface", Run: runDump}

func runDump(ctx context.Context, e *base.Env, args []string) error {
	var o capture.Options
	var iface, write, html string
	fs := base.NewFlagSet(e, "dump", "[flags] FILE | -i INTERFACE [-w FILE]", dumpAbout, dumpExamples)
	fs.BoolVar(&o.Verbose, "v", false, "print every header field, with bit diagrams of the BTH and extension headers")
	fs.BoolVar(&o.Hexdump, "x", false, "print each packet's payload in hex")
	fs.IntVar(&o.Count, "c", 0, "stop after `N` RoCE packets (0: all)")
	fs.BoolVar(&o.Quiet, "q", false, "no per-packet lines: the summary only")
	fs.BoolVar(&o.NoSummary, "no-summary", false, "no summary at the end")
	fs.StringVar(&iface, "i", "", "capture live from `INTERFACE` (AF_PACKET; RoCE v2 frames only, both directions) until Ctrl-C or -c")
	fs.StringVar(&write, "w", "", "with -i: also write the captured frames to `FILE` (pcap)")
	fs.StringVar(&html, "html", "", "also draw the capture as one HTML page in `FILE`: sequence diagrams, PSN graphs, packet list with header drawings")
	pos, err := base.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case o.Count < 0:
		return base.Usagef("dump: -c must be 0 or more")
	case iface != "" && len(pos) != 0:
		return base.Usagef("dump: give a capture file or -i INTERFACE, not both")
	case iface == "" && write != "":
		return base.Usagef("dump: -w writes a live capture: use it with -i")
	case iface == "" && len(pos) != 1:
		fs.Usage()
		return base.Usagef("dump: want exactly one capture file, got %d", len(pos))
	}
	d := capture.NewDumper(e.Stdout, o)
	name := iface
	if iface == "" {
		name = pos[0]
	}
	if html != "" {
		d.HTML = capture.NewHTMLPage(name, "xroce dump "+strings.Join(args, " "), nil)
	}
	if iface != "" {
		err = live(ctx, d, e.Stdout, o.Quiet, iface, write)
	} else {
		err = d.File(pos[0])
	}
	if html != "" && (err == nil || d.Packets > 0) {
		err = errors.Join(err, d.HTML.Write(html))
	}
	if !o.NoSummary && (err == nil || d.Packets > 0) {
		d.Summary()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if d.ICRCBad > 0 || d.Malformed > 0 {
		return fmt.Errorf("%s: %d packets with a bad ICRC, %d malformed", name, d.ICRCBad, d.Malformed)
	}
	return nil
}
