package stream

// Message kinds, the top three bits of the immediate.
const (
	kindData     = 0 // payload written at the receiver's ring tail
	kindCredit   = 1 // credits only
	kindFIN      = 2 // no more data from the sender
	kindAdvert   = 3 // SEND: a reader's buffer {addr, rkey, len, head}
	kindDirect   = 4 // payload written into the advertised buffer
	kindDecline  = 5 // the advert is returned unused
	kindWithdraw = 6 // the reader asks for its advert back

	kindDeclineSmall = 7 // DECLINE because the writer's data is small: advertise less
)

// slotSize is the payload room of each receive request and control send.
const slotSize = 32

const (
	maxMsgCredit  = 1<<7 - 1  // receive requests one message can return
	maxByteCredit = 1<<22 - 1 // ring bytes one message can return
)

// encodeImm packs a message's kind and the credits it returns.
func encodeImm(kind, msgs, bytes uint32) uint32 {
	return kind<<29 | (msgs&maxMsgCredit)<<22 | bytes&maxByteCredit
}

// decodeImm unpacks what encodeImm packed.
func decodeImm(imm uint32) (kind, msgs, bytes uint32) {
	return imm >> 29, imm >> 22 & maxMsgCredit, imm & maxByteCredit
}
