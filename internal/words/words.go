// Package words says counts in English for what kvready prints: one helper
// for every plural, so that no message reads "1 leases".
package words

import "strconv"

// Count returns n followed by noun, singular when n is 1 and plural
// otherwise: Count(1, "lease") is "1 lease", Count(0, "lease") "0 leases".
// A noun whose plural is not noun+"s" passes its plural:
// Count(2, "fetch", "fetches").
func Count(n int, noun string, plural ...string) string {
	return strconv.Itoa(n) + " " + Noun(n, noun, plural...)
}

// Noun returns noun, or its plural when n is not 1 (noun+"s" unless plural
// is given).
func Noun(n int, noun string, plural ...string) string {
	if n == 1 {
		return noun
	}
	if len(plural) > 0 {
		return plural[0]
	}
	return noun + "s"
}
