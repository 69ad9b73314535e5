package main

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/kpsim/kpsim/scenarios/objects"
)

func init() {
	register(command{
		name:  "anonymize",
		usage: "IN -o OUT [--seed N]",
		short: "rewrite a cluster export with names and addresses replaced consistently, structure kept",
		run:   runAnonymize,
	})
}

func runAnonymize(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("anonymize", stderr)
	var out string
	var seed int64
	fs.StringVar(&out, "o", "", "output file (a v1 List in JSON; - is standard output)")
	fs.Int64Var(&seed, "seed", 0, "key of the mapping; the same seed maps the same names and addresses the same way,\n"+
		"so exports anonymized with one seed line up. Default: a random seed, printed to standard error.\n"+
		"Keep it private: whoever has it can test guesses of the original names")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: kpsim anonymize %s\n\n", commands["anonymize"].usage)
		fmt.Fprintln(stderr, "Reads what kpsim state and scenarios read (a kubectl export: JSON or YAML, or a directory) and writes")
		fmt.Fprintln(stderr, "it with every name, namespace, label value, hostname and address replaced. Ports, protocols, types,")
		fmt.Fprintln(stderr, "policies, endpoint conditions and counts are kept; addresses keep their subnet relations.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	// Accept IN before or after the flags.
	var in string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		in, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return usageError("%v", err)
	}
	if in == "" && fs.NArg() == 1 {
		in = fs.Arg(0)
	} else if fs.NArg() != 0 {
		return usageError("want one input, got %v", fs.Args())
	}
	if in == "" || out == "" {
		return usageError("want IN and -o OUT (see kpsim anonymize -h)")
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "seed" })
	if !explicit {
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
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("anonymize: %w", err)
	}
	fmt.Fprintf(stderr, "wrote %d services, %d endpoint slices, %d nodes to %s\n", len(anon.Services), len(anon.EndpointSlices), len(anon.Nodes), out)
	return nil
}
