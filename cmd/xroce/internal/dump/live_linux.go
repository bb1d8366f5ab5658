package dump

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xroce/xroce/afpacket"
	"github.com/xroce/xroce/cmd/xroce/internal/capture"
)

// live captures RoCE v2 frames from an interface into d until ctx ends or
// -c packets were decoded, writing them to a pcap file when write is set;
// unless quiet it says so on w first.
func live(ctx context.Context, d *capture.Dumper, w io.Writer, quiet bool, iface, write string) (err error) {
	l, err := afpacket.Open(iface, afpacket.Config{Outgoing: true, TxFrames: 1, RxFrames: 256})
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	defer l.Close()
	var pw *pcapgo.Writer
	if write != "" {
		f, err := os.Create(write)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := f.Close(); err == nil && cerr != nil {
				err = cerr
			}
		}()
		pw = pcapgo.NewWriterNanos(f)
		if err := pw.WriteFileHeader(uint32(l.Info().MaxFrame), layers.LinkTypeEthernet); err != nil {
			return fmt.Errorf("write %s: %w", write, err)
		}
	}
	if !quiet {
		fmt.Fprintf(w, "capturing RoCE v2 on %s (%s); Ctrl-C to stop\n", iface, l.Info().MAC)
	}
	bufs := make([][]byte, 64)
	stop := context.AfterFunc(ctx, l.Wakeup)
	defer stop()
	for !d.Done() && ctx.Err() == nil {
		n, err := l.Receive(bufs, -1)
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		now := time.Now()
		for _, b := range bufs[:n] {
			if d.Done() {
				break
			}
			if pw != nil {
				ci := gopacket.CaptureInfo{Timestamp: now, CaptureLength: len(b), Length: len(b)}
				if err := pw.WritePacket(ci, b); err != nil {
					l.Release(bufs[:n])
					return fmt.Errorf("write %s: %w", write, err)
				}
			}
			d.Packet(b, now)
		}
		l.Release(bufs[:n])
	}
	return nil
}
