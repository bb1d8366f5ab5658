//go:build linux

package statcount

import (
	"github.com/xroce/xroce/internal/statsock"
	"github.com/xroce/xroce/roce"
)

// QP is a QP's completion and packet counters for xroce stat
// (Of does not look into the embedded PacketStats).
func QP(s roce.QPStats) []statsock.Counter {
	return append(Of(s), Of(s.PacketStats)...)
}
