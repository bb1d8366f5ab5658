// Package ucmatose is xroce ucmatose: rdma-core's ucmatose (cmatose.c),
// RDMA CM connections and SENDs over RC, with its options and output, on
// rdmacm's Cmatest. It runs on Linux only; elsewhere it says so
// (ucmatose_other.go).
package ucmatose
