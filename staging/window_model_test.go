package staging

// The independent model of windowed readiness, written from the rule in words
// and nothing of the package's arithmetic: a request resuming at block end E
// (history E·T tokens) computes the token at position E·T next, which attends
// the W positions ending at itself, so it reads every cached position from
// E·T−W+1 up; a block is read when it holds one of them, or is one of the
// sinks. Full attention reads every block below E. Every check is a plain loop.

// modelReads reports whether a request resuming at block end e reads block b
// of a group with attention a, at tpb tokens per block.
func modelReads(a Attention, tpb, e, b int) bool {
	if b < 0 || b >= e {
		return false
	}
	if a.Window == 0 || b < a.SinkBlocks {
		return true
	}
	firstRead := e*tpb - a.Window + 1 // the lowest position the next token attends
	for pos := b * tpb; pos < (b+1)*tpb; pos++ {
		if pos >= firstRead {
			return true
		}
	}
	return false
}

// modelArrived reports whether block b of group g arrived, arrived[g][i] being
// block first+i.
func modelArrived(arrived [][]bool, first, g, b int) bool {
	i := b - first
	return i >= 0 && i < len(arrived[g]) && arrived[g][i]
}

// modelResumable reports whether every group has, among the known blocks
// (below first) and the arrived ones, every block a resume at e reads.
func modelResumable(tpb, first int, groups []Attention, arrived [][]bool, e int) bool {
	for g := range arrived {
		a := Full
		if g < len(groups) {
			a = groups[g]
		}
		for b := first; b < e; b++ {
			if modelReads(a, tpb, e, b) && !modelArrived(arrived, first, g, b) {
				return false
			}
		}
	}
	return true
}

// modelInterval is the interval the rule gives: usable_until is the largest
// resumable end up to the longest arrival list (else first), and the floor is
// usable_until when some group does not read a block below it, else 0.
func modelInterval(tpb, first int, groups []Attention, arrived [][]bool) Interval {
	longest := 0
	for _, a := range arrived {
		longest = max(longest, len(a))
	}
	best := first
	for e := first + 1; e <= first+longest; e++ {
		if modelResumable(tpb, first, groups, arrived, e) {
			best = e
		}
	}
	iv := Interval{UsableUntil: best * tpb}
	for g := range arrived {
		a := Full
		if g < len(groups) {
			a = groups[g]
		}
		for b := range best {
			if !modelReads(a, tpb, best, b) {
				iv.RestartFloor = iv.UsableUntil
			}
		}
	}
	return iv
}
