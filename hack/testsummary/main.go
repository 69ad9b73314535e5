// Command testsummary runs `go test -json` and prints what plain `go test`
// would (each package's result line, and the output of the tests that
// failed), then every test that was skipped, grouped by the reason it gave,
// and the package result lines once more: a skip is easy to miss in go
// test's own output, and on a machine without a host tool many tests skip.
// It exits with go test's status.
//
//	go run ./hack/testsummary go test -json ./...
//
// A test that runs in a private network namespace (netnstest.Private) runs
// in a child test binary whose -v output the parent streams as its own: its
// subtests' skips are found in that text ("--- SKIP: name"), their reasons
// in the log line under the child's last "=== RUN name". Children that run
// in parallel write into the same stream, so a reason there can in rare
// cases be another subtest's.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testsummary go test -json PACKAGES...")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	s := newSummary(os.Stdout)
	readErr := s.read(stdout)
	err = cmd.Wait()
	s.finish()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		code = 2
	}
	if readErr != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", readErr)
	}
	if code == 0 && (readErr != nil || s.failed) {
		code = 1 // never a pass that go test's own output does not show
	}
	os.Exit(code)
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

var (
	marker  = regexp.MustCompile(`^=== (?:RUN|CONT|NAME|PAUSE)\s+(\S+)`)
	skipped = regexp.MustCompile(`^\s*--- SKIP: (\S+) \(`)
	logLine = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: (.*)$`)
)

type skip struct{ pkg, test string }

type pkgState struct {
	lastTest string              // the Test of the package's last event
	current  string              // the test the package's output is about now
	reasons  map[string]string   // test: its last log line
	buffered map[string][]string // top-level test: its output until it ends
	ended    map[string]bool     // top-level tests that passed, failed or skipped
}

type summary struct {
	w       io.Writer
	pkgs    map[string]*pkgState
	skips   []skip
	seen    map[skip]bool
	results []string // the package result lines, in go test's order
	failed  bool
}

func newSummary(w io.Writer) *summary {
	return &summary{w: w, pkgs: map[string]*pkgState{}, seen: map[skip]bool{}}
}

func (s *summary) pkg(name string) *pkgState {
	p := s.pkgs[name]
	if p == nil {
		p = &pkgState{reasons: map[string]string{}, buffered: map[string][]string{}, ended: map[string]bool{}}
		s.pkgs[name] = p
	}
	return p
}

// read handles the event stream; a line that is not an event (go test's own
// complaints before any test runs) is printed as it is.
func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Action == "" {
			fmt.Fprintln(s.w, sc.Text())
			continue
		}
		s.handle(ev)
	}
	return sc.Err()
}

func topLevel(test string) string {
	top, _, _ := strings.Cut(test, "/")
	return top
}

func (s *summary) handle(ev event) {
	if ev.Action == "build-output" {
		fmt.Fprint(s.w, ev.Output)
		return
	}
	if ev.Action == "build-fail" {
		s.failed = true
		return
	}
	p := s.pkg(ev.Package)
	if ev.Test == "" {
		switch ev.Action {
		case "output":
			line := strings.TrimRight(ev.Output, "\n")
			if line == "PASS" {
				return // plain go test does not print it for a package that passed
			}
			fmt.Fprint(s.w, ev.Output)
			if strings.HasPrefix(line, "ok  \t") || strings.HasPrefix(line, "FAIL\t") || strings.HasPrefix(line, "?   \t") {
				s.results = append(s.results, line)
			}
		case "fail":
			s.failed = true
			// A test that never ended (a panic, a timeout) is what failed.
			for top, lines := range p.buffered {
				if !p.ended[top] {
					s.print(lines)
				}
			}
			p.buffered = map[string][]string{}
		}
		return
	}
	top := topLevel(ev.Test)
	switch ev.Action {
	case "output":
		if ev.Test != p.lastTest {
			p.lastTest, p.current = ev.Test, ev.Test
		}
		line := strings.TrimRight(ev.Output, "\n")
		p.buffered[top] = append(p.buffered[top], ev.Output)
		if m := marker.FindStringSubmatch(line); m != nil {
			p.current = m[1]
		} else if m := skipped.FindStringSubmatch(line); m != nil {
			k := skip{ev.Package, m[1]}
			if !s.seen[k] {
				s.seen[k] = true
				s.skips = append(s.skips, k)
			}
		} else if m := logLine.FindStringSubmatch(line); m != nil {
			p.reasons[p.current] = m[1]
		}
	case "pass", "skip":
		if ev.Test == top {
			p.ended[top] = true
			delete(p.buffered, top)
		}
	case "fail":
		s.failed = true
		if ev.Test == top {
			p.ended[top] = true
			s.print(p.buffered[top])
			delete(p.buffered, top)
		}
	}
}

// print writes a failed test's output as plain go test would, without -v's
// "=== RUN" lines.
func (s *summary) print(lines []string) {
	for _, l := range lines {
		if !marker.MatchString(l) {
			fmt.Fprint(s.w, l)
		}
	}
}

// finish lists the skipped tests by reason, then the package results again,
// so that the output still ends with go test's verdict.
func (s *summary) finish() {
	if len(s.skips) > 0 {
		byReason := map[string][]string{}
		for _, k := range s.skips {
			why := s.pkgs[k.pkg].reasons[k.test]
			if why == "" {
				why = "(no reason given)"
			}
			byReason[why] = append(byReason[why], k.pkg+" "+k.test)
		}
		reasons := make([]string, 0, len(byReason))
		for r := range byReason {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		fmt.Fprintf(s.w, "\nSkipped: %d tests, by reason (KPSIM_REQUIRE_HOST_TOOLS=1 fails the ones a host tool is missing for):\n", len(s.skips))
		for _, r := range reasons {
			fmt.Fprintf(s.w, "%s\n", r)
			for _, t := range byReason[r] {
				fmt.Fprintf(s.w, "    %s\n", t)
			}
		}
	}
	if len(s.results) > 0 {
		fmt.Fprintln(s.w, "\ngo test:")
		for _, r := range s.results {
			fmt.Fprintln(s.w, r)
		}
	}
}
