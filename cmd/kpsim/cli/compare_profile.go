package cli

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/sim"
)

// costProfile says whether path is a cost profile (kpsim calibrate's).
func costProfile(path string) bool {
	_, err := sim.LoadProfile(path)
	return err == nil
}

// compareProfiles compares two cost profiles price by price: each price's
// base and head and their ratio; a price that moved by more than
// --threshold percent either way is a difference (exit 1): whether two
// calibrations of one machine agree, or what changed on a node.
func compareProfiles(cmd *cobra.Command, f compareFlags, basePaths, headPaths []string) error {
	if len(basePaths) != 1 || len(headPaths) != 1 {
		return badUsage("cost profiles are compared one against one: kpsim compare BASE-PROFILE.json HEAD-PROFILE.json")
	}
	profiles := make([]*sim.Profile, 2)
	for i, p := range []string{basePaths[0], headPaths[0]} {
		var err error
		if profiles[i], err = sim.LoadProfile(p); err != nil {
			return badUsage("%s is not a cost profile: cost profiles are compared one against one: kpsim compare BASE-PROFILE.json HEAD-PROFILE.json", p)
		}
	}
	if f.format != "text" {
		return usageError("--format %s: cost profiles are compared as text", f.format)
	}
	b, h := profiles[0].Prices(), profiles[1].Prices()
	var names []string
	for k := range b {
		names = append(names, k)
	}
	for k := range h {
		if _, ok := b[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	width := len("price")
	for _, k := range names {
		width = max(width, len(k))
	}
	limit := 1 + f.o.Threshold/100
	var out bytes.Buffer
	var moved, only []string
	fmt.Fprintf(&out, "%-*s %12s %12s %10s\n", width, "price", filepath.Base(basePaths[0]), filepath.Base(headPaths[0]), "head/base")
	for _, k := range names {
		bv, inBase := b[k]
		hv, inHead := h[k]
		ratio, mark := "", ""
		switch {
		case !inBase || !inHead:
			only = append(only, k)
			mark = "only in one"
		case bv == hv:
			ratio = "1.00"
		case bv == 0 || hv == 0:
			ratio, mark = "-", "moved"
			moved = append(moved, k)
		default:
			r := hv / bv
			ratio = fmt.Sprintf("%.2f", r)
			if math.Max(r, 1/r) > limit {
				mark = "moved"
				moved = append(moved, k)
			}
		}
		fmt.Fprintf(&out, "%-*s %12s %12s %10s  %s\n", width, k, price(bv, inBase), price(hv, inHead), ratio, mark)
	}
	fmt.Fprintf(&out, "%d of %d prices in both within %g%%", len(names)-len(only)-len(moved), len(names)-len(only), f.o.Threshold)
	if len(only) > 0 {
		fmt.Fprintf(&out, "; %d in one profile only", len(only))
	}
	// What held, by what it prices: a calibration measures each kind
	// apart, and one kind can repeat where another does not.
	inBoth, held := map[string]int{}, map[string]int{}
	for _, k := range names {
		if !slices.Contains(only, k) {
			inBoth[priceGroup(k)]++
			if !slices.Contains(moved, k) {
				held[priceGroup(k)]++
			}
		}
	}
	var each []string
	for _, g := range slices.Sorted(maps.Keys(inBoth)) {
		each = append(each, fmt.Sprintf("%s %d of %d", g, held[g], inBoth[g]))
	}
	fmt.Fprintf(&out, ": %s\n", strings.Join(each, ", "))
	if f.out != "" {
		if err := results.WriteFile(f.out, out.Bytes()); err != nil {
			return fmt.Errorf("write comparison: %w", err)
		}
	} else if _, err := cmd.OutOrStdout().Write(out.Bytes()); err != nil {
		return err
	}
	if len(moved) > 0 {
		return verdict("%d prices moved by more than %g%%: %s", len(moved), f.o.Threshold, strings.Join(clipNames(moved), ", "))
	}
	return nil
}

// price writes a price in seconds with three figures in a unit that suits
// it, or "-" where the profile has none: prices go down to hundredths of a
// nanosecond, which results.FormatSeconds rounds to whole ones.
func price(v float64, ok bool) string {
	switch {
	case !ok:
		return "-"
	case v == 0:
		return "0"
	case v < 1e-6:
		return fmt.Sprintf("%.3g ns", v*1e9)
	case v < 1e-3:
		return fmt.Sprintf("%.3g us", v*1e6)
	case v < 1:
		return fmt.Sprintf("%.3g ms", v*1e3)
	}
	return fmt.Sprintf("%.3g s", v)
}

// priceGroup is the kind of operation a price is for: the first word of
// its operation's name ("nft" for ops.nft-command and nft_map_rule.per_map,
// "ipset" for ipset.netlink.per_entry, "proxier", "releases").
func priceGroup(key string) string {
	parts := strings.Split(key, ".")
	name := parts[0]
	if len(parts) > 1 && (name == "ops" || name == "list_item" || name == "list_pairs") {
		name = parts[1]
	}
	if i := strings.IndexAny(name, "-_"); i > 0 {
		name = name[:i]
	}
	return name
}
