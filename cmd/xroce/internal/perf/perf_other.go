//go:build !linux

package perf

import (
	"context"
	"errors"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

// Cmd is xroce perf, which needs Linux.
var Cmd = base.Command{Name: "perf", Summary: "perftest-style bandwidth and latency tests (Linux only)", Run: runLinuxOnly}

func runLinuxOnly(context.Context, *base.Env, []string) error {
	return errors.New("this command needs Linux (AF_XDP or AF_PACKET)")
}
