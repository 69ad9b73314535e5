package scenarios

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/kpsim/kpsim/results"
)

// PerService is how many of something (ports, endpoints) each generated
// service has: one number for every service (`endpointsPerService: 2`), or
// weights per number (`endpointsPerService: {1: 40, 2: 30, 5: 20, 20: 10}`),
// from which each service draws its own from the seed. Real clusters mix:
// in nftables mode a service of one endpoint has a DNAT rule without a map
// and one of several a rule with a map of its own, priced very differently.
type PerService struct {
	// Values are the numbers, ascending; Weights their shares, summing to 1.
	// One value is every service's.
	Values  []int
	Weights []float64
}

// Fixed is one number for every service.
func Fixed(n int) PerService { return PerService{Values: []int{n}, Weights: []float64{1}} }

// One returns every service's number when there is one, and whether there is.
func (p PerService) One() (int, bool) {
	if len(p.Values) == 1 {
		return p.Values[0], true
	}
	return 0, false
}

// Mean is the number a service has on average.
func (p PerService) Mean() float64 {
	var m float64
	for i, v := range p.Values {
		m += float64(v) * p.Weights[i]
	}
	return m
}

// Max is the most any service has.
func (p PerService) Max() int {
	if len(p.Values) == 0 {
		return 0
	}
	return p.Values[len(p.Values)-1]
}

// Median is the number at least half the services have at most.
func (p PerService) Median() int {
	var cum float64
	for i, w := range p.Weights {
		if cum += w; cum >= 0.5 {
			return p.Values[i]
		}
	}
	return p.Max()
}

// Bound bounds the sum of n services' numbers: their mean and drawSigmas
// standard deviations of a sum of n draws, at most n times the largest
// number (n times the number, when every service has the one).
func (p PerService) Bound(n float64) float64 {
	if n <= 0 {
		return 0
	}
	mean, variance := p.Mean(), 0.0
	for i, v := range p.Values {
		variance += p.Weights[i] * (float64(v) - mean) * (float64(v) - mean)
	}
	return min(n*float64(p.Max()), math.Ceil(n*mean+drawSigmas*math.Sqrt(n*variance)))
}

// Of is the number with its noun, for messages: "2 endpoints", "{1: 40%,
// 20: 60%} endpoints".
func (p PerService) Of(one, many string) string {
	if n, ok := p.One(); ok {
		return fmt.Sprintf("%d %s", n, results.Plural(n, one, many))
	}
	return p.String() + " " + many
}

// Draw is one service's number. One number for every service draws
// nothing from r, so that a scenario's objects do not change with the form
// its numbers are written in.
func (p PerService) Draw(r *rand.Rand) int {
	if n, ok := p.One(); ok {
		return n
	}
	x := r.Float64()
	for i, w := range p.Weights {
		if x < w {
			return p.Values[i]
		}
		x -= w
	}
	return p.Max()
}

// String is the form it is written in: "2", or "{1: 40%, 20: 60%}".
func (p PerService) String() string {
	if n, ok := p.One(); ok {
		return strconv.Itoa(n)
	}
	parts := make([]string, len(p.Values))
	for i, v := range p.Values {
		parts[i] = fmt.Sprintf("%d: %.3g%%", v, 100*p.Weights[i])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// MarshalJSON writes one number as a number (as results files have always
// recorded it) and weights as a map of each number's share.
func (p PerService) MarshalJSON() ([]byte, error) {
	if n, ok := p.One(); ok {
		return json.Marshal(n)
	}
	m := make(map[string]float64, len(p.Values))
	for i, v := range p.Values {
		m[strconv.Itoa(v)] = p.Weights[i]
	}
	return json.Marshal(m)
}

func (p *PerService) decodeNode(d *decoder, n *yaml.Node, path string) error {
	if n.Kind != yaml.MappingNode {
		var v int
		if err := d.decode(n, &v, path); err != nil {
			return err
		}
		*p = Fixed(v)
		return nil
	}
	type weight struct {
		value int
		w     float64
	}
	var ws []weight
	var sum float64
	var errs Errors
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		v, err := strconv.Atoi(k.Value)
		if k.Kind != yaml.ScalarNode || err != nil || v < 0 {
			errs = appendErr(errs, d.errAt(k, path, "keys are numbers of a service's (0 or more), each with its weight, e.g. {1: 40, 2: 30, 20: 30}; got %s", Describe(k)))
			continue
		}
		if slices.ContainsFunc(ws, func(w weight) bool { return w.value == v }) {
			errs = appendErr(errs, d.errAt(k, path, "%d given twice", v))
			continue
		}
		var w float64
		if err := d.decode(val, &w, fmt.Sprintf("%s.%d", path, v)); err != nil {
			errs = appendErr(errs, err)
			continue
		}
		if w < 0 {
			errs = appendErr(errs, d.errAt(val, fmt.Sprintf("%s.%d", path, v), "a weight must not be negative, got %v", w))
			continue
		}
		ws = append(ws, weight{v, w})
		sum += w
	}
	if len(errs) > 0 {
		return errs
	}
	if sum <= 0 {
		return d.errAt(n, path, "give at least one number a weight above 0")
	}
	slices.SortFunc(ws, func(a, b weight) int { return a.value - b.value })
	*p = PerService{}
	for _, w := range ws {
		if w.w > 0 {
			p.Values = append(p.Values, w.value)
			p.Weights = append(p.Weights, w.w/sum)
		}
	}
	return nil
}
