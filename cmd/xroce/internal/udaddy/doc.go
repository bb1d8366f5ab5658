// Package udaddy is xroce udaddy: rdma-core's udaddy, RDMA CM UD (SIDR)
// resolutions and datagrams, with its options and output, on rdmacm's
// Cmatest. It runs on Linux only; elsewhere it says so (udaddy_other.go).
package udaddy
