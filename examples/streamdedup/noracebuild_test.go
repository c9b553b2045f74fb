//go:build !race

package main

// raceDetector is true when the tests run with -race: the example's
// processes are then built with it too (from the same build cache).
const raceDetector = false
