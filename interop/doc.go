// Package interop is the interoperability suite against Linux rxe, the
// kernel's soft-RoCE driver: interop/run boots rxe in a QEMU VM linked to the
// host by a tap in a network namespace, runs the standard tools (rdma-core's
// ibv_*_pingpong and librdmacm examples, perftest's ib_*_bw and ib_*_lat,
// also over rdma_cm) in the guest, and checks every captured frame's ICRC
// with `xroce dump` and tshark on the host, and every CM MAD with tshark.
//
// The Go test here only wraps interop/run, and only when XROCE_INTEROP=1, so
// `go test ./...` boots nothing by default. See interop/README.md.
package interop
