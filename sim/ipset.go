package sim

import (
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/kpsim/kpsim/dataplane"
)

// maxSetName is IPSET_MAXNAMELEN (32) less the terminating NUL.
const maxSetName = 31

type ipset struct {
	spec    dataplane.Set
	entries map[string]struct{} // canonical entries
}

// CreateSet creates a set. A name in use is EEXIST whatever its type; an
// unknown type, a name over 31 bytes or a bad family is EINVAL. A bitmap:port
// range given backwards is swapped, as the kernel does.
func (k *Kernel) CreateSet(s dataplane.Set) error {
	k.lock()
	defer k.unlock()
	k.count(dataplane.OpIPSetCreate, 1)
	if k.faulty(dataplane.OpIPSetCreate) {
		if err := k.fault(dataplane.OpIPSetCreate, s.Name); err != nil {
			return errorf(err, "ipset create %s", s.Name)
		}
	}
	if s.Name == "" || len(s.Name) > maxSetName {
		return errorf(syscall.EINVAL, "ipset create %q: name must be 1-%d bytes", s.Name, maxSetName)
	}
	switch s.Type {
	case dataplane.HashIP, dataplane.HashIPPort, dataplane.HashIPPortIP, dataplane.HashIPPortNet, dataplane.HashNet:
		switch s.Family {
		case "":
			s.Family = dataplane.IPv4
		case dataplane.IPv4, dataplane.IPv6:
		default:
			return errorf(syscall.EINVAL, "ipset create %s: unknown family %q", s.Name, s.Family)
		}
		if s.MaxElem < 0 {
			return errorf(syscall.EINVAL, "ipset create %s: negative maxelem %d", s.Name, s.MaxElem)
		}
		if s.MaxElem == 0 {
			s.MaxElem = dataplane.DefaultMaxElem
		}
		s.PortFrom, s.PortTo = 0, 0
	case dataplane.BitmapPort:
		s.Family, s.MaxElem = "", 0
		if s.PortFrom > s.PortTo {
			s.PortFrom, s.PortTo = s.PortTo, s.PortFrom
		}
	default:
		return errorf(syscall.EINVAL, "ipset create %s: unknown type %q", s.Name, s.Type)
	}
	if _, ok := k.sets[s.Name]; ok {
		return errorf(syscall.EEXIST, "ipset create %s", s.Name)
	}
	s.Entries = nil
	k.sets[s.Name] = &ipset{spec: s, entries: make(map[string]struct{})}
	return nil
}

// DestroySet destroys a set. A set an iptables rule matches on is EBUSY, as
// in the kernel, which holds a reference per `-m set --match-set` rule.
func (k *Kernel) DestroySet(name string) error {
	k.lock()
	defer k.unlock()
	k.count(dataplane.OpIPSetDestroy, 1)
	if k.faulty(dataplane.OpIPSetDestroy) {
		if err := k.fault(dataplane.OpIPSetDestroy, name); err != nil {
			return errorf(err, "ipset destroy %s", name)
		}
	}
	if _, ok := k.sets[name]; !ok {
		return errorf(syscall.ENOENT, "ipset destroy %s", name)
	}
	if where := k.setReference(name); where != "" {
		return errorf(syscall.EBUSY, "ipset destroy %s: in use by iptables (%s)", name, where)
	}
	delete(k.sets, name)
	return nil
}

// Sets lists every set with its entries, ordered by name, entries in
// canonical form and sorted; it is priced per call and per entry read.
func (k *Kernel) Sets() ([]dataplane.Set, error) {
	k.lock()
	defer k.unlock()
	n := 0
	for _, s := range k.sets {
		n += len(s.entries)
	}
	k.read(dataplane.OpIPSetList, n)
	if k.faulty(dataplane.OpIPSetList) {
		if err := k.fault(dataplane.OpIPSetList, ""); err != nil {
			return nil, errorf(err, "ipset list")
		}
	}
	out := make([]dataplane.Set, 0, len(k.sets))
	for _, s := range k.sets {
		spec := s.spec
		spec.Entries = make([]string, 0, len(s.entries))
		for e := range s.entries {
			spec.Entries = append(spec.Entries, e)
		}
		slices.Sort(spec.Entries)
		out = append(out, spec)
	}
	slices.SortFunc(out, func(a, b dataplane.Set) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Entries lists one set's entries, canonical and sorted, priced as a
// listing of that set alone plus one command of the ipset strategy (a
// release runs `ipset list NAME`: a process under exec, what the profile
// prices a create or destroy at).
func (k *Kernel) Entries(name string) ([]string, error) {
	k.lock()
	defer k.unlock()
	s, ok := k.sets[name]
	n := 0
	if ok {
		n = len(s.entries)
	}
	k.read(dataplane.OpIPSetList, n)
	k.charge(k.costs.op[dataplane.OpIPSetCreate])
	if k.faulty(dataplane.OpIPSetList) {
		if err := k.fault(dataplane.OpIPSetList, name); err != nil {
			return nil, errorf(err, "ipset list %s", name)
		}
	}
	if !ok {
		return nil, errorf(syscall.ENOENT, "ipset list %s", name)
	}
	out := make([]string, 0, len(s.entries))
	for e := range s.entries {
		out = append(out, e)
	}
	slices.Sort(out)
	return out, nil
}

// Apply applies each change in order, deletions before additions within a
// change (so an entry named in both ends up present). Adding a present entry
// and deleting an absent one are not errors (`ipset restore -exist`). The
// first failing entry stops the batch; the entries before it stay applied.
// A full set is ENOSPC: the kernel's IPSET_ERR_HASH_FULL has no errno of its
// own, and "no space left" is what it means.
//
// The strategy only prices the batch: one process per entry (exec), one
// process plus a little per entry (restore), or one request per entry (netlink).
func (k *Kernel) Apply(changes []dataplane.SetChange) error { return k.ApplyUntil(nil, changes) }

// ApplyUntil is Apply that stops at the next entry once stop is closed
// (dataplane.StoppableIPSet): a killed proxier's batch issues nothing more,
// and its wall-time or modeled pace ends there.
func (k *Kernel) ApplyUntil(stop <-chan struct{}, changes []dataplane.SetChange) error {
	k.lock()
	defer k.unlock()
	entries := 0
	for _, ch := range changes {
		k.ops[dataplane.OpIPSetAdd] += int64(len(ch.Add))
		k.ops[dataplane.OpIPSetDel] += int64(len(ch.Del))
		entries += len(ch.Add) + len(ch.Del)
	}
	if entries > 0 {
		k.charge(k.costs.batch)
	}
	var buf [128]byte
	for _, ch := range changes {
		s, ok := k.sets[ch.Set]
		if !ok {
			return errorf(syscall.ENOENT, "ipset apply %s", ch.Set)
		}
		for _, e := range ch.Del {
			var err error
			if s, err = k.pace(s, stop); err != nil {
				return err
			}
			c, err := k.setEntry(dataplane.OpIPSetDel, "del", s, e, buf[:0])
			if err != nil {
				return err
			}
			delete(s.entries, c)
		}
		for _, e := range ch.Add {
			var err error
			if s, err = k.pace(s, stop); err != nil {
				return err
			}
			c, err := k.setEntry(dataplane.OpIPSetAdd, "add", s, e, buf[:0])
			if err != nil {
				return err
			}
			if _, ok := s.entries[c]; ok {
				continue
			}
			if s.spec.MaxElem > 0 && len(s.entries) >= s.spec.MaxElem {
				return errorf(syscall.ENOSPC, "ipset add %s %s: set is full (maxelem %d)", s.spec.Name, e, s.spec.MaxElem)
			}
			s.entries[c] = struct{}{}
		}
	}
	return nil
}

// pace charges one entry and, once a chunk of wall time is owed (or on a
// modeled clock, at once), spends it with the lock released: a batch of
// thousands of `ipset del` processes then changes the sets at the modeled
// pace as probes and the other family's proxier see them, instead of all at
// once followed by one long wait. It returns the set again, which may have
// been destroyed meanwhile, or an error once stop is closed (ApplyUntil).
func (k *Kernel) pace(s *ipset, stop <-chan struct{}) (*ipset, error) {
	k.charge(k.costs.op[dataplane.OpIPSetAdd])
	if k.sleep == 0 && k.spend == 0 {
		return s, nil
	}
	name := s.spec.Name
	done := k.unlockUntil(stop)
	k.lock()
	if !done {
		return nil, dataplane.StoppedError("ipset apply " + name)
	}
	s, ok := k.sets[name]
	if !ok {
		return nil, errorf(syscall.ENOENT, "ipset apply %s", name)
	}
	return s, nil
}

// setEntry checks faults for one entry and returns its canonical form.
func (k *Kernel) setEntry(op dataplane.Op, verb string, s *ipset, e string, buf []byte) (string, error) {
	if k.faulty(op) {
		if err := k.fault(op, s.spec.Name+" "+e); err != nil {
			return "", errorf(err, "ipset %s %s %s", verb, s.spec.Name, e)
		}
	}
	b, err := canonicalEntry(buf, s.spec, e)
	if err != nil {
		return "", errorf(syscall.EINVAL, "ipset %s %s %s: %v", verb, s.spec.Name, e, err)
	}
	if string(b) == e {
		return e, nil // the common case: the proxier wrote the canonical form
	}
	return string(b), nil
}

// canonicalEntry parses entry e for set s and appends the form `ipset list`
// prints: addresses in their canonical text, the protocol in lower case
// (tcp when omitted), a host prefix (/32, /128) dropped from nets and host
// bits cleared.
func canonicalEntry(b []byte, s dataplane.Set, e string) ([]byte, error) {
	if s.Type == dataplane.BitmapPort {
		if proto, port, ok := strings.Cut(e, ":"); ok && (proto == "tcp" || proto == "udp") {
			e = port
		}
		p, err := parsePort(e)
		if err != nil {
			return nil, err
		}
		if p < s.PortFrom || p > s.PortTo {
			return nil, errors.New("port outside the set's range")
		}
		return strconv.AppendUint(b, uint64(p), 10), nil
	}
	want := 3
	switch s.Type {
	case dataplane.HashIP, dataplane.HashNet:
		want = 1
	case dataplane.HashIPPort:
		want = 2
	}
	var parts [3]string
	n := 0
	for rest, more := e, true; more; n++ {
		if n == want {
			return nil, errors.New("too many fields for " + string(s.Type))
		}
		parts[n], rest, more = strings.Cut(rest, ",")
	}
	if n != want {
		return nil, errors.New("too few fields for " + string(s.Type))
	}
	var err error
	if s.Type == dataplane.HashNet {
		return appendNet(b, s.Family, parts[0])
	}
	if b, err = appendAddr(b, s.Family, parts[0]); err != nil {
		return nil, err
	}
	if want == 1 {
		return b, nil
	}
	if b, err = appendProtoPort(append(b, ','), parts[1]); err != nil {
		return nil, err
	}
	if want == 2 {
		return b, nil
	}
	b = append(b, ',')
	if s.Type == dataplane.HashIPPortNet {
		return appendNet(b, s.Family, parts[2])
	}
	return appendAddr(b, s.Family, parts[2])
}

func parseAddr(f dataplane.Family, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, errors.New("bad address " + strconv.Quote(s))
	}
	if a.Is4In6() || dataplane.FamilyOf(a) != f {
		return netip.Addr{}, errors.New("address " + s + " is not of the set's family " + string(f))
	}
	return a, nil
}

func appendAddr(b []byte, f dataplane.Family, s string) ([]byte, error) {
	a, err := parseAddr(f, s)
	if err != nil {
		return nil, err
	}
	return a.AppendTo(b), nil
}

// appendNet appends a network; /0 is refused as by the hash:net types.
func appendNet(b []byte, f dataplane.Family, s string) ([]byte, error) {
	addr, bits, hasBits := strings.Cut(s, "/")
	a, err := parseAddr(f, addr)
	if err != nil {
		return nil, err
	}
	n := a.BitLen()
	if hasBits {
		if n, err = strconv.Atoi(bits); err != nil || n < 1 || n > a.BitLen() {
			return nil, errors.New("bad prefix length in " + strconv.Quote(s))
		}
	}
	p, _ := a.Prefix(n)
	b = p.Addr().AppendTo(b)
	if n == a.BitLen() {
		return b, nil
	}
	return strconv.AppendInt(append(b, '/'), int64(n), 10), nil
}

func appendProtoPort(b []byte, s string) ([]byte, error) {
	proto, port, ok := strings.Cut(s, ":")
	if !ok {
		proto, port = "tcp", s
	}
	switch strings.ToLower(proto) {
	case "tcp", "udp", "sctp":
	default:
		return nil, errors.New("unsupported protocol " + strconv.Quote(proto))
	}
	p, err := parsePort(port)
	if err != nil {
		return nil, err
	}
	b = append(b, strings.ToLower(proto)...)
	return strconv.AppendUint(append(b, ':'), uint64(p), 10), nil
}

func parsePort(s string) (uint16, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, errors.New("bad port " + strconv.Quote(s))
	}
	return uint16(p), nil
}
