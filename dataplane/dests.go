package dataplane

import (
	"iter"
	"net/netip"
	"slices"
)

// Dests is a virtual server's real servers and their weights, as a
// proxier's view of the kernel and the run's Churn hold them. Most virtual
// servers have a few: a Go map of three costs some 350 bytes and a slice of
// three 120, and at 100,000 services of three endpoints the two records
// held 85 MB of maps. Past destsFew entries it is a map, so that a service
// of thousands of endpoints is as quick to look up. The zero Dests is empty.
type Dests struct {
	few  []weighted
	many map[netip.AddrPort]int
}

type weighted struct {
	dest   netip.AddrPort
	weight int
}

// destsFew is the most real servers Dests holds in a slice.
const destsFew = 16

// Len returns how many real servers there are.
func (s *Dests) Len() int { return len(s.few) + len(s.many) }

// Get returns a real server's weight, and whether it is there.
func (s *Dests) Get(d netip.AddrPort) (int, bool) {
	if s.many != nil {
		w, ok := s.many[d]
		return w, ok
	}
	for _, x := range s.few {
		if x.dest == d {
			return x.weight, true
		}
	}
	return 0, false
}

// Set adds a real server or changes its weight.
func (s *Dests) Set(d netip.AddrPort, weight int) {
	if s.many != nil {
		s.many[d] = weight
		return
	}
	for i := range s.few {
		if s.few[i].dest == d {
			s.few[i].weight = weight
			return
		}
	}
	if len(s.few) < destsFew {
		s.few = append(s.few, weighted{d, weight})
		return
	}
	s.many = make(map[netip.AddrPort]int, 2*destsFew)
	for _, x := range s.few {
		s.many[x.dest] = x.weight
	}
	s.many[d] = weight
	s.few = nil
}

// Delete removes a real server.
func (s *Dests) Delete(d netip.AddrPort) {
	if s.many != nil {
		delete(s.many, d)
		return
	}
	s.few = slices.DeleteFunc(s.few, func(x weighted) bool { return x.dest == d })
}

// All yields every real server and its weight, in no particular order.
func (s *Dests) All() iter.Seq2[netip.AddrPort, int] {
	return func(yield func(netip.AddrPort, int) bool) {
		if s.many != nil {
			for d, w := range s.many {
				if !yield(d, w) {
					return
				}
			}
			return
		}
		for _, x := range s.few {
			if !yield(x.dest, x.weight) {
				return
			}
		}
	}
}
