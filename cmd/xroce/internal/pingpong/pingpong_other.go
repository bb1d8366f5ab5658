//go:build !linux

package pingpong

import (
	"context"
	"errors"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

// Cmd is xroce pingpong, which needs Linux.
var Cmd = base.Command{Name: "pingpong", Summary: "ping-pong SENDs with a peer like ibv_rc_pingpong (Linux only)", Run: func(context.Context, *base.Env, []string) error {
	return errors.New("pingpong: needs Linux (AF_XDP or AF_PACKET)")
}}
