// Command heapowners breaks a heap profile's in-use bytes down by owner: the
// part of a kpsim run that holds them (the fake clientset's tracker, the
// informers, the proxier, the sim kernel, ...). Each sample goes to the
// first owner whose pattern matches a frame of its stack, so every byte is
// counted once; the order of owners decides for stacks that cross several
// (a proxier handler runs under an informer's goroutine: the proxier owns
// what it allocates). docs/scale.md shows its output before and after cuts.
//
//	kpsim run ... --memprofile mem.pprof
//	go run ./hack/heapowners mem.pprof
//
// It reads the profile through `go tool pprof -traces`, so that it needs no
// profile parser of its own.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// owner is a part of a run and the stack frames that mark its allocations.
type owner struct {
	name    string
	pattern *regexp.Regexp
}

var owners = []owner{
	{"sim kernel tables", regexp.MustCompile(`kpsim/kpsim/sim\.`)},
	{"dataplane.Churn (deleted and known real servers)", regexp.MustCompile(`dataplane\.\(\*Churn\)`)},
	{"proxier (parsed objects, desired state, kernel view)", regexp.MustCompile(`kpsim/kpsim/proxier\.`)},
	// A kube-proxy release's own state (its change trackers, service and
	// endpoints maps, what it wrote last): 78-119 MB at 44,000 services in
	// nftables mode, which fell under "other" before.
	{"kube-proxy release (its proxier's state)", regexp.MustCompile(`k8s\.io/kubernetes/pkg/proxy`)},
	// The informers' stores hold what their lists and watches handed them:
	// each listed item anew (the reflector's copy of its top level), the
	// contents shared with the API store.
	{"informer caches", regexp.MustCompile(`client-go/tools/cache|reflect\.New`)},
	{"API store (the cluster's objects, held once)", regexp.MustCompile(`scenarios\.\(\*apiStore\)`)},
	{"fake clientset: object tracker (kinds the API store does not keep)", regexp.MustCompile(`client-go/testing\.\(\*tracker\)`)},
	{"fake clientset: action log", regexp.MustCompile(`client-go/testing\.(\w+ActionImpl\.DeepCopy|\(\*Fake\)\.Invokes|New\w+Action)`)},
	{"replay: watch relay queues", regexp.MustCompile(`scenarios\.\(\*delayedWatch\)`)},
	{"replay: its record of what it wrote", regexp.MustCompile(`scenarios\.\(\*replay\)`)},
	{"scenario: generated cluster", regexp.MustCompile(`scenarios\.\(\*Scenario\)\.build|scenarios\.\(\*generator\)|kpsim/objects\.`)},
	{"run: sync records, probes, results", regexp.MustCompile(`scenarios\.\(\*run\)\.onSync|scenarios\.\(\*prober\)|kpsim/results`)},
}

const other = "other"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: heapowners HEAP-PROFILE")
		os.Exit(2)
	}
	out, err := exec.Command("go", "tool", "pprof", "-sample_index=inuse_space", "-traces", os.Args[1]).Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "heapowners: go tool pprof -traces %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	by, err := bucket(strings.NewReader(string(out)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "heapowners: %v\n", err)
		os.Exit(1)
	}
	print(os.Stdout, by)
}

// bucket reads `go tool pprof -traces` output: samples separated by lines of
// dashes, each a value on its first line before its leaf frame, the rest of
// the frames one a line. It returns the bytes per owner.
func bucket(r io.Reader) (map[string]float64, error) {
	by := map[string]float64{}
	var value float64
	var stack []string
	flush := func() {
		if stack != nil {
			by[ownerOf(stack)] += value
		}
		stack = nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "-----------+"):
			flush()
		case line == "" || strings.HasPrefix(line, "bytes:"):
		case stack == nil && isValue(line):
			f := strings.Fields(line)
			v, err := parseBytes(f[0])
			if err != nil {
				return nil, err
			}
			value = v
			stack = []string{strings.Join(f[1:], " ")}
		case stack != nil:
			stack = append(stack, line)
		}
	}
	flush()
	return by, sc.Err()
}

var valueRE = regexp.MustCompile(`^[0-9.]+(B|kB|MB|GB)?\s`)

func isValue(line string) bool { return valueRE.MatchString(line) }

// parseBytes reads pprof's "12.50MB", "512kB", "0".
func parseBytes(s string) (float64, error) {
	mult := 1.0
	for _, u := range []struct {
		suffix string
		m      float64
	}{{"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("sample value %q: %v", s, err)
	}
	return v * mult, nil
}

func ownerOf(stack []string) string {
	for _, o := range owners {
		for _, f := range stack {
			if o.pattern.MatchString(f) {
				return o.name
			}
		}
	}
	return other
}

func print(w io.Writer, by map[string]float64) {
	names := make([]string, 0, len(by))
	total := 0.0
	for n, v := range by {
		names = append(names, n)
		total += v
	}
	sort.Slice(names, func(i, j int) bool { return by[names[i]] > by[names[j]] })
	for _, n := range names {
		fmt.Fprintf(w, "%8.1f MB  %s\n", by[n]/1e6, n)
	}
	fmt.Fprintf(w, "%8.1f MB  in use in all\n", total/1e6)
}
