// Package rping is xroce rping: rdma-core's rping over an xroce device, its
// options and output, its server (also -P, persistent) and client, the READ
// and WRITE ping-pong with its rping_rdma_info messages (rping_session.go),
// so that either end may be rdma-core's. It runs on Linux only; elsewhere
// it says so (rping_other.go).
package rping
