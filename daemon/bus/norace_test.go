//go:build !race

package bus_test

const raceSlowdown = 1
