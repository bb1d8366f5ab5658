package netns_test

import (
	"fmt"
	"log"
	"net"
	"net/netip"

	"github.com/xroce/xroce/internal/netns"
)

// A UDP socket pair across the veth: each socket is made inside its host's
// namespace and stays there.
func ExampleNew() {
	p, err := netns.New(netns.Config{MTU: 9000})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	listen := func(h *netns.Host) (c *net.UDPConn) {
		err := h.Do(func() (err error) {
			c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(h.IP, 4791)))
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
		return c
	}
	a, b := listen(p.A), listen(p.B)
	defer a.Close()
	defer b.Close()
	a.WriteToUDPAddrPort([]byte("hello"), netip.AddrPortFrom(p.B.IP, 4791))
	buf := make([]byte, 100)
	n, from, _ := b.ReadFromUDPAddrPort(buf)
	fmt.Printf("%s from %s via %s\n", buf[:n], from, p.B.Ifname)
}
