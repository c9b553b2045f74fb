//go:build race

package rbloom

// raceDetector is true when the tests run with -race, which makes the
// client several times slower: the longest tests then do less work.
const raceDetector = true
