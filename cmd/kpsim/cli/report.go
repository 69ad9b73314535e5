package cli

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/report"
)

func init() { register("report", newReportCommand) }

func newReportCommand() *cobra.Command {
	var out, format, align string
	c := &cobra.Command{
		Use:   "report RESULTS.json... [-o FILE] [--format html|md] [--align STEP]",
		Short: "turn results files into an HTML report (or a Markdown summary)",
		Long: `Turn results files into one self-contained HTML page with charts, or Markdown tables
for a pull-request comment. Several files are overlaid in one report, each labelled
by what sets it apart (a setting, the backend, the file name), each with its own
scenario steps marked. Runs of different lengths share one time axis; --align STEP
counts each run's time from its first step whose kind or label contains STEP
(--align restart: from restart-proxier), so that the runs line up at the event.

A sweep index ('kpsim sweep merge') is reported on its own: sync p99, disruption and
kernel writes against each swept axis, one line per mode, proxier or kernel, and every
cell with what became of it.`,
		Example: `  kpsim report out/smoke.json                       # writes out/smoke.html
  kpsim report out/legacy.json out/fixed.json -o out/restart.html
  kpsim report out/legacy.json out/fixed.json --align restart -o out/restart.html
  kpsim report out/smoke.json --format md > comment.md
  kpsim report out/sweep/restart-scale/index.json -o out/sweep/restart-scale/report.html`,
		RunE: func(cmd *cobra.Command, paths []string) error {
			return runReport(cmd, paths, out, format, align)
		},
		ValidArgsFunction: resultsFiles,
	}
	c.Flags().StringVarP(&out, "output", "o", "", "output `FILE`; '-' for standard output (default: next to the first results file for html, standard output for md)")
	c.Flags().StringVar(&format, "format", "html", "output format, `html|md`: html (self-contained page with charts) or md (tables for a pull-request comment)")
	c.Flags().StringVar(&align, "align", "", "count each run's time from its first step whose kind or label contains `STEP` (e.g. restart), instead of from its start")
	completeValues(c, "format", "html", "md")
	completeFiles(c, "output", "html", "md")
	return c
}

func runReport(cmd *cobra.Command, paths []string, out, format, align string) error {
	if format != "html" && format != "md" {
		return usageError("--format %q: want html or md", format)
	}
	if len(paths) == 0 {
		return badUsage("want at least one results file")
	}
	dest := out
	if dest == "" && format == "html" {
		dest = strings.TrimSuffix(paths[0], ".json") + ".html"
	}
	if slices.ContainsFunc(paths, sweepIndex) {
		if align != "" {
			return usageError("--align: a sweep report draws no time axis; it applies to results files")
		}
		return reportSweep(cmd, paths, dest, format)
	}
	var err error
	files := make([]*record.File, len(paths))
	for i, p := range paths {
		if files[i], err = results.Read(p); err != nil {
			return cmp.Or(notResults(p), usageError("%v", err))
		}
	}
	if dest != "" {
		if err := checkOutput("--output", dest); err != nil {
			return err
		}
	}
	r, err := report.New(paths, files)
	if err != nil {
		return err
	}
	if align != "" {
		if err := r.AlignAt(align); err != nil {
			return usageError("--align: %v", err)
		}
	}
	return writeReport(cmd, r, dest, format)
}

// writeReport writes a report (of runs or of a sweep) to dest, or to
// standard output when dest is "" or "-".
func writeReport(cmd *cobra.Command, r interface {
	WriteHTML(io.Writer) error
	WriteMarkdown(io.Writer) error
}, dest, format string) error {
	stdout := cmd.OutOrStdout()
	var b bytes.Buffer
	var err error
	if format == "md" {
		err = r.WriteMarkdown(&b)
	} else {
		err = r.WriteHTML(&b)
	}
	if err != nil {
		return err
	}
	if dest == "" || dest == "-" {
		_, err = stdout.Write(b.Bytes())
		return err
	}
	if err := results.WriteFile(dest, b.Bytes()); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	fmt.Fprintf(stdout, "report: %s\n", dest)
	return nil
}
