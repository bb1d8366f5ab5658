package qp

// The engine's rule for registered memory: it keeps keys, addresses and
// lengths, never a slice of a region, beyond the call that resolved it.
// Every packet resolves the bytes it reads or writes through Memory when it
// is handled (RETH of a WRITE in progress, the saved READ of a responder
// resource, the SGEs of a send or receive request), so a region that was
// deregistered between two packets is never touched: the next packet finds
// its key gone and fails as a packet naming an invalid key fails (IBTA Vol.
// 1 ch. 10: deregistering a region invalidates its keys): a NAK Remote
// Access Error for a peer's request, LOC_PROT_ERR for a local work
// request, as rxe, which looks its keys up per packet too. The verbs layer
// revokes a key and then waits for the batch that may hold a slice of it,
// which makes deregistration final.

// resolveSGL resolves the n bytes at offset off of the message that sgl
// describes, with the given access, into q.segs: sub-slices of registered
// memory in message order, valid until the engine returns. It reports
// false when a key no longer names a region that holds those bytes with
// that access.
func (q *QP) resolveSGL(sgl []SGE, off, n uint32, acc Access) bool {
	q.segs = q.segs[:0]
	for _, s := range sgl {
		if n == 0 {
			break
		}
		if off >= s.Length {
			off -= s.Length
			continue
		}
		c := min(s.Length-off, n)
		b, ok := q.mem.Local(s.LKey, s.Addr+uint64(off), c, acc)
		if !ok || uint32(len(b)) != c {
			return false
		}
		q.segs = append(q.segs, b)
		off, n = 0, n-c
	}
	return n == 0
}

// sglLength returns the total length of sgl.
func sglLength(sgl []SGE) uint64 {
	var n uint64
	for _, s := range sgl {
		n += uint64(s.Length)
	}
	return n
}

// checkSGL reports whether the n bytes of sgl resolve with acc now: the
// check a request gets when it starts, before any packet of it moves.
func (q *QP) checkSGL(sgl []SGE, n uint32, acc Access) bool {
	ok := q.resolveSGL(sgl, 0, n, acc)
	q.dropSegs()
	return ok
}

// copyToSegs copies p into q.segs, in order, and drops them.
func (q *QP) copyToSegs(p []byte) {
	for _, d := range q.segs {
		p = p[copy(d, p):]
	}
	q.dropSegs()
}

// copyFromSegs copies q.segs, in order, into dst and drops them.
func (q *QP) copyFromSegs(dst []byte) {
	for _, s := range q.segs {
		dst = dst[copy(dst, s):]
	}
	q.dropSegs()
}

// dropSegs forgets the slices of the packet just handled.
func (q *QP) dropSegs() {
	clear(q.segs)
	q.segs = q.segs[:0]
}

// remote resolves n bytes at va under a peer's rkey with acc, checking the
// QP's own remote access rights as well (a request the QP does not permit
// is a remote access error like a bad key, rxe's check_rkey).
func (q *QP) remote(rkey uint32, va uint64, n uint32, acc Access) ([]byte, bool) {
	if q.attr.AccessFlags&acc != acc {
		return nil, false
	}
	b, ok := q.mem.Remote(rkey, va, n, acc)
	return b, ok && uint32(len(b)) == n
}
