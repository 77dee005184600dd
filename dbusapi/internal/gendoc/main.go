// Command gendoc writes docs/dbus-api.md from the embedded contract.
package main

import (
	"fmt"
	"os"

	"github.com/rdmad/rdmad/dbusapi"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendoc OUTPUT.md")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], dbusapi.TheContract().Markdown(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}
