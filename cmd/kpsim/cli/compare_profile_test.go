package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/sim"
)

// Two cost profiles are compared price by price: a profile against itself
// holds every price; one whose nft-map-rule price moved by 20% and which
// lacks a listing's price differs at --threshold 15, names the price, and
// counts it under nft; at --threshold 25 it does not differ.
func TestCompareProfiles(t *testing.T) {
	dir := t.TempDir()
	host, err := sim.LoadProfile("host")
	require.NoError(t, err)
	write := func(name string, p *sim.Profile) string {
		b, err := json.Marshal(p)
		require.NoError(t, err)
		path := filepath.Join(dir, name+".json")
		require.NoError(t, os.WriteFile(path, b, 0o644))
		return path
	}
	base := write("base", host)
	host.Name = "moved"
	host.Ops["nft-map-rule"] *= 1.2
	delete(host.Ops, "nft-list")
	moved := write("moved", host)
	prices := len(host.Prices())

	runCases(t, []cliCase{
		{name: "itself", args: []string{"compare", base, base}, stdout: []string{"1.00", "prices in both within 10%"}},
		{name: "a price moved", args: []string{"compare", "--threshold", "15", base, moved}, code: 1,
			stdout: []string{"ops.nft-map-rule", "1.20  moved", "ops.nft-list ", "only in one", "in one profile only"},
			stderr: "1 prices moved by more than 15%: ops.nft-map-rule"},
		{name: "within a wider threshold", args: []string{"compare", "--threshold", "25", base, moved}, stdout: []string{"within 25%"}},
		{name: "a profile against results", args: []string{"compare", base, "--", filepath.Join("testdata", "missing.json")}, code: 2,
			stderr: "cost profiles are compared one against one"},
		{name: "as markdown", args: []string{"compare", "--format", "md", base, moved}, code: 2, stderr: "compared as text"},
	})
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"compare", "--threshold", "15", base, moved}, &out, &errb))
	m := regexp.MustCompile(`nft (\d+) of (\d+)`).FindStringSubmatch(out.String())
	require.NotNil(t, m, "the summary counts by kind:\n%s", out.String())
	within, all := atoi(t, m[1]), atoi(t, m[2])
	require.Equal(t, all-1, within, "one nft price moved")
	require.Equal(t, prices+1+2, bytes.Count(out.Bytes(), []byte("\n")), "a line per price (one only in base), a header and the summary")
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
