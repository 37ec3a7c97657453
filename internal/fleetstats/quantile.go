package fleetstats

import (
	"math"
	"sort"
)

// Quantile reads quantile q (ms) of a histogram given as cumulative counts by bucket upper
// bound (seconds; +Inf for the last) and its count, interpolating within a bucket as
// Prometheus' histogram_quantile does, but never above maxMs, the largest observation (when
// known): interpolation assumes observations spread up to the bucket's bound, and 5.8 s in
// the (5 s, 10 s] bucket would read as 9.2 s. The +Inf bucket reads as maxMs too (else as
// its lower bound). nil when count is 0.
func Quantile(cum map[float64]uint64, count uint64, q float64, maxMs *float64) *float64 {
	if count == 0 {
		return nil
	}
	rank := q * float64(count)
	lo, below := 0.0, uint64(0)
	for _, le := range sortedKeys(cum) {
		if float64(cum[le]) >= rank {
			v := le
			if n := cum[le] - below; n > 0 && !math.IsInf(le, 1) {
				v = lo + (le-lo)*(rank-float64(below))/float64(n)
			} else if math.IsInf(le, 1) {
				v = lo
			}
			v *= 1000
			if maxMs != nil && (v > *maxMs || math.IsInf(le, 1)) {
				v = *maxMs
			}
			return &v
		}
		lo, below = le, cum[le]
	}
	return nil
}

func sortedKeys[V any](m map[float64]V) []float64 {
	les := make([]float64, 0, len(m))
	for le := range m {
		les = append(les, le)
	}
	sort.Float64s(les)
	return les
}
