package bth

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"testing"
	"time"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBTH(t *testing.T) {
	tests := []struct {
		name string
		wire string
		f    BTHFields
	}{
		// From 06_atomic_bw.pcap frame 1: FETCH_ADD, AckReq.
		{"fetch-add", "14 00 ffff 00 00003a 80 41ed89", BTHFields{Opcode: RCFetchAdd, PKey: 0xffff, DestQP: 0x3a, AckReq: true, PSN: 0x41ed89}},
		{"all-ones", "ff ff ffff c0 ffffff 80 ffffff", BTHFields{Opcode: 0xff, SE: true, MigReq: true, PadCnt: 3, TVer: 15, PKey: 0xffff, FECN: true, BECN: true, DestQP: 0xffffff, AckReq: true, PSN: 0xffffff}},
		{"bits", "04 a3 8001 40 123456 00 000001", BTHFields{Opcode: RCSendOnly, SE: true, PadCnt: 2, TVer: 3, PKey: 0x8001, BECN: true, DestQP: 0x123456, PSN: 1}},
	}
	for _, tt := range tests {
		wire := mustHex(t, stripSpaces(tt.wire))
		if got := BTH(wire).Fields(); got != tt.f {
			t.Errorf("%s: Fields = %+v, want %+v", tt.name, got, tt.f)
		}
		b := make(BTH, BTHSize)
		b.Encode(&tt.f)
		if !bytes.Equal(b, wire) {
			t.Errorf("%s: Encode = %x, want %x", tt.name, []byte(b), wire)
		}
	}
	b := make(BTH, BTHSize)
	b.Encode(&BTHFields{DestQP: 1 << 24, PSN: 1<<24 | 5, PadCnt: 7, TVer: 0x1f})
	if b.DestQP() != 0 || b.PSN() != 5 || b.PadCnt() != 3 || b.TVer() != 15 {
		t.Errorf("oversized fields not truncated: %x", []byte(b))
	}
	b.SetFECN(true)
	b.SetBECN(true)
	b.SetAckReq(true)
	b.SetPSN(0xabcdef)
	if !b.FECN() || !b.BECN() || !b.AckReq() || b.PSN() != 0xabcdef {
		t.Errorf("setters: %x", []byte(b))
	}
	b.SetFECN(false)
	b.SetBECN(false)
	b.SetAckReq(false)
	if b.FECN() || b.BECN() || b.AckReq() {
		t.Errorf("clearing setters: %x", []byte(b))
	}
}

func stripSpaces(s string) string { return string(bytes.ReplaceAll([]byte(s), []byte(" "), nil)) }

func TestExtensionHeaders(t *testing.T) {
	reth := mustHex(t, "000055daeaa4600000001e9000002000")
	if f := RETH(reth).Fields(); f != (RETHFields{VA: 0x55daeaa46000, RKey: 0x1e90, DMALen: 0x2000}) {
		t.Errorf("RETH = %+v", f)
	}
	aeth := mustHex(t, "7f123456")
	if f := AETH(aeth).Fields(); f != (AETHFields{Syndrome: 0x7f, MSN: 0x123456}) {
		t.Errorf("AETH = %+v", f)
	}
	deth := mustHex(t, "11111111ff000032")
	if f := DETH(deth).Fields(); f != (DETHFields{QKey: 0x11111111, SrcQP: 0x32}) {
		t.Errorf("DETH = %+v", f)
	}
	atomic := mustHex(t, "000055daeaa4604000001e9000000000000000010102030405060708")
	if f := AtomicETH(atomic).Fields(); f != (AtomicETHFields{VA: 0x55daeaa46040, RKey: 0x1e90, SwapAdd: 1, Compare: 0x0102030405060708}) {
		t.Errorf("AtomicETH = %+v", f)
	}
	feth := mustHex(t, "ffffff1a")
	if f := FETH(feth).Fields(); f != (FETHFields{SelectivityLevel: 1, PlacementType: 0xa}) {
		t.Errorf("FETH = %+v", f)
	}
	if v := ImmDt(mustHex(t, "deadbeef")).Imm(); v != 0xdeadbeef {
		t.Errorf("ImmDt = %#x", v)
	}
	if v := IETH(mustHex(t, "0000cafe")).RKey(); v != 0xcafe {
		t.Errorf("IETH = %#x", v)
	}
	if v := AtomicAckETH(mustHex(t, "3d12d62394fbc10b")).OrigRemoteData(); v != 0x3d12d62394fbc10b {
		t.Errorf("AtomicAckETH = %#x", v)
	}

	// Encoders write the same bytes, with reserved bits zero.
	enc := []struct {
		name string
		size int
		fill func([]byte)
		want string
	}{
		{"RETH", RETHSize, func(b []byte) { RETH(b).Encode(&RETHFields{VA: 0x55daeaa46000, RKey: 0x1e90, DMALen: 0x2000}) }, "000055daeaa4600000001e9000002000"},
		{"AETH", AETHSize, func(b []byte) { AETH(b).Encode(&AETHFields{Syndrome: 0x7f, MSN: 0x1123456}) }, "7f123456"},
		{"DETH", DETHSize, func(b []byte) { DETH(b).Encode(&DETHFields{QKey: 0x11111111, SrcQP: 0x1000032}) }, "1111111100000032"},
		{"AtomicETH", AtomicETHSize, func(b []byte) {
			AtomicETH(b).Encode(&AtomicETHFields{VA: 0x55daeaa46040, RKey: 0x1e90, SwapAdd: 1, Compare: 0x0102030405060708})
		}, "000055daeaa4604000001e9000000000000000010102030405060708"},
		{"FETH", FETHSize, func(b []byte) { FETH(b).Encode(&FETHFields{SelectivityLevel: 5, PlacementType: 0x1a}) }, "0000001a"},
		{"ImmDt", ImmDtSize, func(b []byte) { ImmDt(b).Encode(0xdeadbeef) }, "deadbeef"},
		{"IETH", IETHSize, func(b []byte) { IETH(b).Encode(0xcafe) }, "0000cafe"},
		{"AtomicAckETH", AtomicAckETHSize, func(b []byte) { AtomicAckETH(b).Encode(0x3d12d62394fbc10b) }, "3d12d62394fbc10b"},
	}
	for _, e := range enc {
		b := bytes.Repeat([]byte{0xff}, e.size)
		e.fill(b)
		if got := hex.EncodeToString(b); got != e.want {
			t.Errorf("%s.Encode = %s, want %s", e.name, got, e.want)
		}
	}
}

func TestPSN(t *testing.T) {
	tests := []struct {
		a, b PSN
		diff int32
	}{
		{0, 0, 0},
		{1, 0, 1},
		{0, 1, -1},
		{0, 0xffffff, 1},
		{0xffffff, 0, -1},
		{5, 0xfffffb, 10},
		{0x7fffff, 0, 0x7fffff},
		{0x800000, 0, -0x800000},
		{0, 0x800000, -0x800000},
		{0x800001, 0, -0x7fffff},
	}
	for _, tt := range tests {
		if got := tt.a.Diff(tt.b); got != tt.diff {
			t.Errorf("PSN(%#x).Diff(%#x) = %d, want %d", tt.a, tt.b, got, tt.diff)
		}
		if got := tt.a.Less(tt.b); got != (tt.diff < 0) {
			t.Errorf("PSN(%#x).Less(%#x) = %v", tt.a, tt.b, got)
		}
		if got := tt.a.LessEq(tt.b); got != (tt.diff <= 0) {
			t.Errorf("PSN(%#x).LessEq(%#x) = %v", tt.a, tt.b, got)
		}
		if got := tt.b.Add(uint32(tt.diff)); got != tt.a {
			t.Errorf("PSN(%#x).Add(%d) = %#x, want %#x", tt.b, tt.diff, got, tt.a)
		}
		if got := tt.a.Sub(uint32(tt.diff)); got != tt.b {
			t.Errorf("PSN(%#x).Sub(%d) = %#x, want %#x", tt.a, tt.diff, got, tt.b)
		}
	}
	if !PSN(2).InWindow(0xfffffe, 5) || PSN(3).InWindow(0xfffffe, 5) || !PSN(0xfffffe).InWindow(0xfffffe, 1) {
		t.Error("InWindow across the wrap")
	}
	if !PSN(PSNMask).Valid() || PSN(1<<24).Valid() {
		t.Error("Valid")
	}
	// rxe's psn_compare: (int)((a - b) << 8).
	for _, p := range []PSN{0, 1, 0x7fffff, 0x800000, 0xffffff} {
		for _, q := range []PSN{0, 1, 0x7fffff, 0x800000, 0xffffff} {
			rxe := int32((uint32(p) - uint32(q)) << 8)
			if (rxe < 0) != p.Less(q) || (rxe == 0) != (p == q) {
				t.Errorf("PSN(%#x) vs %#x disagrees with rxe", p, q)
			}
		}
	}
}

func TestSyndrome(t *testing.T) {
	tests := []struct {
		s      Syndrome
		kind   SyndromeKind
		str    string
		cred   int
		credOK bool
		rnr    time.Duration
	}{
		{0x1f, KindACK, "ACK credits=invalid", 0, false, 0},
		{0x00, KindACK, "ACK credits=0", 0, true, 0},
		{0x05, KindACK, "ACK credits=6", 6, true, 0},
		{0x1e, KindACK, "ACK credits=32768", 32768, true, 0},
		{0x20, KindRNRNak, "RNR NAK timer=655.36ms", 0, false, 655360 * time.Microsecond},
		{0x21, KindRNRNak, "RNR NAK timer=10µs", 0, false, 10 * time.Microsecond},
		{0x2e, KindRNRNak, "RNR NAK timer=1.28ms", 0, false, 1280 * time.Microsecond},
		{0x3f, KindRNRNak, "RNR NAK timer=491.52ms", 0, false, 491520 * time.Microsecond},
		{0x40, KindReserved, "reserved syndrome 0x40", 0, false, 0},
		{0x60, KindNAK, "NAK PSN sequence error", 0, false, 0},
		{0x61, KindNAK, "NAK invalid request", 0, false, 0},
		{0x62, KindNAK, "NAK remote access error", 0, false, 0},
		{0x63, KindNAK, "NAK remote operational error", 0, false, 0},
		{0x64, KindNAK, "NAK invalid RD request", 0, false, 0},
		{0x65, KindNAK, "NAK code=5", 0, false, 0},
	}
	for _, tt := range tests {
		if tt.s.Kind() != tt.kind || tt.s.String() != tt.str {
			t.Errorf("Syndrome(%#x) = %v %q, want %v %q", uint8(tt.s), tt.s.Kind(), tt.s.String(), tt.kind, tt.str)
		}
		if n, ok := tt.s.Credits(); n != tt.cred || ok != tt.credOK {
			t.Errorf("Syndrome(%#x).Credits() = %d, %v", uint8(tt.s), n, ok)
		}
		if got := tt.s.RNRTimer(); got != tt.rnr {
			t.Errorf("Syndrome(%#x).RNRTimer() = %v, want %v", uint8(tt.s), got, tt.rnr)
		}
		if tt.s.IsACK() != (tt.kind == KindACK) || tt.s.IsRNRNak() != (tt.kind == KindRNRNak) || tt.s.IsNAK() != (tt.kind == KindNAK) {
			t.Errorf("Syndrome(%#x) Is* disagree with Kind", uint8(tt.s))
		}
	}
	if ACKSyndrome(31) != SyndromeACKNoCredits || RNRNakSyndrome(14) != 0x2e || ACKSyndrome(0x25).Value() != 5 {
		t.Error("syndrome constructors")
	}
	// The tables of ROCE.md.
	credits := []int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}
	for c, n := range credits {
		if CreditCount(uint8(c)) != n || CreditCode(n) != uint8(c) || (c < 30 && CreditCode(credits[c+1]-1) != uint8(c)) {
			t.Errorf("credit code %d: count %d, code(%d) = %d", c, CreditCount(uint8(c)), n, CreditCode(n))
		}
	}
	if CreditCount(31) != -1 || CreditCode(1<<20) != 30 || CreditCode(-1) != 0 {
		t.Error("credit table edges")
	}
	rnrMS := []float64{655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92, 2.56,
		3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52}
	for c, ms := range rnrMS {
		want := time.Duration(ms*1000+0.5) * time.Microsecond
		if got := RNRTimerDuration(uint8(c)); got != want {
			t.Errorf("RNRTimerDuration(%d) = %v, want %v", c, got, want)
		}
		if got := RNRTimerCode(want); got != uint8(c) {
			t.Errorf("RNRTimerCode(%v) = %d, want %d", want, got, c)
		}
	}
	if RNRTimerCode(0) != 1 || RNRTimerCode(11*time.Microsecond) != 2 || RNRTimerCode(time.Second) != 0 {
		t.Error("RNRTimerCode rounding")
	}
}

// TestIPv4Checksum compares the header checksum with RFC 1071 summed 16
// bits at a time, on random headers including all-ones words.
func TestIPv4Checksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		h := make(IPv4, IPv4Size)
		for j := range h {
			h[j] = byte(rng.Uint32())
		}
		if i%3 == 0 {
			for j := range h {
				h[j] |= 0xf0
			}
		}
		h.SetChecksum()
		var s uint32
		for j := 0; j < IPv4Size; j += 2 {
			s += uint32(h[j])<<8 | uint32(h[j+1])
		}
		for s > 0xffff {
			s = s>>16 + s&0xffff
		}
		if s != 0xffff || !h.ChecksumValid() {
			t.Fatalf("header %x: sum %#x, ChecksumValid %v", []byte(h), s, h.ChecksumValid())
		}
		h[i%IPv4Size] ^= 1 << (i % 8)
		if h.ChecksumValid() {
			t.Fatalf("header %x with a flipped bit passes", []byte(h))
		}
	}
}
