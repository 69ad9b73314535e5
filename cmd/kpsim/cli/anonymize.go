package cli

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/results"
)

func init() { register("anonymize", newAnonymizeCommand) }

func newAnonymizeCommand() *cobra.Command {
	var out string
	var seed int64
	c := &cobra.Command{
		Use:   "anonymize IN -o OUT [--seed N]",
		Short: "rewrite a cluster export with names and addresses replaced consistently, structure kept",
		Long: `Read what 'kpsim state' and scenarios read (a kubectl export: JSON or YAML, a List,
documents, or a directory of them) and write it with every name, namespace, label
value, hostname and address replaced. Ports, protocols, types, policies, endpoint
conditions and counts are kept; addresses keep their subnet relations, so the
anonymized cluster programs the same shape of IPVS, ipset and iptables state.`,
		Example: `  kubectl get services,endpointslices -A -o json > export/cluster.json
  kpsim anonymize export -o anon.json
  kpsim anonymize export/cluster.json -o - --seed 42 | less`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return badUsage("want one input, got %q", args)
			}
			if out == "" {
				return badUsage("want -o OUT")
			}
			return runAnonymize(cmd, args[0], out, seed)
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "output `FILE` (a v1 List in JSON; - is standard output)")
	c.Flags().Int64Var(&seed, "seed", 0, "the mapping's key `N`; the same seed maps the same names and addresses the same way,\n"+
		"so exports anonymized with one seed line up. Default: a random seed, printed to standard error.\n"+
		"Keep it private: whoever has it can test guesses of the original names")
	completeFiles(c, "output", "json")
	return c
}

func runAnonymize(cmd *cobra.Command, in, out string, seed int64) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := checkOutput("--output", out); err != nil {
		return err
	}
	if !cmd.Flags().Changed("seed") {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("random seed: %w", err)
		}
		seed = int64(binary.BigEndian.Uint64(b[:]) >> 1)
		fmt.Fprintf(stderr, "seed %d (pass --seed %d to anonymize another export of this cluster the same way)\n", seed, seed)
	}
	set, err := objects.Load(in)
	if err != nil {
		return usageError("%v", err)
	}
	anon := objects.Anonymize(set, seed)
	for _, n := range anon.Notes {
		fmt.Fprintln(stderr, n)
	}
	var buf bytes.Buffer
	if err := objects.Write(&buf, anon); err != nil {
		return err
	}
	if out == "-" {
		_, err := stdout.Write(buf.Bytes())
		return err
	}
	if err := results.WriteFile(out, buf.Bytes()); err != nil {
		return fmt.Errorf("anonymize: %w", err)
	}
	fmt.Fprintf(stderr, "wrote %d %s, %d %s, %d %s to %s\n",
		len(anon.Services), results.Plural(len(anon.Services), "service", "services"),
		len(anon.EndpointSlices), results.Plural(len(anon.EndpointSlices), "endpoint slice", "endpoint slices"),
		len(anon.Nodes), results.Plural(len(anon.Nodes), "node", "nodes"), out)
	return nil
}
