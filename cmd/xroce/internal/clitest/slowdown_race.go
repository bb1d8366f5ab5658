//go:build race

package clitest

// Slowdown stretches the tests' overall deadlines: the race detector
// makes the runs (perf's send_lat -a up to 8 MiB) several times slower.
const Slowdown = 4
