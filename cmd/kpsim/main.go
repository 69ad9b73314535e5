// Command kpsim runs kube-proxy IPVS scenarios against an in-memory or a real
// kernel, and turns their results files into reports and comparisons.
//
// Each subcommand lives in its own file and adds itself to the table with
// register; main only dispatches. Exit status: 0 success, 1 a verdict said no
// (a regression, a difference), 2 bad usage or input, 3 the run failed.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand.
type command struct {
	name  string
	usage string // one line: arguments
	short string // one line: what it does
	run   func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

// exitError carries an exit status other than the defaults.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks bad arguments or input (exit 2).
func usageError(format string, a ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, a...)}
}

// verdict marks a negative answer such as a regression or a difference (exit 1)
// that has already been printed.
func verdict(format string, a ...any) error {
	return &exitError{code: 1, err: fmt.Errorf(format, a...)}
}

// newFlags returns a flag set for a subcommand that reports errors instead of exiting.
func newFlags(c string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("kpsim "+c, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kpsim: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return 2
	}
	err := c.run(args[1:], stdout, stderr)
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "kpsim %s: %v\n", c.name, err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 3
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: kpsim COMMAND [ARGS]")
	fmt.Fprintln(w)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := commands[n]
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.short)
	}
	fmt.Fprintln(w, "\nRun 'kpsim COMMAND -h' for a command's flags.")
}
