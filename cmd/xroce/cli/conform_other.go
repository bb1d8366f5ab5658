//go:build !linux

package cli

import (
	"context"
	"errors"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

func init() {
	register("conform", "probe a peer's RoCE v2 responder or requester against the specification (Linux only)", func(context.Context, *base.Env, []string) error {
		return errors.New("conform: the puppet needs Linux (AF_PACKET)")
	})
}
