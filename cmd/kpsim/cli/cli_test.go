package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryCommandHelp checks that every command's help reads alike: a
// synopsis, examples, a usage line whose flags are the command's own flags
// in the --flag spelling the flag list uses, and never Go's bare
// "Usage of ..." (doctor, calibrate and clean printed it before).
func TestEveryCommandHelp(t *testing.T) {
	flagWord := regexp.MustCompile(`(?:^|[\s\[|])(--?[a-zA-Z][-a-zA-Z]*)`)
	for name := range commands {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			require.Equal(t, 0, run([]string{name, "--help"}, &out, &errb), errb.String())
			help := out.String()
			require.NotContains(t, help, "Usage of")
			require.Contains(t, help, "Usage:\n  kpsim "+name)
			require.Contains(t, help, "Examples:\n  ")
			require.NotContains(t, help, "[flags]", "the usage line spells out its flags")

			c := commands[name]()
			usage := help[strings.Index(help, "Usage:"):strings.Index(help, "Examples:")]
			for _, m := range flagWord.FindAllStringSubmatch(usage, -1) {
				f := m[1]
				if f == "--" {
					continue
				}
				if long, ok := strings.CutPrefix(f, "--"); ok {
					require.NotNil(t, c.Flags().Lookup(long), "usage line names %s, which %s does not have", f, name)
					continue
				}
				short := strings.TrimPrefix(f, "-")
				require.Len(t, short, 1, "usage line spells %s with one dash: long flags take two", f)
				require.NotNil(t, c.Flags().ShorthandLookup(short), "usage line names %s, which %s does not have", f, name)
			}
		})
	}
}

// TestUsageErrors: a wrong command line exits 2 and points at --help; a bad
// input also exits 2 but says only what is wrong with it.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"doctor", "-require", "kernel"}, "long flags take two dashes: --require"},
		{[]string{"calibrate", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"clean", "extra"}, "unexpected arguments"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"run", "--set"}, "flag needs an argument"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			require.Equal(t, 2, run(tc.args, &out, &errb))
			require.Contains(t, errb.String(), tc.want)
			require.Contains(t, errb.String(), "--help' for usage.")
			require.NotContains(t, errb.String(), "Usage of")
		})
	}
	var out, errb bytes.Buffer
	require.Equal(t, 2, run([]string{"run", "-s", "nope"}, &out, &errb))
	require.Contains(t, errb.String(), `scenario "nope": no such file`)
	require.NotContains(t, errb.String(), "--help", "a bad input is not a usage mistake")
	errb.Reset()
	require.Equal(t, 2, run([]string{"calibrate", "--skip", "ipvs,foo"}, &out, &errb))
	require.Contains(t, errb.String(), "--skip foo: one of ipvs, nftables, conntrack")
}

func TestVersionCommand(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"version"}, &out, &errb), errb.String())
	b := buildInfo()
	require.Equal(t, "kpsim "+b.Version+"\ncommit "+b.Commit+"\ngo "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\nproxiers kpsim\n", out.String())

	out.Reset()
	require.Equal(t, 0, run([]string{"version", "--json"}, &out, &errb), errb.String())
	var v struct {
		Version, Commit, Go string
		Proxiers            []string
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &v))
	require.Equal(t, []string{"kpsim"}, v.Proxiers)
	require.Equal(t, b.Version, v.Version)
	require.Equal(t, b.Commit, v.Commit)
	require.True(t, strings.HasPrefix(v.Go, runtime.Version()))
}

// TestCompletion asks cobra's completion machinery what the shell would
// offer, and checks kpsim's own completions are wired in.
func TestCompletion(t *testing.T) {
	complete := func(args ...string) []string {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(append([]string{"__complete"}, args...), &out, &errb), errb.String())
		var words []string
		for _, l := range strings.Split(out.String(), "\n") {
			if l != "" && !strings.HasPrefix(l, ":") {
				words = append(words, strings.SplitN(l, "\t", 2)[0])
			}
		}
		return words
	}
	require.Contains(t, complete("run", "-s", "sm"), "smoke")
	require.Contains(t, complete("validate", "restart"), "restart-stale-ipsets")
	require.Contains(t, complete("validate", "-s", "sm"), "smoke")
	require.Contains(t, complete("run", "--set", ""), "proxier.initialSync=")
	require.Equal(t, []string{"IPv4", "IPv6", "dual"}, complete("state", "--family", ""))
	require.True(t, slices.Contains(complete(""), "version"))

	for _, shell := range []string{"bash", "zsh", "fish"} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run([]string{"completion", shell}, &out, &errb), errb.String())
		require.Contains(t, out.String(), "kpsim")
	}
}
