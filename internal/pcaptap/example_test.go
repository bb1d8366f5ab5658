package pcaptap_test

import (
	"bytes"
	"fmt"

	"github.com/xroce/xroce/internal/pcaptap"
	"github.com/xroce/xroce/link"
)

// Record what one end of a link sends, as a capture on the wire would see
// it, and keep a copy of each frame for a trace.
func ExampleWrap() {
	var pcap bytes.Buffer
	rec, err := pcaptap.New(&pcap, pcaptap.Config{OnFrame: func(f pcaptap.Frame) {
		fmt.Printf("%s %s %d bytes\n", f.Label, f.Dir, len(f.Data))
	}})
	if err != nil {
		panic(err)
	}
	a, b := link.NewPipe(link.PipeConfig{Seed: 1})
	tapped := pcaptap.Wrap(a, rec, "A", pcaptap.TX)
	defer tapped.Close()
	defer b.Close()

	rec.Enable(0) // record every frame from now on
	bufs := make([][]byte, 2)
	n := tapped.Alloc(bufs)
	for i := range bufs[:n] {
		bufs[i] = bufs[i][:60+i]
	}
	tapped.Transmit(bufs[:n])
	rec.Flush()
	fmt.Printf("pcap: %d bytes, %+v\n", pcap.Len(), rec.Stats())
	// Output:
	// A tx 60 bytes
	// A tx 61 bytes
	// pcap: 177 bytes, {Frames:2 Bytes:121 Missed:0 Cut:0}
}
