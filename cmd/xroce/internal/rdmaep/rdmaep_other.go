//go:build !linux

package rdmaep

import (
	"context"
	"errors"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

// Server is xroce rdma_server, which needs Linux.
var Server = base.Command{Name: "rdma_server", Summary: "one SEND each way over RDMA CM, as rdma-core's rdma_server (Linux only)", Run: func(context.Context, *base.Env, []string) error {
	return errors.New("rdma_server: needs Linux (AF_XDP or AF_PACKET)")
}}

// Client is xroce rdma_client, which needs Linux.
var Client = base.Command{Name: "rdma_client", Summary: "the client of rdma_server, as rdma-core's rdma_client (Linux only)", Run: func(context.Context, *base.Env, []string) error {
	return errors.New("rdma_client: needs Linux (AF_XDP or AF_PACKET)")
}}
