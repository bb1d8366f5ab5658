// Package rstream is xroce rstream: rdma-core's rstream, a stream test over
// rsockets (the stream package) or TCP, with its table of results. It runs
// on Linux only; elsewhere it says so (rstream_other.go).
package rstream
