package conformance

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
)

// kube-proxy's whole ruleset, as kpsim's proxier writes it for a cluster
// that fills every set, and the sets it matches: written by
// go test ./proxier -run TestFullRuleset -update-rulesets.
//
//go:embed testdata/*.rules testdata/*.sets
var rulesets embed.FS

type ruleset struct {
	name   string
	family dataplane.Family
	rules  []byte
	sets   []dataplane.Set
}

func loadRulesets(t *testing.T, f dataplane.Family) []ruleset {
	t.Helper()
	names, err := rulesets.ReadDir("testdata")
	require.NoError(t, err)
	var out []ruleset
	for _, e := range names {
		base, ok := strings.CutSuffix(e.Name(), ".rules")
		if !ok || !strings.HasPrefix(base, "kube-proxy-"+string(f)+"-") {
			continue
		}
		rules, err := rulesets.ReadFile(path.Join("testdata", e.Name()))
		require.NoError(t, err)
		setText, err := rulesets.ReadFile(path.Join("testdata", base+".sets"))
		require.NoError(t, err)
		r := ruleset{name: base, family: f, rules: rules}
		sc := bufio.NewScanner(bytes.NewReader(setText))
		for sc.Scan() {
			name, typ, ok := strings.Cut(sc.Text(), " ")
			require.True(t, ok, "%s.sets: %q", base, sc.Text())
			r.sets = append(r.sets, dataplane.Set{Name: name, Type: dataplane.SetType(typ), Family: f, PortTo: 65535})
		}
		out = append(out, r)
	}
	require.NotEmpty(t, out, "no %s ruleset in testdata", f)
	return out
}

// withoutIPVSMatch drops the rules that need iptables' ipvs match.
func withoutIPVSMatch(payload []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.SplitAfter(string(payload), "\n") {
		if !strings.Contains(l, " -m ipvs ") {
			b.WriteString(l)
		}
	}
	return b.Bytes()
}

// savedRules returns each chain's rule lines of a table exactly as Save
// printed them (the text after "-A CHAIN "), and requires that each is
// already in canonical form: what a kernel prints is what the in-memory
// kernel must print.
func savedRules(t *testing.T, ipt dataplane.IPTables, f dataplane.Family, table string) map[string][]string {
	t.Helper()
	out, err := ipt.Save(f, table)
	require.NoError(t, err)
	rules := map[string][]string{}
	for _, l := range strings.Split(string(out), "\n") {
		chain, text, canon, ok := ruleLine(t, f, "-A ", l)
		if !ok {
			continue
		}
		require.Equal(t, canon, text, "%s %s: a saved rule not in the form iptables-save prints", f, table)
		rules[chain] = append(rules[chain], text)
	}
	return rules
}

// ruleLine reads a line "CMD CHAIN RULE": the chain, the rule as written and
// in canonical form; ok is false for a line of another command.
func ruleLine(t *testing.T, f dataplane.Family, cmd, line string) (chain, text, canon string, ok bool) {
	t.Helper()
	rest, ok := strings.CutPrefix(line, cmd)
	if !ok {
		return "", "", "", false
	}
	chain, text, _ = strings.Cut(rest, " ")
	canon, err := dataplane.CanonicalRuleText(f, text)
	require.NoError(t, err)
	return chain, text, canon, true
}

// runRulesets restores kube-proxy's whole ruleset and reads it back: every
// chain holds the rules written, as iptables-save prints them, and the
// built-in chains the jumps into them.
func runRulesets(t *testing.T, newDataplane func(t *testing.T) dataplane.Dataplane, have Capabilities, f dataplane.Family) {
	for _, typ := range []dataplane.SetType{dataplane.HashIP, dataplane.HashIPPort, dataplane.HashIPPortIP, dataplane.HashIPPortNet, dataplane.BitmapPort} {
		have.need(t, "ipset:"+string(typ), have.hasSet(typ))
	}
	for _, r := range loadRulesets(t, f) {
		t.Run(r.name, func(t *testing.T) {
			dp := newDataplane(t)
			for _, s := range r.sets {
				require.NoError(t, dp.IPSet.CreateSet(s))
			}
			payload := r.rules
			if !have.IPVSMatch {
				t.Logf("without the KUBE-IPVS-OUT-FILTER rules: %s", have.reason("ipvs-match"))
				payload = withoutIPVSMatch(payload)
			}
			require.NoError(t, dp.IPTables.Restore(f, payload))
			written, err := dataplane.ParseSave(f, payload)
			require.NoError(t, err)
			jumps := jumpRules(t, f, payload)
			for _, table := range []string{"nat", "filter"} {
				got := savedRules(t, dp.IPTables, f, table)
				for chain := range written[table].Chains {
					require.Equal(t, written[table].Rules[chain], got[chain], "%s %s chain %s", f, table, chain)
				}
				for chain, want := range jumps[table] {
					require.ElementsMatch(t, want, got[chain], "%s %s: the jumps in built-in chain %s", f, table, chain)
				}
			}
		})
	}
}

// jumpRules are a payload's "-I CHAIN ..." lines by table and chain, canonical.
func jumpRules(t *testing.T, f dataplane.Family, payload []byte) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	table := ""
	for _, l := range strings.Split(string(payload), "\n") {
		if strings.HasPrefix(l, "*") {
			table = l[1:]
			out[table] = map[string][]string{}
		}
		if chain, _, canon, ok := ruleLine(t, f, "-I ", l); ok {
			out[table][chain] = append(out[table][chain], canon)
		}
	}
	return out
}

// runSaveForms restores each spelling of SaveForms and requires Save to
// print it as the kernels do.
func runSaveForms(t *testing.T, newDataplane func(t *testing.T) dataplane.Dataplane, have Capabilities, f dataplane.Family) {
	have.need(t, "ipset:"+string(dataplane.HashIP), have.hasSet(dataplane.HashIP))
	dp := newDataplane(t)
	require.NoError(t, dp.IPSet.CreateSet(dataplane.Set{Name: SaveFormSet, Type: dataplane.HashIP, Family: f}))
	const chain = "KPSIM-FORMS"
	for _, tc := range SaveForms {
		if tc.Family != f {
			continue
		}
		t.Run(tc.In, func(t *testing.T) {
			if tc.IPVSMatch {
				have.need(t, "ipvs-match", have.IPVSMatch)
			}
			table := tc.Table
			if table == "" {
				table = "filter"
			}
			payload := fmt.Sprintf("*%s\n:%s - [0:0]\n-A %s %s\nCOMMIT\n", table, chain, chain, tc.In)
			require.NoError(t, dp.IPTables.Restore(f, []byte(payload)))
			out, err := dp.IPTables.Save(f, table)
			require.NoError(t, err)
			var got []string
			for _, l := range strings.Split(string(out), "\n") {
				if rest, ok := strings.CutPrefix(l, "-A "+chain+" "); ok {
					got = append(got, rest)
				}
			}
			require.Equal(t, []string{tc.Saved}, got, "saved:\n%s", out)
		})
	}
}
