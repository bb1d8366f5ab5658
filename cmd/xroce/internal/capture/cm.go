package capture

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/pktfmt"
	"github.com/xroce/xroce/mad"
)

// cmStats counts the management datagrams dump decodes.
type cmStats struct {
	byAttr    map[mad.AttrID]int // CM messages by attribute
	other     int                // well-formed MADs that are not CM Sends
	malformed int                // payloads to QP 1 that are not a MAD
}

// account counts the MAD of a GSI frame.
func (s *cmStats) account(f *bth.Frame) {
	m, perr, cerr := pktfmt.GSIMAD(f)
	switch {
	case perr != nil:
		s.malformed++
	case cerr != nil:
		s.other++
	default:
		if s.byAttr == nil {
			s.byAttr = map[mad.AttrID]int{}
		}
		s.byAttr[m.AttrID()]++
	}
}

// summary prints the CM message counts, if any MAD was seen.
func (s *cmStats) summary(w io.Writer) {
	if len(s.byAttr) == 0 && s.other == 0 && s.malformed == 0 {
		return
	}
	attrs := make([]mad.AttrID, 0, len(s.byAttr))
	for a := range s.byAttr {
		attrs = append(attrs, a)
	}
	sort.Slice(attrs, func(i, j int) bool { return attrs[i] < attrs[j] })
	var parts []string
	for _, a := range attrs {
		parts = append(parts, fmt.Sprintf("%d %s", s.byAttr[a], a))
	}
	if s.other > 0 {
		parts = append(parts, fmt.Sprintf("%d other MADs", s.other))
	}
	if s.malformed > 0 {
		parts = append(parts, fmt.Sprintf("%d malformed MADs", s.malformed))
	}
	fmt.Fprintf(w, "\nManagement datagrams to QP 1: %s\n", strings.Join(parts, ", "))
}

// appendCM appends the one-line form of the MAD in a GSI frame: the CM
// message and its key fields, or what is wrong with it.
func appendCM(b []byte, f *bth.Frame) []byte {
	if q := f.DETH.QKey(); q != mad.GSIQKey {
		b = fmt.Appendf(b, "  QP 1 packet with Q_Key 0x%08x, not the GSI's 0x%08x: receivers drop it\n", q, uint32(mad.GSIQKey))
	}
	m, perr, cerr := pktfmt.GSIMAD(f)
	if perr != nil {
		return fmt.Appendf(b, "  MAD malformed: %d bytes, a MAD has %d\n", len(f.Payload), mad.Size)
	}
	if cerr != nil {
		return fmt.Appendf(b, "  MAD class 0x%02x version %d method 0x%02x attr 0x%04x tid 0x%016x: not a CM message (%v)\n",
			m.MgmtClass(), m.ClassVersion(), m.Method(), uint16(m.AttrID()), m.TID(), cerr)
	}
	b = fmt.Appendf(b, "  CM %s tid 0x%016x", m.AttrID(), m.TID())
	body := m.Body()
	switch m.AttrID() {
	case mad.AttrREQ:
		r := mad.REQ(body)
		b = fmt.Appendf(b, " comm 0x%08x svc %s qpn 0x%06x psn 0x%06x mtu %s rr/id %d/%d retry %d rnr %d",
			r.LocalCommID(), pktfmt.ServiceString(r.ServiceID()), r.LocalQPN(), r.StartingPSN(), mtuString(r.PathMTU()),
			r.ResponderResources(), r.InitiatorDepth(), r.RetryCount(), r.RNRRetryCount())
		b = appendCMA(b, r.ServiceID(), r.PrivateData())
		b = appendPData(b, r.PrivateData())
	case mad.AttrREP:
		r := mad.REP(body)
		b = fmt.Appendf(b, " comm 0x%08x remote 0x%08x qpn 0x%06x psn 0x%06x rr/id %d/%d ackdelay %d rnr %d",
			r.LocalCommID(), r.RemoteCommID(), r.LocalQPN(), r.StartingPSN(), r.ResponderResources(), r.InitiatorDepth(),
			r.TargetACKDelay(), r.RNRRetryCount())
		b = appendPData(b, r.PrivateData())
	case mad.AttrRTU:
		r := mad.RTU(body)
		b = fmt.Appendf(b, " comm 0x%08x remote 0x%08x", r.LocalCommID(), r.RemoteCommID())
		b = appendPData(b, r.PrivateData())
	case mad.AttrREJ:
		r := mad.REJ(body)
		b = fmt.Appendf(b, " comm 0x%08x remote 0x%08x rejects %s reason %d (%s) ari %d",
			r.LocalCommID(), r.RemoteCommID(), msgString(r.MsgRejected()), uint16(r.Reason()), r.Reason(), r.ARILength())
		b = appendPData(b, r.PrivateData())
	case mad.AttrMRA:
		r := mad.MRA(body)
		b = fmt.Appendf(b, " comm 0x%08x remote 0x%08x for %s service timeout %d (%s)",
			r.LocalCommID(), r.RemoteCommID(), msgString(r.MsgMRAed()), r.ServiceTimeout(), ibTime(r.ServiceTimeout()))
		b = appendPData(b, r.PrivateData())
	case mad.AttrDREQ:
		r := mad.DREQ(body)
		b = fmt.Appendf(b, " comm 0x%08x remote 0x%08x qpn 0x%06x", r.LocalCommID(), r.RemoteCommID(), r.RemoteQPN())
		b = appendPData(b, r.PrivateData())
	case mad.AttrDREP:
		r := mad.DREP(body)
		b = fmt.Appendf(b, " comm 0x%08x remote 0x%08x", r.LocalCommID(), r.RemoteCommID())
		b = appendPData(b, r.PrivateData())
	case mad.AttrSIDRREQ:
		r := mad.SIDRREQ(body)
		b = fmt.Appendf(b, " request 0x%08x svc %s pkey 0x%04x", r.RequestID(), pktfmt.ServiceString(r.ServiceID()), r.PKey())
		b = appendCMA(b, r.ServiceID(), r.PrivateData())
		b = appendPData(b, r.PrivateData())
	case mad.AttrSIDRREP:
		r := mad.SIDRREP(body)
		b = fmt.Appendf(b, " request 0x%08x status %d (%s) qpn 0x%06x qkey 0x%08x svc %s",
			r.RequestID(), uint8(r.Status()), r.Status(), r.QPN(), r.QKey(), pktfmt.ServiceString(r.ServiceID()))
		b = appendPData(b, r.PrivateData())
	default:
		b = append(b, " (not decoded)"...)
	}
	return append(b, '\n')
}

// appendCMA appends the rdma_cm header of a REQ or SIDR_REQ whose service
// ID is rdma_cm's.
func appendCMA(b []byte, sid uint64, pd []byte) []byte {
	if _, _, ok := mad.SplitServiceID(sid); !ok {
		return b
	}
	h := mad.CMAHeader(pd)
	if err := h.Check(); err != nil {
		return fmt.Appendf(b, " cma bad (%v)", err)
	}
	return fmt.Appendf(b, " cma %s -> %s", netip.AddrPortFrom(h.Src(), h.Port()), h.Dst())
}

// usedLen is the length of private data up to its last nonzero byte.
func usedLen(pd []byte) int {
	for i := len(pd) - 1; i >= 0; i-- {
		if pd[i] != 0 {
			return i + 1
		}
	}
	return 0
}

// appendPData appends the private data's length up to its last nonzero
// byte, out of the message's room.
func appendPData(b []byte, pd []byte) []byte {
	return fmt.Appendf(b, " pdata %d/%d (to last nonzero byte)", usedLen(pd), len(pd))
}

func msgString(m uint8) string {
	switch m {
	case mad.MsgREQ:
		return "REQ"
	case mad.MsgREP:
		return "REP"
	case mad.MsgOther:
		return "other"
	}
	return fmt.Sprintf("message %d", m)
}

// mtuString formats an IB MTU enum (1 = 256 ... 5 = 4096).
func mtuString(v uint8) string {
	if v >= 1 && v <= 5 {
		return fmt.Sprint(128 << v)
	}
	return fmt.Sprintf("?(%d)", v)
}

// ibTime formats an IBTA time exponent: 4.096 µs × 2^t.
func ibTime(t uint8) string {
	d := time.Duration(4096) << min(t, 31) // 4096 ns × 2^t
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3gs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3gms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.3gµs", float64(d)/float64(time.Microsecond))
}

// cmDetail prints the MAD header as a bit diagram and every field of the CM
// message, for -v.
func (d *Dumper) cmDetail() {
	w := d.w
	m, perr, _ := pktfmt.GSIMAD(&d.f)
	if perr != nil {
		return
	}
	h := m.Header()
	pktfmt.DrawHeader(w, fmt.Sprintf("MAD: common management datagram header, 24 bytes (class 0x%02x, attribute %s)", h.MgmtClass, h.AttrID), []pktfmt.Field{
		{Name: "BaseVersion", Bits: 8, Value: uint64(h.BaseVersion)}, {Name: "MgmtClass", Bits: 8, Value: uint64(h.MgmtClass), Hex: true},
		{Name: "ClassVersion", Bits: 8, Value: uint64(h.ClassVersion)}, {Name: "Method", Bits: 8, Value: uint64(h.Method), Hex: true},
		{Name: "Status", Bits: 16, Value: uint64(h.Status), Hex: true}, {Name: "ClassSpecific", Bits: 16, Value: uint64(h.ClassSpecific), Hex: true},
		{Name: "TransactionID", Bits: 64, Value: h.TID, Hex: true},
		{Name: "AttributeID", Bits: 16, Value: uint64(h.AttrID), Hex: true}, {Name: "Reserved", Bits: 16, Value: uint64(m[18])<<8 | uint64(m[19])},
		{Name: "AttributeModifier", Bits: 32, Value: uint64(h.AttrMod), Hex: true},
	})
	if m.CheckCM() != nil {
		return
	}
	body := m.Body()
	var fields any
	var cma []byte
	switch m.AttrID() {
	case mad.AttrREQ:
		fields = mad.REQ(body).Fields()
		if _, _, ok := mad.SplitServiceID(mad.REQ(body).ServiceID()); ok {
			cma = mad.REQ(body).PrivateData()
		}
	case mad.AttrREP:
		fields = mad.REP(body).Fields()
	case mad.AttrRTU:
		fields = mad.RTU(body).Fields()
	case mad.AttrREJ:
		fields = mad.REJ(body).Fields()
	case mad.AttrMRA:
		fields = mad.MRA(body).Fields()
	case mad.AttrDREQ:
		fields = mad.DREQ(body).Fields()
	case mad.AttrDREP:
		fields = mad.DREP(body).Fields()
	case mad.AttrSIDRREQ:
		fields = mad.SIDRREQ(body).Fields()
		if _, _, ok := mad.SplitServiceID(mad.SIDRREQ(body).ServiceID()); ok {
			cma = mad.SIDRREQ(body).PrivateData()
		}
	case mad.AttrSIDRREP:
		fields = mad.SIDRREP(body).Fields()
	default:
		return
	}
	fmt.Fprintf(w, "  CM %s\n", m.AttrID())
	var line strings.Builder
	v := reflect.ValueOf(fields)
	for i := 0; i < v.NumField(); i++ {
		name, fv := v.Type().Field(i).Name, v.Field(i)
		var s string
		switch x := fv.Interface().(type) {
		case []byte:
			continue // below
		case [16]byte:
			s = netip.AddrFrom16(x).String()
		case bool:
			s = fmt.Sprint(boolBit(x))
		case mad.RejReason:
			s = fmt.Sprintf("%d (%s)", uint16(x), x)
		case uint8:
			s = fmt.Sprint(x)
		default:
			s = fmt.Sprintf("0x%x", fv.Uint())
		}
		item := name + " " + s
		if line.Len() > 0 && line.Len()+2+len(item) > 96 {
			fmt.Fprintf(w, "    %s\n", line.String())
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteString("  ")
		}
		line.WriteString(item)
	}
	if line.Len() > 0 {
		fmt.Fprintf(w, "    %s\n", line.String())
	}
	if cma != nil {
		h := mad.CMAHeader(cma)
		fmt.Fprintf(w, "    rdma_cm header: version %d  IP version %d  source %s  destination %s",
			h.Version(), h.IPVersion(), netip.AddrPortFrom(h.Src(), h.Port()), h.Dst())
		if err := h.Check(); err != nil {
			fmt.Fprintf(w, "  (the passive side refuses it: %v)", err)
		}
		fmt.Fprintln(w)
	}
	for i := 0; i < v.NumField(); i++ {
		if x, ok := v.Field(i).Interface().([]byte); ok {
			n := usedLen(x)
			fmt.Fprintf(w, "    %s: %d bytes, %d up to the last nonzero byte\n", v.Type().Field(i).Name, len(x), n)
			if n > 0 {
				fmt.Fprint(w, indent(hex.Dump(x[:n]), "      "))
			}
		}
	}
}
