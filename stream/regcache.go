package stream

import (
	"errors"
	"sync"

	"github.com/xroce/xroce/roce"
)

// regCacheSize is how many caller buffers each side of a connection keeps
// registered.
const regCacheSize = 4

var errCacheClosed = errors.New("stream: registration cache closed")

// regCache keeps the last few caller buffers a connection registered for
// the direct path, so that a Read or Write buffer used again (the common
// case: a loop over one buffer) is not registered and deregistered each
// time; registering pins the pages (mlock) and deregistering waits for the
// workers. An entry matches a buffer with the same first byte and length.
// Its methods are safe for concurrent use.
type regCache struct {
	pd     *roce.PD
	access roce.Access

	// mu guards ents (least recently used first), closed and the counts.
	mu           sync.Mutex
	ents         []*roce.MR
	closed       bool
	hits, misses uint64
}

// get returns a region of exactly p, registering it if it is not cached.
func (c *regCache) get(p []byte) (*roce.MR, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errCacheClosed
	}
	for i, m := range c.ents {
		if b := m.Bytes(); len(b) == len(p) && &b[0] == &p[0] {
			copy(c.ents[i:], c.ents[i+1:])
			c.ents[len(c.ents)-1] = m
			c.hits++
			return m, nil
		}
	}
	m, err := c.pd.RegMR(p, c.access)
	if err != nil {
		return nil, err
	}
	c.misses++
	if len(c.ents) == regCacheSize {
		c.ents[0].Dereg()
		c.ents = append(c.ents[:0], c.ents[1:]...)
	}
	c.ents = append(c.ents, m)
	return m, nil
}

// counts returns the cache hits and registrations made.
func (c *regCache) counts() (hits, misses uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}

// close deregisters every entry; later gets fail.
func (c *regCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, m := range c.ents {
		m.Dereg()
	}
	c.ents = nil
}
