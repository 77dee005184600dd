//go:build race

package perf

// raceDetector: the tests run under the race detector.
const raceDetector = true
