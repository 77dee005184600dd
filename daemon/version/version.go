// Package version holds the build's version, set by the Makefile's -ldflags.
package version

// Version is overridden at link time; "dev" marks an untagged build.
var Version = "dev"
