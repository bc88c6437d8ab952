// Command vastrun rents disposable GPU machines on Vast.ai and guarantees
// every rental is found again, destroyed with confirmation, and evidenced.
package main

import (
	"os"

	"github.com/vastrun/vastrun/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
