//go:build !linux

package rstream

import (
	"context"
	"errors"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

// Cmd is xroce rstream, which needs Linux.
var Cmd = base.Command{Name: "rstream", Summary: "rsocket stream test with a peer, as rdma-core's rstream (Linux only)", Run: func(context.Context, *base.Env, []string) error {
	return errors.New("rstream: needs Linux (AF_XDP or AF_PACKET)")
}}
