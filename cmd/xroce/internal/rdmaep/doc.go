// Package rdmaep is xroce rdma_server and rdma_client (Server, Client):
// rdma-core's examples of the rdma_create_ep API, one 16-byte SEND each
// way. It runs on Linux only; elsewhere it says so (rdmaep_other.go).
package rdmaep
