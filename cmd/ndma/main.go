// Command ndma is NDMA's single binary: the memory-node daemon, the demo,
// benchmarks and tools, as cobra subcommands.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// rootCmd is the top-level command; each subcommand's file adds itself in
// an init function.
var rootCmd = &cobra.Command{
	Use:           "ndma",
	Short:         "NDMA: network-level DMA — one-sided memory operations and collectives over UDP",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ndma:", err)
		os.Exit(1)
	}
}
