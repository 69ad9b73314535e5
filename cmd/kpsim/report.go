package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/report"
)

func init() {
	register(command{
		name:  "report",
		usage: "RESULTS.json [MORE.json ...] [-o report.html] [--format html|md]",
		short: "turn results files into an HTML report (or a Markdown summary)",
		run:   runReport,
	})
}

func runReport(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("report", stderr)
	out := fs.String("o", "", "output file; '-' for standard output (default: next to the first results file for html, standard output for md)")
	format := fs.String("format", "html", "html (self-contained page with charts) or md (tables for a pull-request comment)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: kpsim report %s\n\nSeveral files are overlaid in one report, each labelled by what sets it apart.\n\n", commands["report"].usage)
		fs.PrintDefaults()
	}
	paths, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *format != "html" && *format != "md" {
		return usageError("--format %q: want html or md", *format)
	}
	if len(paths) == 0 {
		return usageError("want at least one results file")
	}
	files := make([]*results.File, len(paths))
	for i, p := range paths {
		if files[i], err = results.Read(p); err != nil {
			return usageError("%v", err)
		}
	}
	r, err := report.New(paths, files)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if *format == "md" {
		err = r.WriteMarkdown(&b)
	} else {
		err = r.WriteHTML(&b)
	}
	if err != nil {
		return err
	}
	dest := *out
	if dest == "" && *format == "html" {
		dest = strings.TrimSuffix(paths[0], ".json") + ".html"
	}
	if dest == "" || dest == "-" {
		_, err = stdout.Write(b.Bytes())
		return err
	}
	if err := os.WriteFile(dest, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	fmt.Fprintf(stdout, "report: %s\n", dest)
	return nil
}

// parseInterspersed parses flags wherever they appear among the positional
// arguments, which the flag package alone stops at. A "--" is kept as a
// positional separator rather than ending flag parsing.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if args[0] == "--" {
			pos = append(pos, "--")
			args = args[1:]
			continue
		}
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return nil, err
			}
			return nil, usageError("%v", err)
		}
		rest := fs.Args()
		// Parse ends at a positional argument, or after consuming a "--"
		// that followed a flag: keep that "--" as the separator it is.
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			pos = append(pos, "--")
		}
		args = rest
		if len(args) > 0 && args[0] != "--" {
			pos = append(pos, args[0])
			args = args[1:]
		}
	}
	return pos, nil
}
