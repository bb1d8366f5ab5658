//go:build linux

package xdp_test

import (
	"fmt"
	"log"
	"time"

	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/xdp"
)

// Open a device on one end of a test veth pair (inside its namespace), then
// use its socket as a link.Link from any goroutine: allocate, build frames in
// place, transmit; receive and release.
func Example() {
	pair, err := netns.New(netns.Config{MTU: 1500})
	if err != nil {
		log.Fatal(err)
	}
	defer pair.Close()

	var dev *xdp.Device
	if err := pair.A.Do(func() error { // sockets bind in the caller's namespace
		dev, err = xdp.Open(pair.A.Ifname, xdp.Config{})
		return err
	}); err != nil {
		log.Fatal(err) // errors.Is(err, xdp.ErrPermission), xdp.ErrNotSupported, ...
	}
	defer dev.Close()

	s := dev.Sockets()[0]
	fmt.Println(s.Info().Kind, s.Info().Mode, s.Info().MaxFrame)

	bufs := make([][]byte, 32)
	n := s.Alloc(bufs) // buffers of Info().MaxFrame bytes, in the UMEM
	for i := range n {
		bufs[i] = bufs[i][:60] // write a frame in place, then cut to its length
	}
	if _, err := s.Transmit(bufs[:n]); err != nil {
		log.Print(err)
	}

	n, err = s.Receive(bufs, 10*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	s.Release(bufs[:n]) // received frames go back to the kernel
}
