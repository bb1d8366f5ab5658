//go:build linux

package rdmacm

import (
	"strconv"

	"github.com/xroce/xroce/cm"
)

// RpingPort is rping's default port (rping.c).
const RpingPort = 7174

// RpingInfoSize is sizeof(struct rping_rdma_info); rping refuses any
// other receive length.
const RpingInfoSize = 16

// RpingFill writes ping number ping's data into b (the whole -S buffer),
// as rping's client does: "rdma-ping-N: " then the letters from
// 'A' + ping%58 upwards, wrapping after 'z' (122) back to 'A' (65), and a
// NUL in the last byte.
func RpingFill(b []byte, ping int) {
	prefix := "rdma-ping-" + strconv.Itoa(ping) + ": "
	n := copy(b, prefix) // snprintf truncates; the NUL below ends it
	c := byte(65 + ping%58)
	for i := n; i < len(b); i++ {
		b[i] = c
		if c++; c > 122 {
			c = 65
		}
	}
	b[len(b)-1] = 0
}

// RpingConnParam is rping_init_conn_param's: one READ each way, retries
// and RNR retries for ever.
func RpingConnParam() *cm.ConnParam {
	return &cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
}
