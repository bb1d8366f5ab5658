// Package rdmacm is the librdmacm behaviour that xroce's clones of
// rdma-core's RDMA CM tools share (rping, ucmatose, udaddy, rdma_server
// and rdma_client, rstream, rcopy), and perf and conform with them: the
// device an address belongs to, opened with its CM agent (Device, Open,
// Interface); getaddrinfo's look-ups and errors (LookupAddr, LookupPort,
// GAIError); the rdma_cm event or errno a failure would have been (Event,
// Errno, PostErrno); accepts, connects and waits for completions that give
// up once the peer has gone quiet for PeerTimeout; perror's lines; the
// run ucmatose and udaddy share (Cmatest, CmatestOptions); and what
// other tools need of one tool's wire: rping's port, info size, data and
// connection parameters (rping_linux.go), a UD reply's address vector
// (ud_linux.go), rsocket errors as rstream prints them (stream_linux.go).
//
// Tests change two things here through the seams of seams_linux.go.
// Everything is Linux only: elsewhere the package is empty.
package rdmacm
