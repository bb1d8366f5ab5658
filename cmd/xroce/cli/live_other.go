//go:build !linux

package cli

import (
	"context"
	"errors"
)

func (d *dumper) live(context.Context, string, string) error {
	return errors.New("live capture needs Linux (AF_PACKET)")
}
