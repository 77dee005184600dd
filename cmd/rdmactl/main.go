// Command rdmactl shows and changes what rdmad manages, over D-Bus.
package main

import (
	"os"

	"github.com/rdmad/rdmad/cmd/rdmactl/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
