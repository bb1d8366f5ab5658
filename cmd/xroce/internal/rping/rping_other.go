//go:build !linux

package rping

import (
	"context"
	"errors"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

// Cmd is xroce rping, which needs Linux.
var Cmd = base.Command{Name: "rping", Summary: "RDMA CM ping-pong with a peer, as rdma-core's rping (Linux only)", Run: func(context.Context, *base.Env, []string) error {
	return errors.New("rping: needs Linux (AF_XDP or AF_PACKET)")
}}
