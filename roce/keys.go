package roce

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"math/bits"
)

// keyGen makes memory keys (L_Key = R_Key). A key is
//
//	tag << slotBits | slot
//
// where slot indexes the device's region table (so a lookup is one load)
// and tag is a keyed pseudorandom permutation of the slot's registration
// count: a 4-round Feistel network over tag's bits whose round function is
// AES under a key drawn from crypto/rand when the device opens. So a peer
// that saw earlier keys cannot predict the next one (rxe draws 8 random
// bits per key for the same reason), and a slot gives a key again only
// after 2^tagBits registrations of that slot: a stale R_Key does not turn
// valid again when its slot is reused. With the default 4096 regions a tag
// has 18 bits; with the most regions a device allows (2^24-1), 8.
type keyGen struct {
	slotBits uint   // even, so that the tag splits into equal halves
	slotMask uint32 // (1 << slotBits) - 1
	half     uint   // bits of each Feistel half
	block    cipher.Block
	gen      []uint32 // registrations of each slot; guarded by mrTable.mu
}

func (k *keyGen) init(slots int) {
	k.slotBits = uint(bits.Len32(uint32(slots)))
	k.slotBits += k.slotBits & 1
	k.slotMask = 1<<k.slotBits - 1
	k.half = (32 - k.slotBits) / 2
	var key [16]byte
	rand.Read(key[:]) // never fails (crypto/rand panics rather than return an error)
	k.block, _ = aes.NewCipher(key[:])
	k.gen = make([]uint32, slots+1)
}

// next returns a new key for slot and counts the registration.
func (k *keyGen) next(slot uint32) uint32 {
	g := k.gen[slot]
	k.gen[slot]++
	return k.tag(slot, g)<<k.slotBits | slot
}

// tag permutes the low 2·half bits of g, keyed by the device's AES key and
// the slot.
func (k *keyGen) tag(slot, g uint32) uint32 {
	mask := uint32(1)<<k.half - 1
	l, r := g>>k.half&mask, g&mask
	var in, out [aes.BlockSize]byte
	binary.LittleEndian.PutUint32(in[4:], slot)
	for round := range 4 {
		in[0] = byte(round)
		binary.LittleEndian.PutUint32(in[8:], r)
		k.block.Encrypt(out[:], in[:])
		l, r = r, l^binary.LittleEndian.Uint32(out[:])&mask
	}
	return l<<k.half | r
}
