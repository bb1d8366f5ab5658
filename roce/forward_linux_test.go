package roce

import (
	"fmt"
	"testing"
)

// BenchmarkVethWriteForwarded is BenchmarkVethWrite on both queues of the
// veth pair, with the two QPs of the connection on different workers: on
// veth a frame arrives on the queue it was sent from, so each frame reaches
// the worker of the queue its sender transmits on and is forwarded to its
// QP's. /same has both QPs on the same worker, for comparison.
func BenchmarkVethWriteForwarded(b *testing.B) {
	for _, skew := range []bool{false, true} {
		for _, size := range []int{64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%d", map[bool]string{false: "same", true: "forwarded"}[skew], size), func(b *testing.B) {
				da, db, _ := vethDevices(b, Config{}, vethOpts{queues: 2})
				if skew {
					newSide(b, db, RC, 0, nil, nil)
				}
				a, r := rcPair(b, da, db, size)
				before, sent := db.Stats(), da.Stats()
				benchWrite(b, a, r, size, 16)
				after := db.Stats()
				b.ReportMetric(float64(da.Stats().Retransmits-sent.Retransmits), "retransmits")
				if skew && after.Forwarded == before.Forwarded {
					b.Fatal("no frame forwarded")
				}
				if d := after.ForwardDropped - before.ForwardDropped; d > 0 {
					b.Errorf("%d forwarded frames dropped", d)
				}
			})
		}
	}
}
