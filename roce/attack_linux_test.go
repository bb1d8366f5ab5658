package roce

import (
	"testing"

	"github.com/xroce/xroce/afpacket"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/internal/rogue"
)

// TestAttackVeth runs the adversarial suite over a veth pair: the victim
// is a device on AF_XDP with its XDP program in one namespace, the
// attacker an AF_PACKET socket on the other end, as a second host on the
// segment would be.
func TestAttackVeth(t *testing.T) {
	p := netns.NewT(t, netns.Config{MTU: 1500, Queues: 1})
	var d *Device
	if err := p.A.Do(func() error {
		var err error
		d, err = openVeth(p.A, Config{}, vethOpts{}, nil)
		return err
	}); err != nil {
		t.Fatalf("open %s: %v", p.A.Ifname, err)
	}
	t.Cleanup(func() { d.Close() })
	var l *afpacket.Link
	if err := p.B.Do(func() error {
		var err error
		l, err = afpacket.Open(p.B.Ifname, afpacket.Config{})
		return err
	}); err != nil {
		t.Fatalf("open the attacker's socket on %s: %v", p.B.Ifname, err)
	}
	t.Cleanup(func() { l.Close() })
	peer := &rogue.Peer{Link: l, IP: p.B.IP, QPN: 0x4242, VictimIP: p.A.IP}
	copy(peer.MAC[:], p.B.MAC)
	copy(peer.VictimMAC[:], p.A.MAC)
	runAttacks(t, d, peer)
}
