package report

import (
	"math"
	"slices"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
)

// opsChart is kernel write operations by kind, stacked by phase (one run)
// or grouped by run (several).
func opsChart(runs []*run, phases []string) (chart, error) {
	ch := chart{ID: "kernel-ops", Title: "Kernel write operations by kind (counted)",
		Caption: "Every write the proxier issued, by operation kind; one bar per kind split by the phase that issued it. Look for deletes matched by adds of the same kind: work undone and redone."}
	var kinds []dataplane.Op
	for _, op := range dataplane.AllOps() {
		if !op.IsWrite() {
			continue
		}
		for _, r := range runs {
			if r.File.Totals.Ops[op] != 0 || phaseOpsTotal(r.File, op) != 0 {
				kinds = append(kinds, op)
				break
			}
		}
	}
	if len(kinds) == 0 {
		ch.NoData = "No data: the run issued no kernel writes."
		return ch, nil
	}
	// Horizontal bars: operation names are long, and read best level. The
	// first kind goes on top, so the list reads in the usual order.
	slices.Reverse(kinds)
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.String()
	}
	p := newPlot("operations", "")
	countAxis(&p.X)
	rowH := vg.Points(22)
	height := rowH*vg.Length(len(kinds)) + vg.Inch
	groupW := rowH * 0.75
	if len(runs) == 1 && phased(runs[0].File) {
		r := runs[0]
		var below *plotter.BarChart
		for j, ph := range phases {
			vals := make(plotter.Values, len(kinds))
			for i, k := range kinds {
				for _, s := range r.File.Syncs {
					for _, sp := range s.Phases {
						if sp.Name == ph {
							vals[i] += float64(sp.Ops[k])
						}
					}
				}
			}
			b, err := plotter.NewBarChart(vals, groupW)
			if err != nil {
				return ch, err
			}
			b.Horizontal = true
			b.Color = colorOf(j)
			b.LineStyle.Width = 0
			if below != nil {
				b.StackOn(below)
			}
			below = b
			p.Add(b)
			ch.Legend = append(ch.Legend, legendItem{Label: ph, Color: hexColor(colorOf(j)), Style: "box"})
		}
	} else {
		w := groupW / vg.Length(len(runs))
		for i, r := range runs {
			vals := make(plotter.Values, len(kinds))
			for j, k := range kinds {
				vals[j] = float64(r.File.Totals.Ops[k])
			}
			b, err := plotter.NewBarChart(vals, w)
			if err != nil {
				return ch, err
			}
			b.Horizontal = true
			b.Color = r.Color
			b.LineStyle.Width = 0
			// Top to bottom in run order.
			b.Offset = (vg.Length(len(runs)-1)/2 - vg.Length(i)) * w
			p.Add(b)
			ch.Legend = append(ch.Legend, legendItem{Label: r.Label, Color: hexColor(r.Color), Style: "box"})
		}
		ch.Caption = "Every write each run issued, by operation kind, one bar per run. Look for kinds where one run issues far more: deletes and re-adds a better proxier avoids."
		if len(runs) == 1 {
			ch.Caption = "Every write the proxier issued, by operation kind. " + notPhased(runs) + " Look for deletes matched by adds of the same kind: work undone and redone."
		}
	}
	p.NominalY(names...)
	top := 0.0
	for _, r := range runs {
		for _, k := range kinds {
			top = math.Max(top, float64(max(r.File.Totals.Ops[k], phaseOpsTotal(r.File, k))))
		}
	}
	p.X.Min, p.X.Max = 0, top*1.05
	var err error
	ch.SVG, err = render(p, ch.Title, height)
	return ch, err
}

func phaseOpsTotal(f *record.File, op dataplane.Op) int64 {
	var n int64
	for _, s := range f.Syncs {
		for _, p := range s.Phases {
			n += p.Ops[op]
		}
	}
	return n
}
