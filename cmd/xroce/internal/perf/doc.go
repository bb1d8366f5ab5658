// Package perf is xroce perf: perftest's bandwidth and latency tests
// (ib_write_bw & co) over an xroce device, with perftest's out-of-band
// exchange over TCP or, with -R, RDMA CM (perf_rdmacm.go), so that either
// end may be perftest; its rate limiter (perf_rate.go) and congestion
// control flags (perf_cc.go); and tests of its own: perf qps, many QPs on
// a link of its own (perf_qps.go), and perf stream, xroce's stream sockets
// against TCP (perf_stream.go). It runs on Linux only; elsewhere it says so
// (perf_other.go).
package perf
