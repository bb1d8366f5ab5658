//go:build linux

package cli

import (
	"strconv"

	"github.com/xroce/xroce/cm"
)

// rpingPort is rping's default port (rping.c).
const rpingPort = 7174

// rpingInfoSize is sizeof(struct rping_rdma_info); rping refuses any
// other receive length.
const rpingInfoSize = 16

// rpingFill writes ping number ping's data into b (the whole -S buffer),
// as rping's client does: "rdma-ping-N: " then the letters from
// 'A' + ping%58 upwards, wrapping after 'z' (122) back to 'A' (65), and a
// NUL in the last byte.
func rpingFill(b []byte, ping int) {
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

// rpingConnParam is rping_init_conn_param's: one READ each way, retries
// and RNR retries for ever.
func rpingConnParam() *cm.ConnParam {
	return &cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
}
