package link_test

import (
	"fmt"
	"time"

	"github.com/xroce/xroce/link"
)

// A deterministic simulation: a fake clock jumps from one delivery to the
// next, so a 10 ms delay costs no real time.
func ExampleNewPipe() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	start := now
	a, b := link.NewPipe(link.PipeConfig{
		Seed:  1,
		Clock: func() time.Time { return now },
		AtoB:  link.Faults{Delay: 10 * time.Millisecond, Rate: 1e9},
	})
	tx := make([][]byte, 3)
	n := a.Alloc(tx)
	for i := range tx[:n] {
		tx[i] = tx[i][:1250] // 10 µs at 1 Gbit/s
		tx[i][0] = byte(i)
	}
	a.Transmit(tx[:n])

	rx := make([][]byte, 8)
	for {
		next, ok := b.NextDelivery()
		if !ok {
			break
		}
		now = next
		got, _ := b.Receive(rx, 0)
		for _, f := range rx[:got] {
			fmt.Printf("frame %d (%d bytes) at +%v\n", f[0], len(f), now.Sub(start))
		}
		b.Release(rx[:got])
	}
	// Output:
	// frame 0 (1250 bytes) at +10.01ms
	// frame 1 (1250 bytes) at +10.02ms
	// frame 2 (1250 bytes) at +10.03ms
}
