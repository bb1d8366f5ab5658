//go:build race

package qp

// raceEnabled says the tests run under the race detector. The engine is
// pure logic that one goroutine drives, so its simulations find nothing
// more under the detector than without it (go test without -race runs
// them in full) and run only a few seeds there.
const raceEnabled = true
