package roce

import (
	"testing"

	"github.com/xroce/xroce/link"
)

// createQPs makes n RC QPs on d and returns their numbers and UDP source
// ports, in creation order.
func createQPs(t *testing.T, d *Device, n int) (qpns []uint32, sports []uint16) {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		q, err := pd.CreateQP(QPConfig{Type: RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 1, MaxRecvWR: 1})
		if err != nil {
			t.Fatal(err)
		}
		qpns, sports = append(qpns, q.QPN()), append(sports, q.q.UDPSourcePort())
	}
	return qpns, sports
}

// By default a device's QP numbers and source ports cannot be told from
// the ones before them: a peer that saw a connection's QPN learns nothing
// of the next (issue 28's blind spoofing). Each number is still in its
// worker's residue class, distinct and never a special QP's.
func TestQPNRandom(t *testing.T) {
	for _, workers := range []int{1, 3} {
		da, db := pipeDevices(t, workers, link.Faults{}, Config{})
		qa, pa := createQPs(t, da, 64)
		qb, _ := createQPs(t, db, 64)
		seen := map[uint32]bool{}
		ports := map[uint16]bool{}
		consecutive := 0
		for i, n := range qa {
			if n < firstQPN || n > maxQPN || seen[n] {
				t.Fatalf("%d workers: QPN %#x (QP %d of %v)", workers, n, i, qa)
			}
			seen[n] = true
			ports[pa[i]] = true
			if pa[i] < 0xC000 {
				t.Errorf("%d workers: QP %#x sends from UDP port %#x, below 0xC000", workers, n, pa[i])
			}
			if i > 0 && (n == qa[i-1]+1 || n == qa[i-1]+uint32(workers)) {
				consecutive++
			}
			// The device shards QPs to workers by QPN mod workers.
			if w := da.workers[n%uint32(workers)]; w.qps[n] == nil {
				t.Errorf("%d workers: QP %#x is not on worker %d", workers, n, n%uint32(workers))
			}
		}
		// 63 pairs drawn from 16M numbers: one consecutive pair is a
		// chance of about 1 in 250,000 for the whole run.
		if consecutive > 1 {
			t.Errorf("%d workers: %d of 63 QPNs follow the one before: %#x", workers, consecutive, qa)
		}
		if len(ports) < 48 {
			t.Errorf("%d workers: 64 QPs share %d UDP source ports, want them drawn at random from 16384", workers, len(ports))
		}
		same := 0
		for i := range qa {
			if qa[i] == qb[i] {
				same++
			}
		}
		if same > 1 {
			t.Errorf("%d workers: two devices gave %d of 64 QPs the same number: %#x and %#x", workers, same, qa, qb)
		}
	}
}

// With SequentialQPN the numbers go up from 0x11 as rxe's do, and the
// source port is the fixed function of the number.
func TestQPNSequential(t *testing.T) {
	da, db := pipeDevices(t, 1, link.Faults{}, Config{SequentialQPN: true})
	qa, pa := createQPs(t, da, 4)
	qb, pb := createQPs(t, db, 4)
	want := []uint32{0x11, 0x12, 0x13, 0x14}
	for i := range want {
		if qa[i] != want[i] || qb[i] != want[i] {
			t.Fatalf("QPNs %#x and %#x, want %#x on both devices", qa, qb, want)
		}
		if pa[i] != pb[i] {
			t.Errorf("QP %#x: source ports %#x and %#x, want the same function of the number", qa[i], pa[i], pb[i])
		}
	}
}
