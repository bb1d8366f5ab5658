package conform

import (
	"fmt"
	"time"

	"github.com/xroce/xroce/bth"
)

// The rules, as IBTA Volume 1 release 1.4 places them: section numbers
// only where this repository already relies on them (§9.7 reliable
// service, §9.9 error handling), section titles otherwise; no compliance
// statement numbers that could not be checked.
const (
	ruleSeq      = "IBTA v1.4 §9.7 responder PSN check: PSN sequence error NAK"
	ruleDup      = "IBTA v1.4 §9.7 responder: duplicate requests"
	ruleAck      = "IBTA v1.4 §9.7 responder: ACK generation and coalescing"
	ruleMSN      = "IBTA v1.4 §9.7 AETH message sequence number"
	ruleAccess   = "IBTA v1.4 §9.7 R_Key and access checks; §9.9 QP to error"
	ruleAtomic   = "IBTA v1.4 §9.7 atomics on aligned 8-byte words; §9.9"
	ruleLength   = "IBTA v1.4 §9.7 payload length vs path MTU; §9.9"
	ruleOpSeq    = "IBTA v1.4 §9.7 opcode sequence check; §9.9"
	ruleRes      = "IBTA v1.4 §9.7 responder resources (max_dest_rd_atomic)"
	ruleRNR      = "IBTA v1.4 §9.7 receiver not ready: RNR NAK and its timer"
	ruleRecvLen  = "IBTA v1.4 §9.7 SEND longer than the receive; §9.9"
	ruleZero     = "IBTA v1.4 §9.7 zero-length RDMA: no R_Key or VA check"
	ruleICRC     = "IBTA v1.4 annex A17 RoCE v2: invariant CRC, bad ones dropped"
	ruleHeader   = "IBTA v1.4 ch. 9 transport header validation: silent drop"
	ruleUnknownQ = "IBTA v1.4 ch. 9 transport header validation: unknown QP"
	ruleCNP      = "IBTA v1.4 annex A17.9 RoCE v2 congestion management: CNP from the notification point"
	ruleUDQKey   = "IBTA v1.4 ch. 9 datagram service: Q_Key check, a mismatch dropped silently"
)

// probe is the harmless acknowledged request at PSN offset off.
func probe(off int) Packet { return Packet{Op: OpProbe, PSN: off, AckReq: true, Payload: B(8)} }

// fate is the step after a fatal NAK: a good request at the same PSN,
// which a QP in the error state does not answer.
func fate(off int) Step {
	return Step{Send: []Packet{probe(off)}, Judge: expectDead}
}

// Responder are the checks of the peer as responder: the puppet is the
// requester.
var Responder = []Check{
	{
		Name:     "resp.psn-gap",
		Rule:     ruleSeq,
		Sends:    "three requests two PSNs ahead of the expected one, then the expected one, then a new gap",
		Requires: "one NAK PSN sequence error carrying the expected PSN, silence for the rest of the gap, an ACK once the expected PSN comes, and a NAK again for a new gap",
		Needs:    NeedProbe,
		Steps: []Step{
			{Send: []Packet{{Op: OpProbe, PSN: 2, AckReq: true, Payload: B(8), Repeat: 3}},
				Judge: expectNak("3 requests past a gap", bth.NakPSNSeqError, 0)},
			{Send: []Packet{probe(0)}, Until: 1, Judge: expectAck("the expected PSN", 0)},
			{Send: []Packet{{Op: OpProbe, PSN: 3, AckReq: true, Payload: B(8), Repeat: 2}},
				Judge: expectNak("a new gap", bth.NakPSNSeqError, 1)},
		},
	},
	{
		Name:     "resp.dup-reack",
		Rule:     ruleDup,
		Sends:    "a request, the same request again (same PSN), then the next one",
		Requires: "the duplicate is acknowledged again (not NAKed, not executed twice) and the QP goes on",
		Needs:    NeedProbe,
		Steps: []Step{
			{Send: []Packet{probe(0)}, Until: 1, Judge: expectAck("the request", 0)},
			{Send: []Packet{probe(0)}, Until: 1, Judge: expectAck("its duplicate", 0)},
			{Send: []Packet{probe(1)}, Until: 1, Judge: expectAck("the next request", 1)},
		},
	},
	{
		Name:     "resp.dup-read",
		Rule:     ruleDup,
		Sends:    "a 64-byte READ, the same READ again, then duplicates at its PSN with a length past any region and with a bad R_Key",
		Requires: "the duplicate is answered again with the same bytes; a duplicate whose RETH no longer passes the R_Key and bounds checks returns no data (NAK remote access error, or dropped)",
		Needs:    NeedRead,
		Fatal:    true,
		Steps: []Step{
			{Send: []Packet{{Op: bth.RCReadRequest, DMA: B(64), DMASet: true}}, Until: 1, Judge: expectRead("the READ", 0, 64, "r")},
			{Send: []Packet{{Op: bth.RCReadRequest, DMA: B(64), DMASet: true}}, Until: 1, Judge: expectRead("its duplicate", 0, 64, "r")},
			{Send: []Packet{{Op: bth.RCReadRequest, DMA: B(1 << 30), DMASet: true}}, Judge: noData("a duplicate of 1 GiB")},
			{Send: []Packet{{Op: bth.RCReadRequest, DMA: B(64), DMASet: true, BadKey: true}}, Judge: noData("a duplicate with a bad R_Key")},
		},
	},
	{
		Name:     "resp.dup-atomic",
		Rule:     ruleDup,
		Sends:    "FETCH_ADD +1, the same FETCH_ADD again (same PSN), then FETCH_ADD +0",
		Requires: "the duplicate is answered from the saved original value and not executed again: the last FETCH_ADD finds the word one higher, not two",
		Needs:    NeedAtomic,
		Steps: []Step{
			{Send: []Packet{{Op: bth.RCFetchAdd, SwapAdd: 1}}, Until: 1, Judge: expectAtomic("FETCH_ADD +1", 0, func(x *Ctx, orig uint64) Outcome {
				x.Vars["v0"] = orig
				return ok("FETCH_ADD +1 found %d", orig)
			})},
			{Send: []Packet{{Op: bth.RCFetchAdd, SwapAdd: 1}}, Until: 1, Judge: expectAtomic("its duplicate", 0, func(x *Ctx, orig uint64) Outcome {
				if orig != x.Vars["v0"] {
					return fail("not-saved", "the duplicate returned %d, not the saved %d", orig, x.Vars["v0"])
				}
				return ok("the duplicate returned the saved %d", orig)
			})},
			{Send: []Packet{{Op: bth.RCFetchAdd, PSN: 1}}, Until: 1, Judge: expectAtomic("FETCH_ADD +0", 1, func(x *Ctx, orig uint64) Outcome {
				switch v0 := x.Vars["v0"]; orig {
				case v0 + 1:
					return ok("the word is %d: added once", orig)
				case v0 + 2:
					return fail("executed-twice", "the word is %d: the duplicate was executed again", orig)
				default:
					return fail("word", "the word is %d, want %d", orig, v0+1)
				}
			})},
		},
	},
	{
		Name:     "resp.ackreq",
		Rule:     ruleAck,
		Sends:    "two requests without AckReq, then one with AckReq",
		Requires: "no ACK ever names a PSN not yet received; the request with AckReq is acknowledged (an ACK of its PSN)",
		Needs:    NeedProbe,
		Steps: []Step{
			{Send: []Packet{{Op: OpProbe, Payload: B(8)}, {Op: OpProbe, PSN: 1, Payload: B(8)}}, Judge: func(x *Ctx) Outcome {
				for i := range x.Got {
					a := &x.Got[i]
					if !isAck(a) {
						return fail("nak", "requests without AckReq drew %s", list(x.Got))
					}
					if x.PSN(1).Less(a.BTH.PSN()) {
						return fail("ack-ahead", "an ACK of PSN %d, past the last received %d", a.BTH.PSN(), x.PSN(1))
					}
				}
				return ok("without AckReq: %s", list(x.Got))
			}},
			{Send: []Packet{probe(2)}, Until: 1, Judge: expectAck("with AckReq", 2)},
		},
	},
	{
		Name:     "resp.msn",
		Rule:     ruleMSN,
		Sends:    "a one-packet message, a three-packet message, a one-packet message, each acknowledged",
		Requires: "the AETH MSN counts messages, not packets: it grows by one with each message completed",
		Needs:    NeedProbe | NeedLarge,
		Steps: []Step{
			{Send: []Packet{probe(0)}, Until: 1, Judge: all(expectAck("message 1", 0), saveMSN("m1"))},
			{Send: []Packet{{Op: OpProbe, PSN: 1, Payload: Size{MTUs: 2, Bytes: 8}}}, Until: 1, Judge: all(expectAck("message 2 (3 packets)", 3), wantMSN("m1", 1))},
			{Send: []Packet{probe(4)}, Until: 1, Judge: all(expectAck("message 3", 4), wantMSN("m1", 2))},
		},
	},
	{
		Name:     "resp.rkey-invalid",
		Rule:     ruleAccess,
		Sends:    "a WRITE with an R_Key that names no region, then a good request",
		Requires: "NAK remote access error for its PSN, and the QP enters the error state (answers nothing more)",
		Needs:    NeedWrite,
		Fatal:    true,
		Steps: []Step{
			{Send: []Packet{{Op: bth.RCWriteOnly, AckReq: true, Payload: B(8), BadKey: true}}, Until: 1, Judge: expectNak("a WRITE with a bad R_Key", bth.NakRemoteAccessError, 0)},
			fate(0),
		},
	},
	{
		Name:     "resp.va-out-of-bounds",
		Rule:     ruleAccess,
		Sends:    "a WRITE with the region's R_Key to an address 1 TiB past it, then a good request",
		Requires: "NAK remote access error for its PSN, and the QP enters the error state",
		Needs:    NeedWrite,
		Fatal:    true,
		Steps: []Step{
			{Send: []Packet{{Op: bth.RCWriteOnly, AckReq: true, Payload: B(8), Offset: B(1 << 40)}}, Until: 1, Judge: expectNak("a WRITE outside the region", bth.NakRemoteAccessError, 0)},
			fate(0),
		},
	},
	{
		Name:     "resp.access-denied",
		Rule:     ruleAccess,
		Sends:    "an operation the QP or region does not allow (READ, else WRITE, else FETCH_ADD) with a good R_Key, then a good request",
		Requires: "NAK remote access error for its PSN, and the QP enters the error state",
		Needs:    NeedDenied,
		Fatal:    true,
		Steps: []Step{
			{Send: []Packet{{Op: OpDenied, AckReq: true, Payload: B(8)}}, Until: 1, Judge: expectNak("an operation not allowed", bth.NakRemoteAccessError, 0)},
			fate(0),
		},
	},
	{
		Name:     "resp.atomic-misaligned",
		Rule:     ruleAtomic,
		Sends:    "a FETCH_ADD at an address 4 bytes past an 8-byte boundary, then a good request",
		Requires: "NAK invalid request for its PSN, and the QP enters the error state; the word is not changed",
		Needs:    NeedAtomic,
		Fatal:    true,
		Steps: []Step{
			{Send: []Packet{{Op: bth.RCFetchAdd, Offset: B(4), SwapAdd: 1}}, Until: 1, Judge: expectNak("a misaligned FETCH_ADD", bth.NakInvalidRequest, 0)},
			fate(0),
		},
	},
	{
		Name:     "resp.first-not-mtu",
		Rule:     ruleLength,
		Sends:    "a WRITE FIRST carrying 4 bytes less than the path MTU, then a good request",
		Requires: "NAK invalid request for its PSN, and the QP enters the error state",
		Needs:    NeedWrite | NeedLarge,
		Fatal:    true,
		Steps: []Step{
			{Send: []Packet{{Op: bth.RCWriteFirst, AckReq: true, Payload: Size{MTUs: 1, Bytes: -4}, DMA: Size{MTUs: 2}, DMASet: true}},
				Until: 1, Judge: expectNak("a short WRITE FIRST", bth.NakInvalidRequest, 0)},
			fate(0),
		},
	},
	{
		Name:     "resp.middle-not-mtu",
		Rule:     ruleLength,
		Sends:    "a WRITE FIRST of one MTU, then a WRITE MIDDLE 4 bytes short of it, then a good request",
		Requires: "NAK invalid request for the MIDDLE's PSN, and the QP enters the error state",
		Needs:    NeedWrite | NeedLarge,
		Fatal:    true,
		Steps: []Step{
			{Send: []Packet{{Op: bth.RCWriteFirst, Payload: Size{MTUs: 1}, DMA: Size{MTUs: 3}, DMASet: true},
				{Op: bth.RCWriteMiddle, PSN: 1, AckReq: true, Payload: Size{MTUs: 1, Bytes: -4}}},
				Until: 1, Judge: expectNak("a short WRITE MIDDLE", bth.NakInvalidRequest, 1)},
			fate(1),
		},
	},
	{
		Name:     "resp.last-too-long",
		Rule:     ruleLength,
		Sends:    "a WRITE FIRST of one MTU, then a WRITE LAST 4 bytes longer than the MTU, then a good request",
		Requires: "NAK invalid request for the LAST's PSN, and the QP enters the error state",
		Needs:    NeedWrite | NeedLarge,
		Fatal:    true,
		Steps: []Step{
			{Send: []Packet{{Op: bth.RCWriteFirst, Payload: Size{MTUs: 1}, DMA: Size{MTUs: 2, Bytes: 4}, DMASet: true},
				{Op: bth.RCWriteLast, PSN: 1, AckReq: true, Payload: Size{MTUs: 1, Bytes: 4}}},
				Until: 1, Judge: expectNak("a long WRITE LAST", bth.NakInvalidRequest, 1)},
			fate(1),
		},
	},
	{
		Name:     "resp.middle-without-first",
		Rule:     ruleOpSeq,
		Sends:    "a WRITE MIDDLE with no WRITE FIRST before it, then a good request",
		Requires: "NAK invalid request for its PSN, and the QP enters the error state",
		Needs:    NeedProbe,
		Fatal:    true,
		Steps: []Step{
			{Send: []Packet{{Op: bth.RCWriteMiddle, AckReq: true, Payload: Size{MTUs: 1}}}, Until: 1, Judge: expectNak("a lone WRITE MIDDLE", bth.NakInvalidRequest, 0)},
			fate(0),
		},
	},
	{
		Name:     "resp.rd-atomic-limit",
		Rule:     ruleRes,
		Sends:    "one more 8-byte READ at once than the responder resources it advertised",
		Requires: "the requester is at fault, but every READ is either answered in PSN order or, from the first one beyond the limit, NAKed invalid request; none is dropped silently",
		Needs:    NeedRead | NeedRdAtomic,
		Fatal:    true,
		Steps:    []Step{{Send: []Packet{{Op: OpReadBurst, DMA: B(8), DMASet: true}}, Wait: time.Second, Judge: judgeRdLimit}},
	},
	{
		Name:     "resp.rnr",
		Rule:     ruleRNR,
		Sends:    "a SEND while no receive is posted, then a WRITE at the same PSN",
		Requires: "an RNR NAK for the SEND's PSN carrying the QP's advertised RNR timer; the QP stays up and still expects that PSN",
		Needs:    NeedNoRecv | NeedRNRTimer | NeedWrite,
		Steps: []Step{
			{Send: []Packet{{Op: bth.RCSendOnly, AckReq: true, Payload: B(8)}}, Until: 1, Judge: expectRNR("a SEND without a receive", 0)},
			{Send: []Packet{probe(0)}, Until: 1, Judge: expectAck("a WRITE at the SEND's PSN", 0)},
		},
	},
	{
		Name:     "resp.send-too-long",
		Rule:     ruleRecvLen,
		Sends:    "a SEND 8 bytes longer than the posted receive, then a good request",
		Requires: "NAK invalid request at a PSN of that SEND, and the QP enters the error state",
		Needs:    NeedRecv,
		Fatal:    true,
		Steps: []Step{
			{Send: []Packet{{Op: bth.RCSendOnly, AckReq: true, Payload: Size{Recvs: 1, Bytes: 8}}}, Until: 1, Judge: judgeNakIn("a SEND too long", bth.NakInvalidRequest)},
			fate(0),
		},
	},
	{
		Name:     "resp.zero-length",
		Rule:     ruleZero,
		Sends:    "zero-length WRITEs with the region's R_Key and with an R_Key of no region, a zero-length READ, a zero-length SEND",
		Requires: "each is acknowledged (the READ with one empty READ RESPONSE ONLY) whatever the R_Key, since no memory is touched",
		Needs:    NeedWrite,
		Steps: []Step{
			{Send: []Packet{{Op: bth.RCWriteOnly, AckReq: true}}, Until: 1, Judge: expectAck("a zero-length WRITE", 0)},
			{Send: []Packet{{Op: bth.RCWriteOnly, PSN: 1, AckReq: true, BadKey: true}}, Until: 1, Judge: expectAck("a zero-length WRITE with a bad R_Key", 1)},
			{Needs: NeedRead, Send: []Packet{{Op: bth.RCReadRequest, PSN: 2, DMASet: true}}, Until: 1, Judge: expectRead("a zero-length READ", 2, 0, "z")},
		},
	},
	{
		Name:     "resp.bad-icrc",
		Rule:     ruleICRC,
		Sends:    "a request with AckReq whose ICRC is wrong, then the same request intact",
		Requires: "the bad one is dropped without an answer and without taking its PSN; the intact one is acknowledged",
		Needs:    NeedProbe,
		Steps:    dropped(FaultICRC),
	},
	{
		Name:     "resp.bad-pkey",
		Rule:     ruleHeader,
		Sends:    "a request with AckReq in another partition (P_Key 0x1234), then the same request with the QP's P_Key",
		Requires: "the first is dropped without an answer; the second is acknowledged",
		Needs:    NeedProbe,
		Steps:    dropped(FaultPKey),
	},
	{
		Name:     "resp.bad-tver",
		Rule:     ruleHeader,
		Sends:    "a request with AckReq and BTH TVer 1, then the same request with TVer 0",
		Requires: "the first is dropped without an answer; the second is acknowledged",
		Needs:    NeedProbe,
		Steps:    dropped(FaultTVer),
	},
	{
		Name:     "resp.bad-padcnt",
		Rule:     ruleHeader,
		Sends:    "a zero-length request with AckReq whose PadCnt claims 3 pad bytes, then a good request",
		Requires: "the first is dropped without an answer (its pad is longer than its data); the second is acknowledged",
		Needs:    NeedWrite,
		Steps: []Step{
			{Send: []Packet{{Op: bth.RCWriteOnly, AckReq: true, Fault: FaultPadCnt}}, Judge: expectSilence("a request with PadCnt 3 and no data", "answered")},
			{Send: []Packet{probe(0)}, Until: 1, Judge: expectAck("a good request at the same PSN", 0)},
		},
	},
	{
		Name:     "resp.cnp",
		Rule:     ruleCNP,
		Sends:    "a request with AckReq whose IP header says ECN Congestion Experienced (11)",
		Requires: "it is acknowledged as any other; a notification point answers the mark with a CNP (BTH opcode 0x81) to the requester's QP; a peer that sends none has no notification point, which is optional (SKIP)",
		Needs:    NeedProbe,
		Steps:    []Step{{Send: []Packet{{Op: OpProbe, AckReq: true, Payload: B(8), CE: true}}, Judge: judgeCNP}},
	},
	{
		Name:     "resp.ud-qkey",
		Rule:     ruleUDQKey,
		Sends:    "a UD SEND with a Q_Key other than the QP's, then the same SEND with the QP's Q_Key (to a pingpong server, which answers each message it receives)",
		Requires: "the first is dropped without reaching a receive: nothing answers it; the second is received: the server's answer comes",
		Needs:    NeedUD,
		Steps: []Step{
			{Send: []Packet{{Op: bth.UDSendOnly, Payload: B(8), BadQKey: true}}, Judge: udAnswered("a UD SEND with a wrong Q_Key", false)},
			{Send: []Packet{{Op: bth.UDSendOnly, Payload: B(8)}}, Wait: time.Second, Judge: udAnswered("the same SEND with the QP's Q_Key", true)},
		},
	},
	{
		Name:     "resp.unknown-qp",
		Rule:     ruleUnknownQ,
		Sends:    "a request with AckReq to a QP number that does not exist, then a good request to the QP",
		Requires: "nothing answers the first, to anyone; the QP under test is not affected",
		Needs:    NeedProbe,
		Steps: []Step{
			{Send: []Packet{{Op: OpProbe, AckReq: true, Payload: B(8), Fault: FaultDestQP}}, Judge: func(x *Ctx) Outcome {
				for i := range x.Other {
					if a := &x.Other[i]; a.IsResponse() {
						return fail("answered", "a request to an unknown QP drew %s", list(x.Other))
					}
				}
				return expectSilence("a request to an unknown QP", "answered")(x)
			}},
			{Send: []Packet{probe(0)}, Until: 1, Judge: expectAck("a good request", 0)},
		},
	},
}

// judgeCNP judges resp.cnp: the CE-marked request is acknowledged, and a
// CNP, when the peer sends one, goes to the requester's QP.
func judgeCNP(x *Ctx) Outcome {
	a := expectAck("a CE-marked request", 0)(x)
	if !a.OK {
		a.Code = "ce-" + a.Code
		return a
	}
	var other []Answer
	for i := range x.Other {
		c := &x.Other[i]
		if c.Opcode() != bth.OpCNP {
			continue
		}
		if c.BTH.DestQP() == x.Self {
			return ok("%s; a CNP to the requester's QP %#x (BECN %v)", a.Obs, x.Self, c.BTH.BECN())
		}
		other = append(other, *c)
	}
	if len(other) > 0 {
		return fail("cnp-qp", "%s; a CNP to QP %#x, not to the requester's %#x", a.Obs, other[0].BTH.DestQP(), x.Self)
	}
	return Outcome{Skip: true, Obs: a.Obs + "; no CNP: the peer has no notification point (optional, annex A17.9)"}
}

// udAnswered wants a UD SEND to the puppet's QP (the pingpong server's
// answer) during the step, or none (want false).
func udAnswered(what string, want bool) func(x *Ctx) Outcome {
	return func(x *Ctx) Outcome {
		n := 0
		for i := range x.Other {
			a := &x.Other[i]
			if a.Opcode().Transport() == bth.UD && a.Opcode().IsSend() && a.BTH.DestQP() == x.Self {
				n++
			}
		}
		switch {
		case want && n == 0:
			return fail("not-received", "%s drew no answer: it did not reach a receive", what)
		case !want && n > 0:
			return fail("received", "%s was answered: it reached a receive", what)
		case want:
			return ok("%s answered", what)
		}
		return ok("%s: dropped, no answer", what)
	}
}

// dropped are the steps of a header check: a probe with the fault, which
// must draw nothing, then the same probe intact, which must be ACKed.
func dropped(f Fault) []Step {
	return []Step{
		{Send: []Packet{{Op: OpProbe, AckReq: true, Payload: B(8), Fault: f}}, Judge: expectSilence("a request with "+f.String(), "answered")},
		{Send: []Packet{probe(0)}, Until: 1, Judge: expectAck("the intact request at the same PSN", 0)},
	}
}

// saveMSN keeps the MSN of the step's last ACK under name.
func saveMSN(name string) func(x *Ctx) Outcome {
	return func(x *Ctx) Outcome {
		a := &x.Got[len(x.Got)-1]
		x.Vars[name] = uint64(a.AETH.MSN())
		return ok("MSN %d", a.AETH.MSN())
	}
}

// wantMSN wants the step's last ACK to carry the MSN saved under name
// plus d.
func wantMSN(name string, d uint32) func(x *Ctx) Outcome {
	return func(x *Ctx) Outcome {
		a := &x.Got[len(x.Got)-1]
		want := bth.PSN(x.Vars[name]).Add(d)
		if a.AETH.MSN() != want {
			return fail("msn", "MSN %d, want %d (the first MSN + %d messages)", a.AETH.MSN(), want, d)
		}
		return ok("MSN %d", want)
	}
}

// judgeNakIn wants a NAK with syndrome syn at one of the step's PSNs.
func judgeNakIn(what string, syn bth.Syndrome) func(x *Ctx) Outcome {
	return func(x *Ctx) Outcome {
		for i := range x.Got {
			a := &x.Got[i]
			if !isNak(a) {
				continue
			}
			if a.AETH.Syndrome() != syn {
				return fail("syndrome", "%s drew %s, want %v", what, list(x.Got), syn)
			}
			for _, p := range x.Sent {
				if p == a.BTH.PSN() {
					return ok("%s: %v PSN %d", what, syn, p)
				}
			}
			return fail("nak-psn", "%s drew %s, not for one of its PSNs", what, list(x.Got))
		}
		return fail("no-nak", "%s drew %s, want %v", what, list(x.Got), syn)
	}
}

// judgeRdLimit judges resp.rd-atomic-limit's burst of READs (OpReadBurst).
func judgeRdLimit(x *Ctx) Outcome {
	n := len(x.Sent)
	if len(x.Got) == n-1 && n > 1 {
		// The oldest READ unanswered, the others answered in order: its
		// resource was recycled before its response went out.
		later := true
		for i := range x.Got {
			a := &x.Got[i]
			later = later && a.Opcode() == bth.RCReadResponseOnly && a.BTH.PSN() == x.PSN(i+1)
		}
		if later {
			return fail("oldest-overwritten", "%d READs (%d advertised): the first went unanswered, the other %d were answered",
				n, x.T.MaxDestRdAtomic, n-1)
		}
	}
	for i := range x.Got {
		a := &x.Got[i]
		want := x.PSN(i)
		switch {
		case a.Opcode() == bth.RCReadResponseOnly && a.BTH.PSN() == want && len(a.Payload) == 8:
		case isNak(a) && a.AETH.Syndrome() == bth.NakInvalidRequest && a.BTH.PSN() == want && i >= x.T.MaxDestRdAtomic:
			return ok("%d READs answered, then %v for PSN %d", i, a.AETH.Syndrome(), want)
		default:
			return fail("read-order", "READ %d of %d drew %s", i+1, n, list(x.Got[i:]))
		}
	}
	if len(x.Got) < n {
		return fail("read-dropped", "%d READs (%d beyond the advertised %d) drew only %d answers: %s",
			n, n-x.T.MaxDestRdAtomic, x.T.MaxDestRdAtomic, len(x.Got), list(x.Got))
	}
	return ok("all %d READs answered in order (%d advertised)", n, x.T.MaxDestRdAtomic)
}

// Checks returns every check, responder checks first.
func Checks() []*Check {
	var cs []*Check
	for i := range Responder {
		cs = append(cs, &Responder[i])
	}
	for i := range Requester {
		cs = append(cs, &Requester[i])
	}
	return cs
}

// IsRequester reports whether c is a requester check (the peer is the
// requester; it has Serve phases, not Steps).
func (c *Check) IsRequester() bool { return len(c.Serve) > 0 }

func init() {
	seen := map[string]bool{}
	for _, c := range Checks() {
		if seen[c.Name] {
			panic(fmt.Sprintf("conform: two checks named %s", c.Name))
		}
		seen[c.Name] = true
	}
}
