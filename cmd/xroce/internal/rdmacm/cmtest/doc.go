// Package cmtest holds what the tests of xroce's RDMA CM tools share
// (rping, ucmatose, udaddy, rdmaep, rstream, rcopy, and cli's tests of
// them together; perf's and conform's tests run their command with Run):
// a server and its client run in two network namespaces, a server started
// until it listens (through rdmacm's listen hook), exact checks of a run's
// status and output, a short peer timeout and a bound on giving up, a CM
// device opened in a namespace, the cases ucmatose and udaddy run against
// themselves, and rdma-core 44's usage texts from a tool's testdata. It
// imports no tool package: the helpers take the command they run. Linux
// only.
package cmtest
