//go:build !linux

package dump

import (
	"context"
	"errors"
	"io"

	"github.com/xroce/xroce/cmd/xroce/internal/capture"
)

func live(context.Context, *capture.Dumper, io.Writer, bool, string, string) error {
	return errors.New("live capture needs Linux (AF_PACKET)")
}
