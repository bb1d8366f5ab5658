package bpf_test

import (
	"fmt"
	"log"
	"net"

	"github.com/xroce/xroce/bpf"
)

// The xdp package does this for each interface it serves: load the
// program, attach it, then register each queue's AF_XDP socket.
func Example() {
	prog, err := bpf.Load(bpf.Options{Frags: true}) // frags: MTUs above ~3.5 KB
	if err != nil {
		log.Fatal(err) // errors.Is(err, bpf.ErrPermission): run as root
	}
	defer prog.Close() // detaches too

	ifi, err := net.InterfaceByName("eth0")
	if err != nil {
		log.Fatal(err)
	}
	mode, err := prog.Attach(ifi.Index)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("attached in", mode, "mode")

	var xskFD int // an AF_XDP socket bound to eth0, queue 0
	if err := prog.SetSocket(0, xskFD); err != nil {
		log.Fatal(err)
	}
	// RoCE v2 frames arriving on queue 0 now go to the socket; everything
	// else still goes to the kernel.
}

// Losing 1% of the RoCE v2 frames that arrive on an interface, at random,
// where netem is missing or cannot see AF_XDP traffic.
func ExampleProgram_SetLoss() {
	prog, err := bpf.Load(bpf.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer prog.Close()
	ifi, err := net.InterfaceByName("veth0")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := prog.Attach(ifi.Index); err != nil {
		log.Fatal(err)
	}
	if err := prog.SetLoss(0.01); err != nil {
		log.Fatal(err)
	}

	// ... traffic ...

	c, err := prog.Counters()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("loss %.0f%%: %d frames redirected, %d dropped\n", 100*prog.Loss(), c.Redirected, c.InjectedDrops)
}
