//go:build !linux

package lab

import (
	"context"
	"errors"
	"net/netip"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

func lab(context.Context, *base.Env, labOptions) error {
	return errors.New("lab: needs Linux (network namespaces, veth, AF_XDP)")
}

func labNames() map[netip.Addr]string { return nil }
