//go:build !race

package clitest

// Slowdown stretches the tests' overall deadlines (see slowdown_race.go).
const Slowdown = 1
