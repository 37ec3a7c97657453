package contract

import (
	"math/bits"
	"strings"
)

// Read lists the header names the bridge reads from an incoming message: the names an
// incoming header is compared with by [Lookalike], and the values of the header label of
// delaybridge_lookalike_headers_total. A header the contract adds to section 1, 9 or 11
// belongs here (TestReadListsEveryIncomingHeader checks the const block above).
var Read = []string{HeaderDelay, HeaderDeliverAt, HeaderTarget, HeaderID, HeaderExpires, HeaderEvery,
	HeaderMisfire, HeaderWindow, HeaderMaxWait, HeaderOrderingKey, HeaderKafkaKey, HeaderKafkaTombstone, HeaderHops}

// written are the contract's other header names (set by the bridge): an incoming header
// with exactly one of these names is not a look-alike either.
var written = []string{HeaderDue, HeaderSource, HeaderError, HeaderOriginalSize, HeaderRedrive}

// LookalikeDistance is the largest edit distance (insertions, deletions, substitutions)
// at which an incoming header name is taken for a misspelt contract header.
const LookalikeDistance = 2

// maxNameLen bounds the names of Read, for Lookalike's fixed-size rows.
const maxNameLen = 31

// readIndex is what Lookalike needs of Read, computed once: each name's character set
// and the bounds of their lengths.
var readIndex = func() (ix struct {
	masks          []uint64
	minLen, maxLen int
}) {
	ix.minLen = maxNameLen
	for _, n := range Read {
		ix.masks = append(ix.masks, charMask(n))
		ix.minLen, ix.maxLen = min(ix.minLen, len(n)), max(ix.maxLen, len(n))
	}
	return ix
}()

// Lookalike returns the name in [Read] that name resembles, "" when none: a name within
// [LookalikeDistance] edits of it, compared case-insensitively (ASCII), that is not
// itself a contract header name ("x-dealy" resembles "x-delay"; "X-Delay" and
// "x-delay-due" resemble nothing). When several are as near, the first in Read wins. It
// does not allocate, and a name of a length no contract name is near, or whose letters
// differ from every contract name's by more than the distance, costs no more than a pass
// over its bytes. Safe for concurrent use.
func Lookalike(name string) string {
	if len(name) < readIndex.minLen-LookalikeDistance || len(name) > readIndex.maxLen+LookalikeDistance {
		return ""
	}
	m := charMask(name)
	best, bestD := "", LookalikeDistance+1
	for i, n := range Read {
		if abs(len(name)-len(n)) > LookalikeDistance || bits.OnesCount64(m&^readIndex.masks[i]) > LookalikeDistance ||
			bits.OnesCount64(readIndex.masks[i]&^m) > LookalikeDistance {
			continue
		}
		if len(name) == len(n) && strings.EqualFold(name, n) {
			return "" // a contract name itself
		}
		d := distance(name, n, bestD-1)
		if d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	for _, w := range written {
		if strings.EqualFold(name, w) {
			return ""
		}
	}
	return best
}

// charMask is the set of (ASCII-lowered) bytes in s, folded into 64 bits. An edit adds at
// most one byte value and removes at most one, so names within d edits differ in at most
// d bits each way (a folded bit can only hide a difference, never make one).
func charMask(s string) uint64 {
	var m uint64
	for i := 0; i < len(s); i++ {
		m |= 1 << (lower(s[i]) % 64)
	}
	return m
}

// distance is the Levenshtein distance of a (any case) and n (lower case, at most
// maxNameLen bytes), or limit+1 when it exceeds limit. Only the band of cells within
// limit of the diagonal is computed, and it stops once a whole row exceeds limit.
func distance(a, n string, limit int) int {
	if abs(len(a)-len(n)) > limit {
		return limit + 1
	}
	const far = maxNameLen + 2 // beyond any distance computed here
	var rows [2][maxNameLen + 2]uint8
	prev, cur := &rows[0], &rows[1]
	for j := 0; j <= len(n); j++ {
		prev[j] = uint8(j)
	}
	for i := 1; i <= len(a); i++ {
		lo, hi := max(0, i-limit), min(len(n), i+limit)
		rowMin := uint8(far)
		if lo == 0 {
			cur[0], rowMin, lo = uint8(i), uint8(i), 1
		} else {
			cur[lo-1] = far
		}
		c := lower(a[i-1])
		for j := lo; j <= hi; j++ {
			v := prev[j-1]
			if c != n[j-1] {
				v = 1 + min(v, prev[j], cur[j-1])
			}
			cur[j] = v
			rowMin = min(rowMin, v)
		}
		if hi < len(n) {
			cur[hi+1] = far // read by the next row
		}
		if int(rowMin) > limit {
			return limit + 1
		}
		prev, cur = cur, prev
	}
	return min(int(prev[len(n)]), limit+1)
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
