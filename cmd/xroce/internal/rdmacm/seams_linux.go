//go:build linux

package rdmacm

import "time"

// Test seams: what the tests of the CM tools change in the code the tools
// share (cmtest's helpers call these). The tools themselves only read
// what these set.

// SetListenHook makes the tools call f each time one listens (see
// Listening), until restore is called: tests start a client then. A nil
// f is no hook.
func SetListenHook(f func()) (restore func()) {
	var h *func()
	if f != nil {
		h = &f
	}
	old := testHookListen.Swap(h)
	return func() { testHookListen.Store(old) }
}

// SetPeerTimeout makes every wait for a connected peer (cmPeerTimeout)
// last d until restore is called: tests of silent peers wait a second,
// not the default.
func SetPeerTimeout(d time.Duration) (restore func()) {
	old := cmPeerTimeout
	cmPeerTimeout = d
	return func() { cmPeerTimeout = old }
}
