// Package pktfmt is what xroce's tools print about a RoCE v2 frame: the
// short line of a frame (Describe, DescribeCM), the management datagram a
// UD SEND to QP 1 carries (IsGSI, GSIMAD, ServiceString), and a header
// drawn bit by bit as the IBTA specification draws it (DrawHeader).
//
// It sits below the tools because three pieces print them: dump's packet
// lines and -v diagrams and the HTML page dump and lab draw (package
// capture), and the sequence diagrams of lab and conform (package seqdiag),
// whose arrows Describe labels. It imports no tool.
package pktfmt

import (
	"fmt"
	"strings"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/mad"
)

// Describe is a short line for a decoded frame: opcode, PSN, AckReq and
// the extension headers' main fields.
func Describe(f *bth.Frame) string {
	var b strings.Builder
	op := f.Opcode()
	if IsGSI(f) {
		return DescribeCM(f)
	}
	fmt.Fprintf(&b, "%s PSN %d", op, f.BTH.PSN())
	if f.BTH.AckReq() {
		b.WriteString(" A")
	}
	if f.DETH != nil {
		fmt.Fprintf(&b, " QKey %#x", f.DETH.QKey())
	}
	if f.RETH != nil {
		fmt.Fprintf(&b, " RETH dlen %d", f.RETH.DMALen())
	}
	if f.AtomicETH != nil {
		if op == bth.RCCompareSwap {
			fmt.Fprintf(&b, " cmp %d swap %d", f.AtomicETH.Compare(), f.AtomicETH.SwapAdd())
		} else {
			fmt.Fprintf(&b, " add %d", f.AtomicETH.SwapAdd())
		}
	}
	if f.AETH != nil {
		// rxe and xroce send no credits (31): "ACK" says it all.
		syn := strings.TrimSuffix(f.AETH.Syndrome().String(), " credits=invalid")
		fmt.Fprintf(&b, " %s MSN %d", syn, f.AETH.MSN())
	}
	if f.AtomicAckETH != nil {
		fmt.Fprintf(&b, " orig %d", f.AtomicAckETH.OrigRemoteData())
	}
	if f.ImmDt != nil {
		fmt.Fprintf(&b, " imm %#x", f.ImmDt.Imm())
	}
	if len(f.Payload) > 0 {
		fmt.Fprintf(&b, " (%d B)", len(f.Payload))
	}
	return b.String()
}

// DescribeCM is the line of a management datagram to QP 1: the CM message
// and what it sets up.
func DescribeCM(f *bth.Frame) string {
	m, perr, cerr := GSIMAD(f)
	if perr != nil || cerr != nil {
		return fmt.Sprintf("MAD to QP 1, not CM (%d B)", len(f.Payload))
	}
	switch body := m.Body(); m.AttrID() {
	case mad.AttrREQ:
		r := mad.REQ(body)
		return fmt.Sprintf("CM REQ %s QPN %#x PSN %d", ServiceString(r.ServiceID()), r.LocalQPN(), r.StartingPSN())
	case mad.AttrREP:
		r := mad.REP(body)
		return fmt.Sprintf("CM REP QPN %#x PSN %d", r.LocalQPN(), r.StartingPSN())
	case mad.AttrREJ:
		r := mad.REJ(body)
		return fmt.Sprintf("CM REJ reason %d (%v)", uint16(r.Reason()), r.Reason())
	}
	return "CM " + m.AttrID().String()
}

// IsGSI reports whether the decoded frame is a UD SEND to QP 1, the General
// Services Interface that carries management datagrams.
func IsGSI(f *bth.Frame) bool { return f.DETH != nil && f.BTH.DestQP() == 1 }

// GSIMAD returns the MAD of a GSI frame, and what is wrong with it for the
// CM: parse errors (short) or CheckCM's.
func GSIMAD(f *bth.Frame) (m mad.MAD, parseErr, cmErr error) {
	m, parseErr = mad.Parse(f.Payload)
	if parseErr != nil {
		return nil, parseErr, nil
	}
	return m, nil, m.CheckCM()
}

// ServiceString formats a service ID: PORTSPACE:port for rdma_cm's, else hex.
func ServiceString(id uint64) string {
	if ps, port, ok := mad.SplitServiceID(id); ok {
		return fmt.Sprintf("%s:%d", ps, port)
	}
	return fmt.Sprintf("0x%016x", id)
}
