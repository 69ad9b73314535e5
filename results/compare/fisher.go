package compare

import "math"

// fisherExact is the two-sided p-value of Fisher's exact test on the 2x2
// table [a b; c d] (here: failed and succeeded probe attempts of base and
// head): the probability, with the margins fixed, of a table at most as
// likely as the one observed. Within [0, 1].
func fisherExact(a, b, c, d int) float64 {
	if a < 0 || b < 0 || c < 0 || d < 0 {
		return math.NaN()
	}
	row1, col1, n := a+b, a+c, a+b+c+d
	if n == 0 || row1 == 0 || row1 == n || col1 == 0 || col1 == n {
		return 1 // a margin is empty: every table is the observed one
	}
	lf := func(k int) float64 { v, _ := math.Lgamma(float64(k) + 1); return v }
	// log P(x) for the table whose top-left cell is x.
	logP := func(x int) float64 {
		return lf(row1) + lf(n-row1) + lf(col1) + lf(n-col1) - lf(n) - lf(x) - lf(row1-x) - lf(col1-x) - lf(n-row1-col1+x)
	}
	observed := logP(a)
	// Tables as likely as the observed one up to rounding count as at most as likely.
	limit := observed + 1e-7
	p := 0.0
	for x := max(0, row1+col1-n); x <= min(row1, col1); x++ {
		if lp := logP(x); lp <= limit {
			p += math.Exp(lp)
		}
	}
	return min(1, p)
}
