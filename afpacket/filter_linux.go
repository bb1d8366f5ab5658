package afpacket

import "golang.org/x/sys/unix"

// Ancillary data offsets for classic BPF loads (include/uapi/linux/filter.h):
// a load from SKF_AD_OFF+x reads skb metadata instead of packet bytes.
const (
	skfADOff            = 0xfffff000 // SKF_AD_OFF, -0x1000 as a uint32
	skfADPktType        = 4
	skfADVLANTagPresent = 48
	skfADVLANTPID       = 60

	// packetOutgoing is PACKET_OUTGOING (include/uapi/linux/if_packet.h),
	// the pkt_type of frames the host itself sends.
	packetOutgoing = 4
)

// Classic BPF opcodes (include/uapi/linux/bpf_common.h) the filter uses.
const (
	bpfLdWAbs  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfLdHAbs  = unix.BPF_LD | unix.BPF_H | unix.BPF_ABS
	bpfLdHInd  = unix.BPF_LD | unix.BPF_H | unix.BPF_IND
	bpfLdBInd  = unix.BPF_LD | unix.BPF_B | unix.BPF_IND
	bpfLdxImm  = unix.BPF_LDX | unix.BPF_W | unix.BPF_IMM
	bpfJeqK    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJsetK   = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	bpfAndK    = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	bpfRetK    = unix.BPF_RET | unix.BPF_K
	acceptAll  = 0xffffffff // return value: keep the whole frame
	rejectAll  = 0
	roceV2Port = 4791
)

// roceFilter is the socket filter Open attaches: it accepts RoCE v2 frames
// only, with the same rules as the XDP program in package bpf. A classic BPF
// load past the end of the frame makes the filter return 0, so a frame too
// short for any header it reads is rejected; instructions 19 and 27 read the
// last byte of the UDP header for that reason alone. The kernel strips an
// 802.1Q tag into skb metadata before taps see the frame (skb_vlan_untag in
// net/core/dev.c), so a tag may be in the metadata or, on some paths, still
// in the data; at most one tag in total is accepted. X holds the number of
// tag bytes left in the data (0 or 4).
//
//	 0: ld   pkttype              ; A = skb->pkt_type
//	 1: jeq  #OUTGOING, 31, 2     ; our own frames: reject
//	 2: ldx  #0                   ; X = 0: no tag in the data
//	 3: ld   vlan_avail           ; did the kernel take a tag off?
//	 4: jeq  #0, 7, 5
//	 5: ld   vlan_tpid            ; yes: it must be 802.1Q and the data untagged
//	 6: jeq  #0x8100, 10, 31
//	 7: ldh  [12]                 ; no: EtherType
//	 8: jeq  #0x8100, 9, 11
//	 9: ldx  #4                   ; one tag in the data
//	10: ldh  [x + 12]             ; EtherType after the tag
//	11: jeq  #0x0800, 13, 12      ; IPv4?
//	12: jeq  #0x86dd, 22, 31      ; IPv6?
//	13: ldb  [x + 14]             ; IPv4: version and IHL
//	14: jeq  #0x45, 15, 31        ; version 4, no options
//	15: ldh  [x + 20]             ; flags and fragment offset
//	16: jset #0x3fff, 31, 17      ; MF or an offset: a fragment
//	17: ldb  [x + 23]             ; protocol
//	18: jeq  #17, 19, 31          ; UDP
//	19: ldb  [x + 41]             ; the UDP header is all there (14 + 20 + 7)
//	20: ldh  [x + 36]             ; UDP destination port (14 + 20 + 2)
//	21: jeq  #4791, 30, 31
//	22: ldb  [x + 14]             ; IPv6: version
//	23: and  #0xf0
//	24: jeq  #0x60, 25, 31
//	25: ldb  [x + 20]             ; next header
//	26: jeq  #17, 27, 31          ; UDP, no extension headers
//	27: ldb  [x + 61]             ; the UDP header is all there (14 + 40 + 7)
//	28: ldh  [x + 56]             ; UDP destination port (14 + 40 + 2)
//	29: jeq  #4791, 30, 31
//	30: ret  #0xffffffff          ; accept the whole frame
//	31: ret  #0                   ; reject
//
// The jump offsets in the table count from the next instruction.
var roceFilter = [...]unix.SockFilter{
	/*  0 */ {Code: bpfLdWAbs, K: skfADOff + skfADPktType},
	/*  1 */ {Code: bpfJeqK, Jt: 29, Jf: 0, K: packetOutgoing},
	/*  2 */ {Code: bpfLdxImm, K: 0},
	/*  3 */ {Code: bpfLdWAbs, K: skfADOff + skfADVLANTagPresent},
	/*  4 */ {Code: bpfJeqK, Jt: 2, Jf: 0, K: 0},
	/*  5 */ {Code: bpfLdWAbs, K: skfADOff + skfADVLANTPID},
	/*  6 */ {Code: bpfJeqK, Jt: 3, Jf: 24, K: 0x8100},
	/*  7 */ {Code: bpfLdHAbs, K: 12},
	/*  8 */ {Code: bpfJeqK, Jt: 0, Jf: 2, K: 0x8100},
	/*  9 */ {Code: bpfLdxImm, K: 4},
	/* 10 */ {Code: bpfLdHInd, K: 12},
	/* 11 */ {Code: bpfJeqK, Jt: 1, Jf: 0, K: 0x0800},
	/* 12 */ {Code: bpfJeqK, Jt: 9, Jf: 18, K: 0x86dd},
	/* 13 */ {Code: bpfLdBInd, K: 14},
	/* 14 */ {Code: bpfJeqK, Jt: 0, Jf: 16, K: 0x45},
	/* 15 */ {Code: bpfLdHInd, K: 20},
	/* 16 */ {Code: bpfJsetK, Jt: 14, Jf: 0, K: 0x3fff},
	/* 17 */ {Code: bpfLdBInd, K: 23},
	/* 18 */ {Code: bpfJeqK, Jt: 0, Jf: 12, K: unix.IPPROTO_UDP},
	/* 19 */ {Code: bpfLdBInd, K: 41},
	/* 20 */ {Code: bpfLdHInd, K: 36},
	/* 21 */ {Code: bpfJeqK, Jt: 8, Jf: 9, K: roceV2Port},
	/* 22 */ {Code: bpfLdBInd, K: 14},
	/* 23 */ {Code: bpfAndK, K: 0xf0},
	/* 24 */ {Code: bpfJeqK, Jt: 0, Jf: 6, K: 0x60},
	/* 25 */ {Code: bpfLdBInd, K: 20},
	/* 26 */ {Code: bpfJeqK, Jt: 0, Jf: 4, K: unix.IPPROTO_UDP},
	/* 27 */ {Code: bpfLdBInd, K: 61},
	/* 28 */ {Code: bpfLdHInd, K: 56},
	/* 29 */ {Code: bpfJeqK, Jt: 0, Jf: 1, K: roceV2Port},
	/* 30 */ {Code: bpfRetK, K: acceptAll},
	/* 31 */ {Code: bpfRetK, K: rejectAll},
}

// outgoingCheckLen is the number of instructions at the start of roceFilter
// that reject outgoing frames.
const outgoingCheckLen = 2

// dropAllFilter rejects every packet: ListenDiscard's UDP socket uses it.
var dropAllFilter = [...]unix.SockFilter{
	{Code: bpfRetK, K: rejectAll},
}
