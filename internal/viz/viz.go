// Package viz draws a RoCE v2 capture as one self-contained HTML page: a
// sequence diagram per queue pair (the two endpoints as lifelines, each
// packet an arrow), a PSN-over-time graph for each requester (the idea of
// tcptrace's time-sequence graph, with the responder's ACKs as a line) with
// the throughput below it, and the packet list, where choosing a packet
// draws its headers bit by bit as the IBTA specification (Vol. 1 §9.2,
// §9.3) draws them: 32-bit rows of field boxes.
//
// The package knows nothing of frames: a Capture is a neutral model that a
// builder fills from decoded packets (xroce dump and xroce lab build it from
// package bth's Frame). The page needs no network: its CSS, script and SVG
// are inline, and everything that comes from the capture is escaped by
// html/template or carried as JSON and set as text by the script.
//
// Large captures stay usable: a Capture holds at most MaxPackets packets
// (the list and the graphs), a sequence diagram draws at most MaxArrows
// packets of its pair, and the page says what it left out.
package viz

import "time"

const (
	// MaxPackets is the number of packets a Capture should hold; a builder
	// keeps the first MaxPackets and counts the rest in Capture.Truncated.
	MaxPackets = 20000
	// MaxArrows is the number of packets one sequence diagram draws: the
	// first MaxArrows of its pair.
	MaxArrows = 2000
)

// Capture is what one page shows.
type Capture struct {
	Title     string   // the page's title, e.g. the capture file's name
	Source    string   // what made it, e.g. "xroce dump lab.pcap"
	Frames    int      // frames read, RoCE v2 or not
	Skipped   int      // frames that are not RoCE v2
	Truncated int      // RoCE v2 packets past MaxPackets, not in Packets
	Notes     []string // lines for the top of the page
	Pairs     []Pair
	Packets   []Packet // in capture order
}

// Pair is two endpoints that exchange packets: two queue pairs, or one
// queue pair and a peer whose QP number the capture does not show.
type Pair struct {
	A, B      Endpoint // A sent the pair's first packet
	Transport string   // "RC", "UC", "UD" or "CM" (management datagrams on QP 1)
}

// Endpoint is one end of a Pair.
type Endpoint struct {
	Name    string // a short name, e.g. "A" in the lab; may be ""
	Addr    string // IP address
	QP      uint32
	QPKnown bool // false: the capture never names this end's QP
}

// Packet is one RoCE v2 packet (or a malformed one) of the capture.
type Packet struct {
	N        int           // frame number in the capture, from 1
	Time     time.Duration // since the capture's first frame
	Pair     int           // index in Capture.Pairs; -1 for none (malformed)
	FromA    bool          // sent by the pair's A
	Src, Dst string        // IP addresses
	DestQP   uint32
	Opcode   string // e.g. "RC SEND_ONLY"
	PSN      uint32
	// Response: an ACK, read response or atomic ACK, whose PSN belongs to
	// the receiver's requests. Data: a request or read response carrying
	// payload or asking for it (plotted on the PSN graph).
	Response, Data bool
	AckReq         bool
	// Acked: an ACK (syndrome ACK) for every request up to and including PSN.
	Acked   bool
	Payload int    // payload bytes
	Wire    int    // frame bytes
	Label   string // the arrow's label: opcode, PSN and key fields
	Marks   Mark
	Note    string        // what the marks mean for this packet
	Missing int           // PSNs missing just before this one in its flow (MarkGap)
	RNRWait time.Duration // MarkRNR: how long the RNR NAK asks the requester to wait
	Error   string        // MarkBad: what is wrong (malformed, bad ICRC)
	Headers []Header      // for the bit diagrams, in wire order
}

// Header is one header of a packet. A header without Fields is a summary
// line (Ethernet, IP, UDP); one with Fields is drawn bit by bit.
type Header struct {
	Name   string // "BTH", "RETH", ...
	Title  string // what this packet's header says, in a line
	About  string // what the header is; the same for every packet
	Fields []Field
}

// Field is a field of a header as the specification names it: its width in
// bits and its value, formatted.
type Field struct {
	Name  string
	Bits  int
	Value string
}

// Mark says what is special about a packet; the page colours it by its
// most important mark.
type Mark uint16

const (
	MarkRetrans  Mark = 1 << iota // a PSN sent again
	MarkNAK                       // NAK: PSN sequence error
	MarkNAKError                  // NAK: invalid request, remote access or remote operational error
	MarkRNR                       // RNR NAK: the responder had no receive WQE
	MarkLost                      // sent but never arrived (a NAK named its PSN)
	MarkGap                       // PSNs before this one never showed up in the capture
	MarkCM                        // a CM MAD on QP 1
	MarkBad                       // malformed or bad ICRC
)

// kinds are the marks by importance, with their CSS class and legend.
var kinds = []struct {
	mark   Mark
	class  string
	legend string
}{
	{MarkBad, "bad", "malformed or bad ICRC"},
	{MarkNAKError, "nakerr", "NAK: invalid request, remote access or operational error"},
	{MarkNAK, "nak", "NAK: PSN sequence error"},
	{MarkRNR, "rnr", "RNR NAK, and the wait it asks for"},
	{MarkLost, "lost", "lost: sent, never arrived (a NAK names it)"},
	{MarkGap, "gap", "PSNs missing from the capture before this one"},
	{MarkRetrans, "retrans", "retransmission: a PSN sent again"},
	{MarkCM, "cm", "CM message on QP 1"},
}

// Class is the CSS class of the packet's most important mark: "bad",
// "nakerr", "nak", "rnr", "lost", "gap", "retrans", "cm", or "req" and
// "resp" for plain requests and responses.
func (p *Packet) Class() string {
	for _, k := range kinds {
		if p.Marks&k.mark != 0 {
			return k.class
		}
	}
	if p.Response {
		return "resp"
	}
	return "req"
}
