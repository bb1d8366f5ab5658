package bthlayer

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xroce/xroce/bth"
)

func readPcap(t *testing.T, path string) [][]byte { return readPcapF(t, path) }

func readPcapF(t testing.TB, path string) [][]byte {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
}

// checkLayer compares the gopacket layer with package bth's decoding.
func checkLayer(t *testing.T, where string, l *BTH, f *bth.Frame) {
	t.Helper()
	if l.BTHFields != f.BTH.Fields() {
		t.Errorf("%s: BTH fields %+v, want %+v", where, l.BTHFields, f.BTH.Fields())
	}
	if !bytes.Equal(l.Payload, f.Payload) {
		t.Errorf("%s: payload %d bytes, want %d", where, len(l.Payload), len(f.Payload))
	}
	if l.ICRC != f.ICRC {
		t.Errorf("%s: ICRC %#x, want %#x", where, l.ICRC, f.ICRC)
	}
	eq := func(name string, have bool, want bool) {
		if have != want {
			t.Errorf("%s: %s present %v, want %v", where, name, have, want)
		}
	}
	eq("DETH", l.DETH != nil, f.DETH != nil)
	eq("FETH", l.FETH != nil, f.FETH != nil)
	eq("RETH", l.RETH != nil, f.RETH != nil)
	eq("AtomicETH", l.AtomicETH != nil, f.AtomicETH != nil)
	eq("AETH", l.AETH != nil, f.AETH != nil)
	eq("AtomicAckETH", l.AtomicAckETH != nil, f.AtomicAckETH != nil)
	eq("ImmDt", l.ImmDt != nil, f.ImmDt != nil)
	eq("IETH", l.IETH != nil, f.IETH != nil)
	switch {
	case l.DETH != nil && *l.DETH != f.DETH.Fields(),
		l.RETH != nil && *l.RETH != f.RETH.Fields(),
		l.AtomicETH != nil && *l.AtomicETH != f.AtomicETH.Fields(),
		l.AETH != nil && *l.AETH != f.AETH.Fields(),
		l.AtomicAckETH != nil && l.AtomicAckETH.OrigRemoteData != f.AtomicAckETH.OrigRemoteData(),
		l.ImmDt != nil && l.ImmDt.Imm != f.ImmDt.Imm(),
		l.IETH != nil && l.IETH.RKey != f.IETH.RKey():
		t.Errorf("%s: extension header fields differ", where)
	}
}

// TestCaptures decodes every frame of the rxe captures with gopacket.
func TestCaptures(t *testing.T) {
	names, _ := filepath.Glob("../testdata/*.pcap")
	if len(names) == 0 {
		t.Fatal("no captures in ../testdata")
	}
	total := 0
	for _, name := range names {
		for i, data := range readPcap(t, name) {
			where := filepath.Base(name) + " #" + strconv.Itoa(i+1)
			var f bth.Frame
			if err := f.Decode(data); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
			if el := p.ErrorLayer(); el != nil {
				t.Fatalf("%s: %v", where, el.Error())
			}
			l, ok := p.Layer(LayerTypeBTH).(*BTH)
			if !ok {
				t.Fatalf("%s: no BTH layer in %v", where, p)
			}
			checkLayer(t, where, l, &f)
			if l.ICRCValid == nil || !*l.ICRCValid {
				t.Errorf("%s: ICRCValid = %v", where, l.ICRCValid)
			}
			total++
		}
	}
	t.Logf("%d frames", total)
}

func TestLayerDump(t *testing.T) {
	data := readPcap(t, "../testdata/06_atomic_bw.pcap")[1] // ATOMIC_ACKNOWLEDGE
	p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
	l := p.Layer(LayerTypeBTH).(*BTH)
	dump := gopacket.LayerDump(l)
	for _, want := range []string{"RoCEv2", "Opcode=RC ATOMIC_ACKNOWLEDGE", "PKey=65535", "Syndrome=ACK credits=invalid",
		"OrigRemoteData=", "ICRCValid=true", "RETH=nil"} {
		if !strings.Contains(dump, want) {
			t.Errorf("LayerDump lacks %q:\n%s", want, dump)
		}
	}
	if s := p.String(); !strings.Contains(s, "RoCEv2") {
		t.Errorf("packet String lacks the layer:\n%s", s)
	}
	if s := l.Summary(); !strings.HasPrefix(s, "RC ATOMIC_ACKNOWLEDGE QP 0x36 PSN 4320649") {
		t.Errorf("Summary = %q", s)
	}
}

// TestBadICRC: a corrupted payload byte is shown as an ICRC failure.
func TestBadICRC(t *testing.T) {
	data := append([]byte(nil), readPcap(t, "../testdata/03_write_bw_s64.pcap")[0]...)
	data[len(data)-10] ^= 1
	p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
	l := p.Layer(LayerTypeBTH).(*BTH)
	if l.ICRCValid == nil || *l.ICRCValid {
		t.Errorf("ICRCValid = %v for a corrupted frame", l.ICRCValid)
	}
	if !strings.Contains(l.Summary(), "BAD-ICRC") {
		t.Errorf("Summary = %q", l.Summary())
	}
}

// TestDecodingLayerParser uses the layer without allocation-heavy packets.
func TestDecodingLayerParser(t *testing.T) {
	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		udp     layers.UDP
		roce    BTH
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &udp, &roce, &payload)
	var decoded []gopacket.LayerType
	for _, data := range readPcap(t, "../testdata/05_read_bw_s8192.pcap") {
		if err := parser.DecodeLayers(data, &decoded); err != nil {
			t.Fatalf("DecodeLayers: %v (decoded %v)", err, decoded)
		}
		if decoded[3] != LayerTypeBTH {
			t.Fatalf("decoded %v", decoded)
		}
		var f bth.Frame
		if err := f.Decode(data); err != nil {
			t.Fatal(err)
		}
		checkLayer(t, "05", &roce, &f)
		if roce.ICRCValid != nil {
			t.Errorf("ICRCValid set without a packet")
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	good := readPcap(t, "../testdata/06_atomic_bw.pcap")[0][14+20+8:] // FETCH_ADD UDP payload
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"short", good[:15], ErrTruncated},
		{"opcode", append([]byte{0x15}, good[1:]...), ErrOpcode},
		{"ext truncated", good[:bth.BTHSize+10+bth.ICRCSize], ErrTruncated},
		{"pad", append([]byte{0x11, 0x30}, good[2:bth.BTHSize+bth.AETHSize+bth.ICRCSize]...), ErrPadCnt},
	}
	for _, tt := range tests {
		var l BTH
		if err := l.DecodeFromBytes(tt.data, gopacket.NilDecodeFeedback); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}
