// Package mad implements the wire format of InfiniBand Management Datagrams
// (MADs) as the Communication Manager uses them over RoCE v2: the common MAD
// header, the bodies of the CM messages, and the rdma_cm conventions carried
// inside them.
//
// It follows the InfiniBand Architecture Specification Volume 1, Release 1.4:
// §13.4.2 (the 24-byte common MAD header of every 256-byte MAD), chapter 12
// "Communication Management" (§12.6: REQ, MRA, REJ, REP, RTU, DREQ, DREP,
// SIDR_REQ and SIDR_REP, Tables 106 to 120), with the vendor ID bits of IBA
// comment #9434 (ECE), and Annex A17 "RoCEv2", where CM MADs travel as UD
// SEND_ONLY packets to QP 1 with the GSI Q_Key 0x80010000 and the path's
// LIDs are unused. Every offset was checked against the Linux kernel's field
// tables (include/rdma/ibta_vol1_c12.h) and against real CM exchanges
// captured from rxe and from ConnectX adapters, decoded by tshark.
//
// The rdma_cm layer of Linux (drivers/infiniband/core/cma.c and librdmacm)
// adds two conventions, in rdmacm.go: service IDs made of a port space and a
// port number, and a 36-byte header (CMAHeader) at the start of the private
// data of REQ and SIDR_REQ that names the IP addresses of the connection.
//
// # Views
//
// Like package bth, every structure is a named byte slice with one accessor
// per field, a Fields method that returns them all, and an Encode method
// that writes them from a fields struct; none of them allocates. Parse
// checks the length of a MAD once, at the edge; the message views take
// MAD.Body() and assume its BodySize bytes. Encode writes the whole of a
// view: reserved bits and the unused tail of the private data become zero.
package mad
