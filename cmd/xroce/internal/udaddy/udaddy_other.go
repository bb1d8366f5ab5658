//go:build !linux

package udaddy

import (
	"context"
	"errors"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

// Cmd is xroce udaddy, which needs Linux.
var Cmd = base.Command{Name: "udaddy", Summary: "RDMA CM UD (SIDR) datagram test, as rdma-core's udaddy (Linux only)", Run: func(context.Context, *base.Env, []string) error {
	return errors.New("udaddy: needs Linux (AF_XDP or AF_PACKET)")
}}
