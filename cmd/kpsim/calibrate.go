package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kpsim/kpsim/kernel"
	"github.com/kpsim/kpsim/proxier/dataplane"
)

func init() {
	register(command{
		name:  "calibrate",
		usage: "[-o profile.json] [-name NAME] [-where TEXT] [-entries N] [-exec-entries N] [-iptables legacy|nft]",
		short: "measure this kernel's per-operation costs and write a cost profile for the sim (root)",
		run:   runCalibrate,
	})
}

func runCalibrate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("calibrate", stderr)
	out := fs.String("o", "", "write the profile to this file (default: standard output)")
	name := fs.String("name", "calibrated", "profile name")
	where := fs.String("where", "", "where this runs, for the profile's source text (default: the CPU model)")
	entries := fs.Int("entries", 1000, "set entries, IPVS services, addresses and conntrack flows per measurement")
	execEntries := fs.Int("exec-entries", 100, "entries for the one-process-per-entry ipset strategy")
	mode := fs.String("iptables", "", "iptables variant, legacy or nft (default: detected as kube-proxy does)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments %v", fs.Args())
	}
	if *entries < 20 || *execEntries < 20 {
		return usageError("-entries and -exec-entries must be at least 20 (the fits need a small and a large batch)")
	}
	if !kernel.Isolated() {
		return reexecIsolated("calibrate", args, stderr)
	}
	if err := kernel.LoopbackUp(); err != nil {
		return err
	}
	caps := kernel.Detect()
	skip := map[string]string{}
	if !caps.IPVS.OK {
		skip["ipvs"] = "no IPVS: " + caps.IPVS.Detail
	}
	if !caps.Dummy.OK {
		skip["dummy"] = "no dummy links: " + caps.Dummy.Detail
	}
	if !caps.Conntrack.OK {
		skip["conntrack"] = "no conntrack: " + caps.Conntrack.Detail
	}
	if *where == "" {
		*where = cpuModel()
	}
	open := func(s dataplane.IPSetStrategy) (dataplane.Dataplane, func(), error) {
		k, err := kernel.New(kernel.Options{IPSetStrategy: s, IPTablesMode: *mode})
		if err != nil {
			return dataplane.Dataplane{}, nil, err
		}
		return k.Dataplane(), k.Close, nil
	}
	p, err := kernel.Calibrate(open, kernel.CalibrateOptions{
		Entries: *entries, ExecEntries: *execEntries, Name: *name, Where: *where, Skip: skip, Log: stderr,
	})
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if *out == "" {
		_, err = stdout.Write(b)
		return err
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		return fmt.Errorf("write profile: %w", err)
	}
	fmt.Fprintf(stderr, "wrote %s\n", *out)
	return nil
}

// reexecIsolated runs `kpsim cmd args` again in a fresh network namespace
// (kernel.RunIsolated) and passes its exit status on: kernel work never
// happens in the namespace kpsim was started in.
func reexecIsolated(cmd string, args []string, stderr io.Writer) error {
	code, err := kernel.RunIsolated(append([]string{cmd}, args...), os.Stdin, os.Stdout, stderr)
	if err != nil {
		return err
	}
	if code != 0 {
		// The child has said why; pass its status on without another message.
		return &exitError{code: code, err: fmt.Errorf("isolated %s exited with status %d", cmd, code)}
	}
	return nil
}

// cpuModel names the machine for a profile's source text.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "an unnamed machine"
	}
	model, virt := "", ""
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if model == "" {
				model = strings.TrimSpace(v)
			}
		case "flags":
			if strings.Contains(v, " hypervisor") {
				virt = ", virtualised"
			}
		}
	}
	if model == "" {
		model = "an unnamed CPU"
	}
	return model + virt
}
