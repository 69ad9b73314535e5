package proxier

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
)

// ---------------------------------------------------------------------------
// ensure-chains: on full syncs, read our chains back to know whether the
// ruleset (and the jumps into it from the built-in chains) is intact.

func (s *syncRun) ensureChains() {
	if !s.full {
		return
	}
	p := s.p
	s.saved = map[string][]string{}
	s.jumpsOK = true
	for _, table := range []string{tableNAT, tableFilter} {
		out, err := p.dp.IPTables.Save(p.family, table)
		if err == nil {
			var ok bool
			ok, err = p.readSaved(out, table, s.saved)
			s.jumpsOK = s.jumpsOK && ok
		}
		if err != nil {
			s.fail(fmt.Errorf("iptables-save -t %s: %w", table, err))
			s.saved = nil
			s.jumpsOK = false
			return
		}
	}
}

// ---------------------------------------------------------------------------
// ensure-link: kube-ipvs0 and the sysctls IPVS mode needs.

func (s *syncRun) ensureLink() {
	p := s.p
	if !s.full && p.kernel.linkOK {
		return
	}
	if _, err := p.dp.Links.EnsureDummy(dataplane.DummyLink); err != nil {
		s.fail(fmt.Errorf("ensure dummy link %s: %w", dataplane.DummyLink, err))
		return
	}
	addrs, err := p.dp.Links.Addresses(dataplane.DummyLink, p.family)
	if err != nil {
		s.fail(fmt.Errorf("list addresses of %s: %w", dataplane.DummyLink, err))
		return
	}
	p.kernel.addrs = make(map[netip.Addr]bool, max(len(addrs), len(p.addrRef)))
	for _, a := range addrs {
		p.kernel.addrs[a.Unmap()] = true
	}
	s.work(dataplane.Work{Entries: len(addrs)}) // as an ipset entry read into the model
	p.kernel.linkOK = true
	if p.family != dataplane.IPv4 && slices.Contains(p.cfg.Families, dataplane.IPv4) {
		return // the IPv4 proxier owns the (net/ipv4) sysctls on a dual-stack node
	}
	want := slices.Clone(ipvsSysctls)
	if p.cfg.StrictARP {
		want = append(want, strictARPSysctls...)
	}
	if _, err := p.dp.Sysctls.Sysctl(bridgeSysctl); err == nil {
		want = append(want, struct{ key, value string }{bridgeSysctl, "1"})
	}
	for _, w := range want {
		if v, err := p.dp.Sysctls.Sysctl(w.key); err == nil && v == w.value {
			continue
		}
		if err := p.dp.Sysctls.SetSysctl(w.key, w.value); err != nil {
			s.fail(fmt.Errorf("sysctl %s=%s: %w", w.key, w.value, err))
		}
	}
}

// ---------------------------------------------------------------------------
// ensure-ipsets: the 17 sets exist with the right types, and the model of
// their entries is the kernel's (read with them, in one go).

func (s *syncRun) ensureIPSets() {
	p := s.p
	if !s.full && p.kernel.setsOK {
		return
	}
	sets, err := p.dp.IPSet.Sets()
	if err != nil {
		s.fail(fmt.Errorf("ipset list: %w", err))
		return
	}
	have := map[string]dataplane.Set{}
	for _, st := range sets {
		have[st.Name] = st
	}
	ok := true
	for i, info := range setInfos {
		want := p.setSpec(setID(i))
		cur, exists := have[want.Name]
		if exists && cur.Type != want.Type {
			if err := p.dp.IPSet.DestroySet(want.Name); err != nil {
				s.fail(fmt.Errorf("ipset destroy %s (type %s, want %s): %w", want.Name, cur.Type, info.typ, err))
				ok = false
				continue
			}
			exists = false
		}
		if !exists {
			if err := p.dp.IPSet.CreateSet(want); err != nil && !errors.Is(err, fs.ErrExist) {
				s.fail(fmt.Errorf("ipset create %s %s: %w", want.Name, want.Type, err))
				ok = false
				continue
			}
			p.kernel.entries[i] = make(map[string]struct{}, len(p.entryRef[i]))
			continue
		}
		m := make(map[string]struct{}, len(cur.Entries))
		for _, e := range cur.Entries {
			m[e] = struct{}{}
		}
		p.kernel.entries[i] = m
		s.work(dataplane.Work{Entries: len(cur.Entries)})
	}
	p.kernel.setsOK = ok
}

func (p *Proxier) setSpec(id setID) dataplane.Set {
	info := setInfos[id]
	st := dataplane.Set{Name: SetName(info.name, p.family), Type: info.typ, Family: p.family, Comment: info.comment}
	if info.typ == dataplane.BitmapPort {
		st.PortFrom, st.PortTo = 0, 65535
	}
	return st
}

// ---------------------------------------------------------------------------
// ipvs-services: virtual servers, their real servers, and their addresses on kube-ipvs0.

func (p *Proxier) excluded(a netip.Addr) bool {
	for _, c := range p.excludeCIDRs {
		if c.Contains(a) {
			return true
		}
	}
	return false
}

func (s *syncRun) ipvsServices() {
	p := s.p
	var keys []dataplane.ServiceKey
	if s.full {
		if err := s.readIPVS(); err != nil {
			s.fail(err)
			return
		}
		seen := map[dataplane.ServiceKey]bool{}
		for k := range p.claims {
			seen[k] = true
		}
		for k := range p.kernel.vs {
			seen[k] = true
		}
		keys = make([]dataplane.ServiceKey, 0, len(seen))
		for k := range seen {
			keys = append(keys, k)
		}
	} else {
		keys = make([]dataplane.ServiceKey, 0, len(p.touchedVS))
		for k := range p.touchedVS {
			keys = append(keys, k)
		}
	}
	sortKeys(keys)
	for _, k := range keys {
		s.reconcileVS(k)
	}
	// Bind addresses now, so a new virtual server answers as soon as possible.
	for _, a := range s.addrKeys() {
		if p.addrRef[a] > 0 && !p.kernel.addrs[a] {
			if err := p.dp.Links.AddAddress(dataplane.DummyLink, hostPrefix(a)); err != nil && !errors.Is(err, fs.ErrExist) {
				s.fail(fmt.Errorf("bind %s to %s: %w", a, dataplane.DummyLink, err))
				continue
			}
			p.kernel.addrs[a] = true
		}
	}
}

func sortKeys(keys []dataplane.ServiceKey) {
	slices.SortFunc(keys, func(a, b dataplane.ServiceKey) int {
		if c := a.Address.Compare(b.Address); c != 0 {
			return c
		}
		if a.Port != b.Port {
			return int(a.Port) - int(b.Port)
		}
		return strings.Compare(string(a.Protocol), string(b.Protocol))
	})
}

func hostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// addrKeys are the addresses this sync looks at, sorted.
func (s *syncRun) addrKeys() []netip.Addr {
	p := s.p
	var out []netip.Addr
	if s.full {
		for a := range p.addrRef {
			out = append(out, a)
		}
		for a := range p.kernel.addrs {
			if p.addrRef[a] == 0 {
				out = append(out, a)
			}
		}
	} else {
		for a := range p.touchedAddrs {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// readIPVS replaces the model's virtual servers with the kernel's (this
// family's, outside excludeCIDRs), read in one go with their real servers.
func (s *syncRun) readIPVS() error {
	p := s.p
	list, err := p.dp.IPVS.Services()
	if err != nil {
		return fmt.Errorf("list ipvs services: %w", err)
	}
	m := make(map[dataplane.ServiceKey]*kernelVS, max(len(list), len(p.claims)))
	for _, vs := range list {
		if dataplane.FamilyOf(vs.Address) != p.family {
			continue
		}
		if _, wanted := p.claims[vs.ServiceKey]; !wanted && p.excluded(vs.Address) {
			continue // not ours to manage
		}
		kv := &kernelVS{vs: vs}
		kv.vs.Flags &^= dataplane.FlagHashed
		kv.vs.Destinations = nil
		for _, d := range vs.Destinations {
			kv.dests.Set(d.AddrPort(), d.Weight)
		}
		m[vs.ServiceKey] = kv
		s.work(dataplane.Work{Ports: 1, Endpoints: len(vs.Destinations)})
	}
	p.kernel.vs = m
	for k := range p.draining {
		kv := m[k.vs]
		if kv == nil {
			delete(p.draining, k)
		} else if w, ok := kv.dests.Get(k.dest); !ok || w != 0 {
			delete(p.draining, k)
		}
	}
	return nil
}

func sameVS(a, b dataplane.VirtualServer) bool {
	return a.ServiceKey == b.ServiceKey && a.Scheduler == b.Scheduler &&
		a.Flags&^dataplane.FlagHashed == b.Flags&^dataplane.FlagHashed && a.Timeout == b.Timeout && a.Netmask == b.Netmask
}

// reconcileVS makes the kernel's virtual server at k what the service ports want.
func (s *syncRun) reconcileVS(k dataplane.ServiceKey) {
	p := s.p
	want, wanted := p.wantVS(k)
	have := p.kernel.vs[k]
	w := dataplane.Work{Ports: 1, Endpoints: len(want.dests)}
	if have != nil {
		w.Endpoints += have.dests.Len()
	}
	s.work(w)
	if !wanted {
		if have != nil && s.fullPicture {
			if p.excluded(k.Address) {
				delete(p.kernel.vs, k) // left in the kernel, as upstream does: no longer ours
				return
			}
			s.vsDeletes = append(s.vsDeletes, k)
		}
		return
	}
	if have == nil {
		if err := p.dp.IPVS.AddService(want.vs); err != nil {
			s.fail(fmt.Errorf("ipvs add service %s: %w", k, err))
			return
		}
		have = &kernelVS{vs: want.vs}
		p.kernel.vs[k] = have
	} else if !sameVS(have.vs, want.vs) {
		if err := p.dp.IPVS.UpdateService(want.vs); err != nil {
			s.fail(fmt.Errorf("ipvs update service %s: %w", k, err))
			return
		}
		have.vs = want.vs
	}
	wantSet := make(map[netip.AddrPort]bool, len(want.dests))
	for _, d := range want.dests {
		wantSet[d] = true
		w, ok := have.dests.Get(d)
		switch {
		case !ok:
			if err := p.dp.IPVS.AddDestination(k, dataplane.RealServer{Address: d.Addr(), Port: d.Port(), Weight: 1}); err != nil {
				s.fail(fmt.Errorf("ipvs add destination %s -> %s: %w", k, d, err))
				continue
			}
		case w != 1:
			// Back from draining (or a restart found it at another weight).
			if err := p.dp.IPVS.UpdateDestination(k, dataplane.RealServer{Address: d.Addr(), Port: d.Port(), Weight: 1}); err != nil {
				s.fail(fmt.Errorf("ipvs update destination %s -> %s weight 1: %w", k, d, err))
				continue
			}
		}
		have.dests.Set(d, 1)
		delete(p.draining, drainKey{k, d})
	}
	if !s.fullPicture {
		return // never remove what may belong to something not yet seen
	}
	var gone []netip.AddrPort
	for d, w := range have.dests.All() {
		if !wantSet[d] {
			if _, ok := p.draining[drainKey{k, d}]; ok && w == 0 {
				continue
			}
			gone = append(gone, d)
		}
	}
	if len(gone) == 0 {
		return
	}
	slices.SortFunc(gone, netip.AddrPort.Compare)
	s.removeDests(k, have, gone)
}

// removeDests takes real servers out of a virtual server the way kube-proxy's
// graceful termination manager does: at once when they have no connections
// (or the service is UDP), else at weight 0 until their connections are gone.
func (s *syncRun) removeDests(k dataplane.ServiceKey, have *kernelVS, gone []netip.AddrPort) {
	p := s.p
	conns := map[netip.AddrPort]int{}
	if k.Protocol != dataplane.UDP {
		list, err := p.dp.IPVS.Destinations(k)
		if err != nil {
			s.fail(fmt.Errorf("list destinations of %s: %w", k, err))
			return
		}
		for _, d := range list {
			conns[d.AddrPort()] = d.ActiveConns + d.InactiveConns
		}
	}
	for _, d := range gone {
		rs := dataplane.RealServer{Address: d.Addr(), Port: d.Port()}
		if conns[d] == 0 {
			if err := p.dp.IPVS.DeleteDestination(k, rs); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.fail(fmt.Errorf("ipvs delete destination %s -> %s: %w", k, d, err))
				continue
			}
			have.dests.Delete(d)
			delete(p.draining, drainKey{k, d})
			continue
		}
		if w, _ := have.dests.Get(d); w != 0 {
			if err := p.dp.IPVS.UpdateDestination(k, rs); err != nil {
				s.fail(fmt.Errorf("ipvs update destination %s -> %s weight 0: %w", k, d, err))
				continue
			}
			have.dests.Set(d, 0)
		}
		p.draining[drainKey{k, d}] = p.clock.Now().Add(p.cfg.GracefulTerminationRetry)
	}
}

// ---------------------------------------------------------------------------
// ipset-entries: one batch of additions and deletions over every set.

func (s *syncRun) ipsetEntries() {
	p := s.p
	var batch []dataplane.SetChange
	type applied struct {
		id       setID
		add, del []string
	}
	var done []applied
	compared := 0
	for i := range setInfos {
		id := setID(i)
		var add, del []string
		if s.full {
			compared += len(p.entryRef[id]) + len(p.kernel.entries[id])
			for e := range p.entryRef[id] {
				if _, ok := p.kernel.entries[id][e]; !ok {
					add = append(add, e)
				}
			}
			for e := range p.kernel.entries[id] {
				if _, ok := p.entryRef[id][e]; !ok && s.fullPicture {
					del = append(del, e)
				}
			}
		} else {
			compared += len(p.touchedEntries[id])
			for e := range p.touchedEntries[id] {
				_, want := p.entryRef[id][e]
				_, have := p.kernel.entries[id][e]
				switch {
				case want && !have:
					add = append(add, e)
				case !want && have && s.fullPicture:
					del = append(del, e)
				}
			}
		}
		if len(add) == 0 && len(del) == 0 {
			continue
		}
		sort.Strings(add)
		sort.Strings(del)
		add = fit(id, add, len(p.kernel.entries[id])-len(del))
		if len(add) == 0 && len(del) == 0 {
			continue
		}
		batch = append(batch, dataplane.SetChange{Set: SetName(setInfos[id].name, p.family), Add: add, Del: del})
		done = append(done, applied{id, add, del})
	}
	s.work(dataplane.Work{Entries: compared})
	defer s.unfit()
	if len(batch) == 0 {
		return
	}
	if err := p.dp.IPSet.Apply(batch); err != nil {
		// A prefix may have been applied: the next (full) sync reads the sets back.
		s.fail(fmt.Errorf("ipset apply (%d sets): %w", len(batch), err))
		p.kernel.setsOK = false
		return
	}
	for _, d := range done {
		for _, e := range d.add {
			p.kernel.entries[d.id][e] = struct{}{}
		}
		for _, e := range d.del {
			delete(p.kernel.entries[d.id], e)
		}
	}
}

// fit returns the entries of add (sorted) that a set holding n entries has
// room for, set id's type allowing. kube-proxy creates every hash set with
// the default maxelem and, when one is full, logs each entry that does not
// fit and goes on: the sync completes without them (v1.37's IPVS proxier;
// kubernetes #129389). Which ones depends on the order it adds them, each
// set's own Go map order: a different draw in each set, so a service can
// keep its address in KUBE-IPVS-IPS and lose its KUBE-CLUSTER-IP entry,
// and KUBE-IPVS-FILTER then rejects its new connections. fit draws the
// same way, by a hash of the set and the entry, so that a seed repeats;
// the sorted order would leave out the same highest addresses of every
// set and break no traffic (measured: 0 of 200 probed services broken at
// 70,000 services, v1.37.1 14). The entries left out are not sent, so
// they cost no kernel time here, where each of kube-proxy's attempts
// costs one. A bitmap:port set holds every port and is never full.
func fit(id setID, add []string, n int) []string {
	room := max(0, dataplane.DefaultMaxElem-n)
	if setInfos[id].typ == dataplane.BitmapPort || len(add) <= room {
		return add
	}
	type drawn struct {
		key   uint64
		entry string
	}
	draws := make([]drawn, len(add))
	for i, e := range add {
		h := fnv.New64a()
		h.Write([]byte(setInfos[id].name))
		h.Write([]byte(e))
		draws[i] = drawn{h.Sum64(), e}
	}
	slices.SortFunc(draws, func(a, b drawn) int { return cmp.Compare(a.key, b.key) })
	kept := make([]string, room)
	for i := range kept {
		kept[i] = draws[i].entry
	}
	slices.Sort(kept)
	return kept
}

// unfit records, for each full set, the entries the proxier wants in it
// that it does not hold (record.Sync.Unfit): what fit left out, this
// sync or an earlier one, which a partial sync does not try again.
func (s *syncRun) unfit() {
	p := s.p
	for i := range setInfos {
		id := setID(i)
		if len(p.kernel.entries[id]) < dataplane.DefaultMaxElem || setInfos[id].typ == dataplane.BitmapPort {
			continue
		}
		var u record.Unfit
		for e := range p.entryRef[id] {
			if _, ok := p.kernel.entries[id][e]; !ok {
				if u.Entries++; u.First == "" || e < u.First {
					u.First = e
				}
			}
		}
		if u.Entries > 0 {
			if s.rec.Unfit == nil {
				s.rec.Unfit = map[string]record.Unfit{}
			}
			s.rec.Unfit[SetName(setInfos[id].name, p.family)] = u
		}
	}
}

// ---------------------------------------------------------------------------
// iptables-restore: one payload per family, written only when it changed.

func (s *syncRun) iptablesRestore() {
	p := s.p
	payload := p.iptablesPayload(false)
	var write bool
	if s.full && s.saved != nil {
		same, err := p.matchesSaved(payload, s.saved)
		if err != nil {
			s.fail(fmt.Errorf("iptables-restore: %w", err))
		}
		write = !same || !s.jumpsOK
	} else {
		write = !bytes.Equal(payload, p.kernel.rules)
	}
	if !write {
		p.kernel.rules = payload
		return
	}
	out := payload
	if s.full && !s.jumpsOK {
		out = p.iptablesPayload(true)
	}
	if err := p.dp.IPTables.Restore(p.family, out); err != nil {
		s.fail(fmt.Errorf("iptables-restore (%d bytes): %w", len(out), err))
		p.kernel.rules = nil
		if m := p.opts.Metrics; m != nil {
			m.RestoreFailures.WithLabelValues(string(p.family)).Inc()
		}
		return
	}
	p.kernel.rules = payload
}

// ---------------------------------------------------------------------------
// cleanup-stale: virtual servers and addresses nothing wants any more. Only
// with the full picture: never delete what a not-yet-seen service may own.

func (s *syncRun) cleanupStale() {
	p := s.p
	if !s.fullPicture {
		return
	}
	for _, k := range s.vsDeletes {
		if err := p.dp.IPVS.DeleteService(k); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.fail(fmt.Errorf("ipvs delete service %s: %w", k, err))
			continue
		}
		delete(p.kernel.vs, k)
		for d := range p.draining {
			if d.vs == k {
				delete(p.draining, d)
			}
		}
	}
	for _, a := range s.addrKeys() {
		if p.addrRef[a] == 0 && p.kernel.addrs[a] {
			if err := p.dp.Links.DelAddress(dataplane.DummyLink, hostPrefix(a)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.fail(fmt.Errorf("unbind %s from %s: %w", a, dataplane.DummyLink, err))
				continue
			}
			delete(p.kernel.addrs, a)
		}
	}
}

// ---------------------------------------------------------------------------
// conntrack: stale UDP flows.

func (s *syncRun) conntrack() {
	p := s.p
	for _, f := range p.conntrackWork {
		if _, err := p.dp.Conntrack.Delete(f); err != nil {
			s.fail(fmt.Errorf("conntrack delete %s %s:%d reply-src %s: %w", f.Protocol, f.OrigDst, f.OrigDstPort, f.ReplySrc, err))
		}
	}
}

// ---------------------------------------------------------------------------
// graceful-termination: delete drained real servers whose connections are gone.

func (s *syncRun) gracefulTermination() {
	p := s.p
	now := p.clock.Now()
	due := map[dataplane.ServiceKey][]netip.AddrPort{}
	for k, t := range p.draining {
		if !now.Before(t) {
			due[k.vs] = append(due[k.vs], k.dest)
		}
	}
	keys := make([]dataplane.ServiceKey, 0, len(due))
	for k := range due {
		keys = append(keys, k)
	}
	sortKeys(keys)
	for _, k := range keys {
		list, err := p.dp.IPVS.Destinations(k)
		if err != nil {
			s.fail(fmt.Errorf("list destinations of %s: %w", k, err))
			continue
		}
		conns := map[netip.AddrPort]int{}
		present := map[netip.AddrPort]bool{}
		for _, d := range list {
			conns[d.AddrPort()] = d.ActiveConns + d.InactiveConns
			present[d.AddrPort()] = true
		}
		for _, d := range due[k] {
			dk := drainKey{k, d}
			if !present[d] {
				delete(p.draining, dk)
				if kv := p.kernel.vs[k]; kv != nil {
					kv.dests.Delete(d)
				}
				continue
			}
			if conns[d] > 0 {
				p.draining[dk] = now.Add(p.cfg.GracefulTerminationRetry)
				continue
			}
			if err := p.dp.IPVS.DeleteDestination(k, dataplane.RealServer{Address: d.Addr(), Port: d.Port()}); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.fail(fmt.Errorf("ipvs delete destination %s -> %s: %w", k, d, err))
				continue
			}
			delete(p.draining, dk)
			if kv := p.kernel.vs[k]; kv != nil {
				kv.dests.Delete(d)
			}
		}
	}
}
