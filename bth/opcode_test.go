package bth

import "testing"

func TestOpcodeTable(t *testing.T) {
	tests := []struct {
		op      Opcode
		name    string
		tr      Transport
		hdrs    string
		payload PayloadRule
		hdrLen  int
	}{
		{RCSendFirst, "RC SEND_FIRST", RC, "none", PayloadRequired, 12},
		{RCSendMiddle, "RC SEND_MIDDLE", RC, "none", PayloadRequired, 12},
		{RCSendLast, "RC SEND_LAST", RC, "none", PayloadRequired, 12},
		{RCSendLastImm, "RC SEND_LAST_WITH_IMMEDIATE", RC, "ImmDt", PayloadRequired, 16},
		{RCSendOnly, "RC SEND_ONLY", RC, "none", PayloadOptional, 12},
		{RCSendOnlyImm, "RC SEND_ONLY_WITH_IMMEDIATE", RC, "ImmDt", PayloadOptional, 16},
		{RCWriteFirst, "RC RDMA_WRITE_FIRST", RC, "RETH", PayloadRequired, 28},
		{RCWriteMiddle, "RC RDMA_WRITE_MIDDLE", RC, "none", PayloadRequired, 12},
		{RCWriteLast, "RC RDMA_WRITE_LAST", RC, "none", PayloadRequired, 12},
		{RCWriteLastImm, "RC RDMA_WRITE_LAST_WITH_IMMEDIATE", RC, "ImmDt", PayloadRequired, 16},
		{RCWriteOnly, "RC RDMA_WRITE_ONLY", RC, "RETH", PayloadOptional, 28},
		{RCWriteOnlyImm, "RC RDMA_WRITE_ONLY_WITH_IMMEDIATE", RC, "RETH+ImmDt", PayloadOptional, 32},
		{RCReadRequest, "RC RDMA_READ_REQUEST", RC, "RETH", PayloadNone, 28},
		{RCReadResponseFirst, "RC RDMA_READ_RESPONSE_FIRST", RC, "AETH", PayloadRequired, 16},
		{RCReadResponseMiddle, "RC RDMA_READ_RESPONSE_MIDDLE", RC, "none", PayloadRequired, 12},
		{RCReadResponseLast, "RC RDMA_READ_RESPONSE_LAST", RC, "AETH", PayloadRequired, 16},
		{RCReadResponseOnly, "RC RDMA_READ_RESPONSE_ONLY", RC, "AETH", PayloadOptional, 16},
		{RCAck, "RC ACKNOWLEDGE", RC, "AETH", PayloadNone, 16},
		{RCAtomicAck, "RC ATOMIC_ACKNOWLEDGE", RC, "AETH+AtomicAckETH", PayloadNone, 24},
		{RCCompareSwap, "RC COMPARE_SWAP", RC, "AtomicETH", PayloadNone, 40},
		{RCFetchAdd, "RC FETCH_ADD", RC, "AtomicETH", PayloadNone, 40},
		{RCSendLastInv, "RC SEND_LAST_WITH_INVALIDATE", RC, "IETH", PayloadRequired, 16},
		{RCSendOnlyInv, "RC SEND_ONLY_WITH_INVALIDATE", RC, "IETH", PayloadOptional, 16},
		{RCFlush, "RC FLUSH", RC, "FETH+RETH", PayloadNone, 32},
		{RCAtomicWrite, "RC ATOMIC_WRITE", RC, "RETH", PayloadRequired, 28},
		{UCSendFirst, "UC SEND_FIRST", UC, "none", PayloadRequired, 12},
		{UCSendMiddle, "UC SEND_MIDDLE", UC, "none", PayloadRequired, 12},
		{UCSendLast, "UC SEND_LAST", UC, "none", PayloadRequired, 12},
		{UCSendLastImm, "UC SEND_LAST_WITH_IMMEDIATE", UC, "ImmDt", PayloadRequired, 16},
		{UCSendOnly, "UC SEND_ONLY", UC, "none", PayloadOptional, 12},
		{UCSendOnlyImm, "UC SEND_ONLY_WITH_IMMEDIATE", UC, "ImmDt", PayloadOptional, 16},
		{UCWriteFirst, "UC RDMA_WRITE_FIRST", UC, "RETH", PayloadRequired, 28},
		{UCWriteMiddle, "UC RDMA_WRITE_MIDDLE", UC, "none", PayloadRequired, 12},
		{UCWriteLast, "UC RDMA_WRITE_LAST", UC, "none", PayloadRequired, 12},
		{UCWriteLastImm, "UC RDMA_WRITE_LAST_WITH_IMMEDIATE", UC, "ImmDt", PayloadRequired, 16},
		{UCWriteOnly, "UC RDMA_WRITE_ONLY", UC, "RETH", PayloadOptional, 28},
		{UCWriteOnlyImm, "UC RDMA_WRITE_ONLY_WITH_IMMEDIATE", UC, "RETH+ImmDt", PayloadOptional, 32},
		{UDSendOnly, "UD SEND_ONLY", UD, "DETH", PayloadOptional, 20},
		{UDSendOnlyImm, "UD SEND_ONLY_WITH_IMMEDIATE", UD, "DETH+ImmDt", PayloadOptional, 24},
		{OpCNP, "CNP", CNP, "CNPReserved", PayloadNone, 28},
	}
	known := 0
	for op := 0; op < 256; op++ {
		if Opcode(op).Known() {
			known++
		}
	}
	if known != len(tests) {
		t.Errorf("%d known opcodes, table test has %d", known, len(tests))
	}
	for _, tt := range tests {
		info, ok := tt.op.Info()
		if !ok || info.Name != tt.name || tt.op.String() != tt.name {
			t.Errorf("Opcode(%#x) = %q (%v), want %q", uint8(tt.op), info.Name, ok, tt.name)
		}
		if info.Transport != tt.tr || tt.op.Transport() != tt.tr {
			t.Errorf("%v: transport %v, want %v", tt.op, info.Transport, tt.tr)
		}
		if got := tt.op.Headers().String(); got != tt.hdrs || info.Headers != tt.op.Headers() {
			t.Errorf("%v: headers %s, want %s", tt.op, got, tt.hdrs)
		}
		if tt.op.Payload() != tt.payload || info.Payload != tt.payload {
			t.Errorf("%v: payload %v, want %v", tt.op, tt.op.Payload(), tt.payload)
		}
		if got := BTHSize + tt.op.Headers().Size(); got != tt.hdrLen {
			t.Errorf("%v: header length %d, want %d", tt.op, got, tt.hdrLen)
		}
	}
	for _, op := range []Opcode{0x15, 0x18, 0x1b, 0x1e, 0x1f, 0x2c, 0x40, 0x60, 0x63, 0x66, 0x80, 0xa0, 0xff} {
		if _, ok := op.Info(); ok || op.Known() {
			t.Errorf("Opcode(%#x) known", uint8(op))
		}
		if got, want := op.String(), "Opcode(0x"; len(got) < len(want) || got[:len(want)] != want {
			t.Errorf("Opcode(%#x).String() = %q", uint8(op), got)
		}
	}
}

func TestOpcodeClasses(t *testing.T) {
	tests := []struct {
		op                                                             Opcode
		send, write, readResp, request, first, middle, last, only, imm bool
	}{
		{RCSendFirst, true, false, false, true, true, false, false, false, false},
		{RCSendMiddle, true, false, false, true, false, true, false, false, false},
		{RCSendLastImm, true, false, false, true, false, false, true, false, true},
		{RCSendOnly, true, false, false, true, true, false, true, true, false},
		{UCWriteOnlyImm, false, true, false, true, true, false, true, true, true},
		{RCWriteLast, false, true, false, true, false, false, true, false, false},
		{RCReadRequest, false, false, false, true, true, false, true, true, false},
		{RCReadResponseFirst, false, false, true, false, true, false, false, false, false},
		{RCReadResponseOnly, false, false, true, false, true, false, true, true, false},
		{RCAck, false, false, false, false, true, false, true, true, false},
		{RCFetchAdd, false, false, false, true, true, false, true, true, false},
		{UDSendOnlyImm, true, false, false, true, true, false, true, true, true},
		{OpCNP, false, false, false, false, false, false, false, false, false},
	}
	for _, tt := range tests {
		got := [9]bool{tt.op.IsSend(), tt.op.IsWrite(), tt.op.IsReadResponse(), tt.op.IsRequest(), tt.op.IsFirst(), tt.op.IsMiddle(), tt.op.IsLast(), tt.op.IsOnly(), tt.op.HasImm()}
		want := [9]bool{tt.send, tt.write, tt.readResp, tt.request, tt.first, tt.middle, tt.last, tt.only, tt.imm}
		if got != want {
			t.Errorf("%v: send/write/readresp/request/first/middle/last/only/imm = %v, want %v", tt.op, got, want)
		}
	}
}

func TestEnumStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{RC.String(), "RC"}, {UC.String(), "UC"}, {UD.String(), "UD"}, {CNP.String(), "CNP"}, {RD.String(), "RD"}, {XRC.String(), "XRC"},
		{Transport(0xe0).String(), "Transport(224)"},
		{ExtAtomicAckETH.String(), "AtomicAckETH"}, {Ext(40).String(), "Ext(40)"},
		{PayloadOptional.String(), "optional"}, {PayloadRule(9).String(), "PayloadRule(9)"},
		{LayerIPv6.String(), "ipv6"}, {Layer(99).String(), "Layer(99)"},
		{ReasonTruncated.String(), "truncated"}, {Reason(200).String(), "Reason(200)"},
		{KindRNRNak.String(), "RNR NAK"},
		{PSN(0xffffff).String(), "16777215"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("String() = %q, want %q", tt.got, tt.want)
		}
	}
	var order []Ext
	for e := range (RCAtomicAck.Headers() | UDSendOnlyImm.Headers()).All {
		order = append(order, e)
	}
	if len(order) != 4 || order[0] != ExtDETH || order[1] != ExtAETH || order[2] != ExtAtomicAckETH || order[3] != ExtImmDt {
		t.Errorf("All order = %v", order)
	}
	if Ext(40).Size() != 0 {
		t.Error("unknown Ext has a size")
	}
}
