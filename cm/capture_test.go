package cm

import (
	"os"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/mad"
)

// TestCapturePSNs checks connPSNs against rxe's rping connection
// (testdata/09_rping_rdmacm.pcap, from ../shared/pcaps): each side's
// first data packet carries the PSN connPSNs says it sends from.
func TestCapturePSNs(t *testing.T) {
	fh, err := os.Open("testdata/09_rping_rdmacm.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	var reqPSN, repPSN uint32
	var client, server string
	first := map[string]uint32{}
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		var f bth.Frame
		if f.Decode(data) != nil {
			continue
		}
		src := f.SrcIP().String()
		if f.BTH.DestQP() == 1 {
			m, err := mad.Parse(f.Payload)
			if err != nil {
				t.Fatal(err)
			}
			switch m.AttrID() {
			case mad.AttrREQ:
				reqPSN, client = mad.REQ(m.Body()).StartingPSN(), src
			case mad.AttrREP:
				repPSN, server = mad.REP(m.Body()).StartingPSN(), src
			}
			continue
		}
		if _, ok := first[src]; !ok && f.Opcode().IsRequest() {
			first[src] = uint32(f.BTH.PSN())
		}
	}
	if client == "" || server == "" || len(first) != 2 {
		t.Fatalf("capture: REQ from %q, REP from %q, first requests %v", client, server, first)
	}
	for _, side := range []struct {
		name   string
		active bool
	}{{client, true}, {server, false}} {
		sq, rq := connPSNs(side.active, reqPSN, repPSN)
		other := server
		if !side.active {
			other = client
		}
		if first[side.name] != sq || first[other] != rq {
			t.Errorf("active %v: sends from %#x, receives from %#x; the capture: %#x and %#x", side.active, sq, rq, first[side.name], first[other])
		}
	}
}
