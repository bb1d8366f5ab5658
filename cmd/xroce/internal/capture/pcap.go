package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// packetSource reads a capture file, pcap or pcapng, and hands out each
// packet as an Ethernet frame: captures taken on "any" (Linux cooked, v1 and
// v2) or on raw IP links are given a synthetic Ethernet header so one decoder
// serves them all.
type packetSource struct {
	next    func() ([]byte, gopacket.CaptureInfo, error)
	link    layers.LinkType
	mixed   bool   // pcapng: the link type comes with each packet
	scratch []byte // frame rebuilt for non-Ethernet link types
	n       int    // packets read so far
	erf     bool   // the last packet is native InfiniBand (link type ERF), not decoded
}

// errNotCapture says the file is neither pcap nor pcapng.
var errNotCapture = errors.New("not a pcap or pcapng file")

func openCapture(r io.Reader) (*packetSource, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("%w: file is shorter than a capture header", errNotCapture)
	}
	switch binary.LittleEndian.Uint32(magic) {
	case 0xa1b2c3d4, 0xd4c3b2a1, 0xa1b23c4d, 0x4d3cb2a1:
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("read pcap header: %w", err)
		}
		return &packetSource{next: pr.ZeroCopyReadPacketData, link: pr.LinkType()}, nil
	case 0x0a0d0d0a:
		nr, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, fmt.Errorf("read pcapng header: %w", err)
		}
		return &packetSource{next: nr.ZeroCopyReadPacketData, link: nr.LinkType(), mixed: true}, nil
	}
	return nil, fmt.Errorf("%w (starts with % x)", errNotCapture, magic)
}

// Next returns the next packet as an Ethernet frame, io.EOF at the end of the
// file, or an error naming the packet number where the file is damaged.
// The frame is valid until the next call.
func (s *packetSource) Next() (frame []byte, ci gopacket.CaptureInfo, err error) {
	data, ci, err := s.next()
	if err != nil {
		if err == io.EOF {
			return nil, ci, io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, ci, fmt.Errorf("packet %d: file ends in the middle of a packet (truncated capture)", s.n+1)
		}
		return nil, ci, fmt.Errorf("packet %d: %w", s.n+1, err)
	}
	s.n++
	link := s.link
	if s.mixed && len(ci.AncillaryData) > 0 {
		if lt, ok := ci.AncillaryData[0].(layers.LinkType); ok {
			link = lt
		}
	}
	s.erf = link == linkTypeERF
	return s.toEthernet(link, data), ci, nil
}

// linkTypeERF is the pcap link type of Endace ERF records, which ibdump
// uses for native InfiniBand captures.
const linkTypeERF layers.LinkType = 197

// toEthernet gives data an Ethernet header. It returns nil for link types
// that cannot carry RoCE v2, so the caller counts them as non-RoCE.
func (s *packetSource) toEthernet(link layers.LinkType, data []byte) []byte {
	var etherType uint16
	var payload []byte
	switch link {
	case layers.LinkTypeEthernet:
		return data
	case layers.LinkTypeLinuxSLL: // 16-byte header, protocol at 14
		if len(data) < 16 {
			return nil
		}
		etherType, payload = binary.BigEndian.Uint16(data[14:16]), data[16:]
	case layers.LinkTypeLinuxSLL2: // 20-byte header, protocol at 0
		if len(data) < 20 {
			return nil
		}
		etherType, payload = binary.BigEndian.Uint16(data[0:2]), data[20:]
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6, 12 /* DLT_RAW on some systems */ :
		if len(data) < 1 {
			return nil
		}
		switch data[0] >> 4 {
		case 4:
			etherType = 0x0800
		case 6:
			etherType = 0x86dd
		default:
			return nil
		}
		payload = data
	default:
		return nil
	}
	need := 14 + len(payload)
	if cap(s.scratch) < need {
		s.scratch = make([]byte, need)
	}
	f := s.scratch[:need]
	clear(f[:12]) // addresses unknown: shown as 00:00:00:00:00:00
	binary.BigEndian.PutUint16(f[12:14], etherType)
	copy(f[14:], payload)
	return f
}

// relTime formats t relative to the first packet's time, as tshark does.
func relTime(first, t time.Time) string {
	d := t.Sub(first)
	return fmt.Sprintf("%d.%06d", d/time.Second, (d%time.Second)/time.Microsecond)
}
