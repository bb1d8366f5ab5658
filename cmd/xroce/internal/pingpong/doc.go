// Package pingpong is xroce pingpong: rdma-core's ibv_rc_pingpong,
// ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong (pingpong_srq.go)
// over an xroce device, with their TCP exchange, ping-pong and output, so
// that either end may be either tool. It runs on Linux only; elsewhere Cmd
// says so (pingpong_other.go).
package pingpong
