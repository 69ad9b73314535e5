// Command parity runs a corpus of random clusters through kpsim's proxier
// and kube-proxy v1.37's, and exits 1 if any cluster differs in a way
// kube-proxy's own indeterminism does not explain (see package parity).
//
//	go run ./cmd/parity -seeds 1000-1499 [-services 40] [-changes 15] [-v] [-dump DIR]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"k8s.io/klog/v2"

	"github.com/kpsim/kpsim/dataplane/state"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/upstream/kube-proxy-v1.37/parity"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("parity", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seeds := fs.String("seeds", "1000-1499", "seed range FROM-TO (inclusive): one cluster per seed")
	services := fs.Int("services", 40, "services per cluster")
	changes := fs.Int("changes", 15, "changes applied after the first sync")
	verbose := fs.Bool("v", false, "list every unexplained difference")
	dump := fs.String("dump", "", "write the objects and both state dumps of every differing cluster under this directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	from, to, err := seedRange(*seeds)
	if err != nil {
		fmt.Fprintf(stderr, "parity: -seeds: %v\n", err)
		return 2
	}
	// kube-proxy logs what it skips (an address it cannot use, a sync it
	// defers); the comparison is the judge here.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)

	n := int(to - from + 1)
	out := make([]*parity.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c, err := parity.NewCase(from+uint64(i), *services, *changes)
				if err == nil {
					out[i], err = parity.Run(c)
				}
				errs[i] = err
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()

	matched, explainedOnly := 0, 0
	explained := map[string]int{}
	signatures := map[string]int{} // difference signature -> clusters
	for i, r := range out {
		if errs[i] != nil {
			fmt.Fprintf(stdout, "seed %d: error: %v\n", from+uint64(i), errs[i])
			signatures["error: "+errorSignature(errs[i])]++
			continue
		}
		seen := map[string]bool{}
		anyExplained := false
		for _, s := range r.Steps {
			for why, k := range s.Explained {
				explained[why] += k
				anyExplained = true
			}
			for _, d := range s.Unexplained {
				seen[parity.Signature(d)] = true
			}
		}
		for sig := range seen {
			signatures[sig]++
		}
		if r.Match() {
			matched++
			if anyExplained {
				explainedOnly++
			}
			continue
		}
		fmt.Fprintf(stdout, "seed %d (%s, node %s): differs\n", r.Case.Seed, r.Case.Config, r.Node)
		for _, s := range r.Steps {
			for j, d := range s.Unexplained {
				if !*verbose && j == 3 {
					fmt.Fprintf(stdout, "  %s: ... %d more\n", s.Name, len(s.Unexplained)-3)
					break
				}
				fmt.Fprintf(stdout, "  %s: %s\n", s.Name, d)
			}
		}
		if *dump != "" {
			if err := write(filepath.Join(*dump, strconv.FormatUint(r.Case.Seed, 10)), r); err != nil {
				fmt.Fprintf(stderr, "parity: %v\n", err)
				return 2
			}
		}
	}
	fmt.Fprintf(stdout, "\nseeds %d-%d, %d services and %d changes each: %d of %d clusters match kube-proxy v1.37.1 (%d of them with explained differences only)\n",
		from, to, *services, *changes, matched, n, explainedOnly)
	for _, why := range sortedKeys(explained) {
		fmt.Fprintf(stdout, "  explained: %d x %s\n", explained[why], why)
	}
	for _, sig := range sortedKeys(signatures) {
		fmt.Fprintf(stdout, "  unexplained in %d clusters: %s\n", signatures[sig], sig)
	}
	if matched != n {
		return 1
	}
	return 0
}

func seedRange(s string) (from, to uint64, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	if from, err = strconv.ParseUint(a, 10, 64); err != nil {
		return 0, 0, err
	}
	if to, err = strconv.ParseUint(b, 10, 64); err != nil {
		return 0, 0, err
	}
	if to < from {
		return 0, 0, fmt.Errorf("%s: empty range", s)
	}
	return from, to, nil
}

// errorSignature is an error without what names one cluster's objects.
func errorSignature(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	for _, re := range []*regexp.Regexp{seedRe, objectRe, itemRe} {
		s = re.ReplaceAllString(s, "")
	}
	return s
}

var (
	seedRe   = regexp.MustCompile(`seed \d+: `)
	objectRe = regexp.MustCompile(`(services|endpointslices|nodes) [^ :]+: `)
	itemRe   = regexp.MustCompile(` \(item \d+ of the list\)`)
)

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// write saves a differing cluster for a closer look: the objects (kpsim
// state -f base.json --then changes.json reproduces kpsim's side) and both
// dumps per step (kpsim state --diff compares them).
func write(dir string, r *parity.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, set := range map[string]*objects.Set{"base.json": r.Case.Base, "changes.json": r.Case.Changes} {
		if err := writeFile(filepath.Join(dir, name), func(w io.Writer) error { return objects.Write(w, set) }); err != nil {
			return err
		}
	}
	for i, s := range r.Steps {
		for who, st := range map[string]*state.State{"kpsim": s.KPSim, "kube-proxy": s.KubeProxy} {
			path := filepath.Join(dir, fmt.Sprintf("step%d-%s.json", i+1, who))
			if err := writeFile(path, func(w io.Writer) error { return state.Write(w, st) }); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
