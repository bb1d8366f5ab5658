//go:build !linux

package cli

import (
	"context"
	"errors"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

func init() {
	register("perf", "perftest-style bandwidth and latency tests (Linux only)", runLinuxOnly)
}

func runLinuxOnly(context.Context, *base.Env, []string) error {
	return errors.New("this command needs Linux (AF_XDP or AF_PACKET)")
}
