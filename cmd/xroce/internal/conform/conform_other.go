//go:build !linux

package conform

import (
	"context"
	"errors"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

// Cmd is xroce conform, which needs Linux.
var Cmd = base.Command{Name: "conform", Summary: "probe a peer's RoCE v2 responder or requester against the specification (Linux only)", Run: func(context.Context, *base.Env, []string) error {
	return errors.New("conform: the puppet needs Linux (AF_PACKET)")
}}
