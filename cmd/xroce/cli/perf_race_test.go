//go:build race

package cli

// testSlowdown stretches the tests' overall deadlines: the race detector
// makes the runs (send_lat -a up to 8 MiB) several times slower.
const testSlowdown = 4
