//go:build !linux

package ucmatose

import (
	"context"
	"errors"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

// Cmd is xroce ucmatose, which needs Linux.
var Cmd = base.Command{Name: "ucmatose", Summary: "RDMA CM connection and SEND test, as rdma-core's ucmatose (Linux only)", Run: func(context.Context, *base.Env, []string) error {
	return errors.New("ucmatose: needs Linux (AF_XDP or AF_PACKET)")
}}
