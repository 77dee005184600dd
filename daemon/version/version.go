// Package version holds the build's version, set by the Makefile's -ldflags
// from the VERSION file (packaging/version.sh).
package version

// Version is the semantic version: "1.0.0" for a release, "1.0.0+12.gabc1234"
// for a development build 12 commits after it. "dev" marks a build without
// the Makefile (go build, go test).
var Version = "dev"

// Revision is the commit the binary was built from ("" when not known).
var Revision = ""
