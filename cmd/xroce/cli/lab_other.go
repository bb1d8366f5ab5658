//go:build !linux

package cli

import (
	"context"
	"errors"
	"net/netip"
)

func lab(context.Context, *env, labOptions) error {
	return errors.New("lab: needs Linux (network namespaces, veth, AF_XDP)")
}

func labNames() map[netip.Addr]string { return nil }
