package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readmeCheck is a passage of README.md between
//
//	<!-- readme-check: kpsim ARGS... -->  and  <!-- /readme-check -->
//
// whose lines are quoted from what that command prints: the command is run
// and every quoted line must be one it printed. Lines of a fenced block's
// fences, blank lines and the "$ ..." line that shows the command are not
// output. `kpsim sweep SPEC` stands for `make sweep SPEC=SPEC`, whose
// report is quoted as Markdown.
type readmeCheck struct {
	args  []string
	lines []string
	line  int // of the opening marker in README.md
}

var readmeCheckRE = regexp.MustCompile(`(?s)<!-- readme-check: kpsim ([^>]*?) -->\n(.*?)<!-- /readme-check -->`)

func readmeChecks(t *testing.T, readme string) []readmeCheck {
	t.Helper()
	var out []readmeCheck
	for _, m := range readmeCheckRE.FindAllStringSubmatchIndex(readme, -1) {
		c := readmeCheck{args: strings.Fields(readme[m[2]:m[3]]), line: 1 + strings.Count(readme[:m[0]], "\n")}
		for _, l := range strings.Split(readme[m[4]:m[5]], "\n") {
			switch l = strings.TrimSpace(l); {
			case l == "", strings.HasPrefix(l, "```"):
			case strings.HasPrefix(l, "$ "):
				require.Equal(t, "bin/kpsim "+strings.Join(c.args, " "), l[2:], "README.md:%d shows another command than it checks", c.line)
			default:
				c.lines = append(c.lines, l)
			}
		}
		require.NotEmpty(t, c.lines, "README.md:%d quotes nothing", c.line)
		out = append(out, c)
	}
	return out
}

// normalize collapses runs of spaces, as tabwriter aligns them.
func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestREADMEFiguresComeFromRuns runs the commands whose output README.md
// quotes and checks every quoted line, so that its figures cannot drift
// from what kpsim prints.
func TestREADMEFiguresComeFromRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the README's scenarios and sweep: skipped with -short")
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	require.NoError(t, err)
	checks := readmeChecks(t, string(readme))
	require.GreaterOrEqual(t, len(checks), 3, "the incident, the fix and the sweep")
	for _, c := range checks {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var got string
			if c.args[0] == "sweep" {
				got = sweepReport(t, c.args[1])
			} else {
				require.Equal(t, "run", c.args[0], "README.md:%d: a checked command is kpsim run or kpsim sweep", c.line)
				out, errb, code := kpsimRun(t, append(c.args, "-o", filepath.Join(t.TempDir(), "r.json"))...)
				require.Equal(t, 0, code, errb)
				got = out
			}
			printed := map[string]bool{}
			for _, l := range strings.Split(got, "\n") {
				printed[normalize(l)] = true
			}
			for _, l := range c.lines {
				require.True(t, printed[normalize(l)], "README.md:%d quotes a line kpsim %s does not print:\n  %s\nit printed:\n%s",
					c.line, strings.Join(c.args, " "), l, got)
			}
		})
	}
}

// sweepReport runs a sweep spec as make sweep does (plan, every cell,
// merge) and returns its Markdown report.
func sweepReport(t *testing.T, spec string) string {
	t.Helper()
	t.Setenv("KPSIM_TEST_MAIN", "1") // the cells' runs are this test binary as kpsim (see TestMain)
	spec = filepath.Join("..", "..", "..", spec)
	out := t.TempDir()
	_, errb, code := kpsimRun(t, "sweep", "plan", spec, "-o", filepath.Join(out, "plan.json"))
	require.Equal(t, 0, code, errb)
	names, errb, code := kpsimRun(t, "sweep", "plan", spec, "--format", "names")
	require.Equal(t, 0, code, errb)
	cells := filepath.Join(out, "cells")
	require.NoError(t, os.Mkdir(cells, 0o755))
	for _, cell := range strings.Fields(names) {
		_, errb, code := kpsimRun(t, "sweep", "run", spec, cell, "-o", cells)
		require.Equal(t, 0, code, errb)
	}
	index := filepath.Join(out, "index.json")
	_, errb, code = kpsimRun(t, "sweep", "merge", out, "-o", index)
	require.Equal(t, 0, code, errb)
	md, errb, code := kpsimRun(t, "report", index, "--format", "md")
	require.Equal(t, 0, code, errb)
	return md
}
