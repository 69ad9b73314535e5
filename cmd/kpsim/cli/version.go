package cli

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
)

// Set by Main from its main package, which the Makefile stamps:
// go build -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = ""
)

func init() { register("version", newVersionCommand) }

func newVersionCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version [--json]",
		Short: "print kpsim's version, commit and Go version",
		Long: `Print the version and commit kpsim was built from, the Go toolchain that built it,
and the proxier implementations the binary holds (kpsim, and in a binary built
with a kube-proxy release, kube-proxy@VERSION: what proxier.implementation takes).
'make build' stamps the version (git describe) and commit; a plain 'go build' in a
checkout falls back to the commit Go records, and elsewhere to "dev" and "unknown".
Results files record the same version and commit.`,
		Example: `  kpsim version
  kpsim version --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := buildInfo()
			goVersion := runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					record.Build
					Go       string   `json:"go"`
					Proxiers []string `json:"proxiers"`
				}{b, goVersion, proxier.Implementations()})
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "kpsim %s\ncommit %s\ngo %s\nproxiers %s\n", b.Version, b.Commit, goVersion,
				strings.Join(proxier.Implementations(), ", "))
			return err
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print version, commit and go as JSON")
	return c
}

// buildInfo names the binary: the Makefile's -X values, else the VCS
// stamp Go embeds when building inside a checkout.
func buildInfo() record.Build {
	b := record.Build{Version: version, Commit: commit}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && b.Commit == "":
				b.Commit = s.Value
			case s.Key == "vcs.modified" && s.Value == "true" && b.Commit != "" && !strings.HasSuffix(b.Commit, "-dirty"):
				b.Commit += "-dirty"
			}
		}
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}
