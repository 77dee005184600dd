//go:build !race

package bus

// raceDetector: the tests run under the race detector, which allocates
// more bytes for the same objects.
const raceDetector = false
