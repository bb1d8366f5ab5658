package afpacket_test

import (
	"log"
	"time"

	"github.com/xroce/xroce/afpacket"
)

func Example() {
	l, err := afpacket.Open("eth0", afpacket.Config{})
	if err != nil {
		log.Fatal(err) // errors.Is(err, afpacket.ErrPermission): run as root
	}
	defer l.Close()
	// Keep the kernel from answering RoCE datagrams with ICMP port
	// unreachable while the link handles them.
	quiet, err := afpacket.ListenDiscard(4791)
	if err != nil {
		log.Fatal(err)
	}
	defer quiet.Close()

	bufs := make([][]byte, 64)
	for {
		n, err := l.Receive(bufs, time.Second)
		if err != nil {
			log.Fatal(err)
		}
		for _, frame := range bufs[:n] {
			_ = frame // parse and handle the RoCE frame
		}
		l.Release(bufs[:n])
	}
}
