// Package rcopy is xroce rcopy: rdma-core's rcopy, a file copied to or from
// a peer over rsockets, its server serving client after client. It runs on
// Linux only; elsewhere it says so (rcopy_other.go).
package rcopy
