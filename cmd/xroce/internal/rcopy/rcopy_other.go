//go:build !linux

package rcopy

import (
	"context"
	"errors"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

// Cmd is xroce rcopy, which needs Linux.
var Cmd = base.Command{Name: "rcopy", Summary: "copy a file to or from a peer over rsockets, as rdma-core's rcopy (Linux only)", Run: func(context.Context, *base.Env, []string) error {
	return errors.New("rcopy: needs Linux (AF_XDP or AF_PACKET)")
}}
