package qp

// growRing returns ring with room for more entries (twice as many, 4 at
// least, limit at most), the entries of the free-running indexes
// [head, tail) at their places in the new ring. Entries carry their
// scatter/gather slices along; slots that were free start empty and get
// theirs when first used. A QP's send and receive rings grow so, up to
// their depths: an idle QP holds no ring, a busy one the depth it uses,
// and none grows past its depth.
func growRing[T any](ring []T, head, tail, limit uint32) []T {
	n := min(max(2*uint32(len(ring)), 4), limit)
	grown := make([]T, n)
	for i := head; i != tail; i++ {
		grown[i%n] = ring[i%uint32(len(ring))]
	}
	return grown
}
