//go:build race

package bus_test

// raceSlowdown scales the time limits of tests under the race detector,
// which makes a full pass several times slower.
const raceSlowdown = 8
