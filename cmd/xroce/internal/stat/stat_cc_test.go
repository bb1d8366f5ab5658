//go:build linux

package stat

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/statcount"
	"github.com/xroce/xroce/internal/statsock"
	"github.com/xroce/xroce/roce"
)

// The congestion-control counters reach xroce stat under their names, and
// a QP's current rate prints in bits per second.
func TestStatCongestionCounters(t *testing.T) {
	dev := statcount.Of(roce.Stats{RxCE: 1, TxCNP: 2, RxCNP: 3, RxBadCNP: 4, RateCuts: 5})
	for name, want := range map[string]uint64{"rx_ce": 1, "tx_cnp": 2, "rx_cnp": 3, "rx_bad_cnp": 4, "rate_cuts": 5} {
		if v, ok := statsock.Lookup(dev, name); !ok || v != want {
			t.Errorf("device counter %s = %d (%v), want %d", name, v, ok, want)
		}
	}
	q := statcount.QP(roce.QPStats{PacketStats: roce.PacketStats{RxCNP: 7, Rate: 2_500_000_000}})
	if v, _ := statsock.Lookup(q, "rx_cnp"); v != 7 {
		t.Errorf("QP rx_cnp = %d, want 7", v)
	}
	now := time.Now()
	s := &statsock.Snapshot{PID: 1, Command: "perf", Started: now, Time: now, Devices: []statsock.Device{{
		Name: "A", Counters: dev, QPs: []statsock.QP{{QPN: 0x11, Type: "RC", State: "RTS", Counters: q}}}}}
	var out bytes.Buffer
	printSnapshot(&out, s, nil, false)
	for _, want := range []string{"rx_cnp", "tx_cnp", "rate_cuts", "  rx_cnp 7", "  rate 2.50Gb/s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("xroce stat output lacks %q:\n%s", want, out.String())
		}
	}
}
