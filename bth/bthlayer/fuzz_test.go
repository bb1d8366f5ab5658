package bthlayer

import (
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// FuzzPacket decodes arbitrary Ethernet frames with gopacket and the BTH
// layer: it must never panic, and a decoded layer must be consistent.
func FuzzPacket(f *testing.F) {
	names, _ := filepath.Glob("../testdata/*.pcap")
	for _, name := range names {
		frames := readPcapF(f, name)
		f.Add(frames[0])
		f.Add(frames[len(frames)-1])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		l, ok := p.Layer(LayerTypeBTH).(*BTH)
		if !ok {
			return
		}
		if len(l.Contents) != 12+l.Opcode.Headers().Size() {
			t.Fatalf("%v: contents %d bytes", l.Opcode, len(l.Contents))
		}
		_ = gopacket.LayerDump(l)
		_ = l.Summary()
	})
}
