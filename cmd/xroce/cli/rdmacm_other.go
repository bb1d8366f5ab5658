//go:build !linux

package cli

func init() {
	register("rping", "RDMA CM ping-pong with a peer, as rdma-core's rping (Linux only)", runLinuxOnly)
	register("ucmatose", "RDMA CM connection and SEND test, as rdma-core's ucmatose (Linux only)", runLinuxOnly)
	register("udaddy", "RDMA CM UD (SIDR) datagram test, as rdma-core's udaddy (Linux only)", runLinuxOnly)
	register("rdma_server", "one SEND each way over RDMA CM, as rdma-core's rdma_server (Linux only)", runLinuxOnly)
	register("rdma_client", "the client of rdma_server, as rdma-core's rdma_client (Linux only)", runLinuxOnly)
}
