package dataplane

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"syscall"
	"time"
)

// Replay is a kernel that answers every read with what another kernel held
// when Capture read it, and takes every write without effect. A sync
// against it costs the proxier's own work and nothing else, which its Model
// tallies in units of Work: how that work is measured to price it in cost
// profiles (calibrate). Capture an empty kernel for a first sync,
// a programmed one for a restart onto matching state.
type Replay struct {
	services []VirtualServer
	sets     []Set
	saved    map[Family]map[string][]byte
	addrs    map[Family][]netip.Addr
	local    map[Family][]InterfaceAddr
	work     Work
}

// Capture reads what dp holds for the families: the IPVS table, every set,
// the nat and filter tables, kube-ipvs0's addresses and the node's own.
// Sysctls are not captured: the replay knows none.
func Capture(dp Dataplane, families ...Family) (*Replay, error) {
	r := &Replay{saved: map[Family]map[string][]byte{}, addrs: map[Family][]netip.Addr{}, local: map[Family][]InterfaceAddr{}}
	var err error
	if r.services, err = dp.IPVS.Services(); err != nil {
		return nil, fmt.Errorf("capture: ipvs: %w", err)
	}
	if r.sets, err = dp.IPSet.Sets(); err != nil {
		return nil, fmt.Errorf("capture: ipsets: %w", err)
	}
	for _, f := range families {
		r.saved[f] = map[string][]byte{}
		for _, table := range []string{"nat", "filter"} {
			if r.saved[f][table], err = dp.IPTables.Save(f, table); err != nil {
				return nil, fmt.Errorf("capture: iptables-save %s %s: %w", f, table, err)
			}
		}
		if r.addrs[f], err = dp.Links.Addresses(DummyLink, f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("capture: addresses of %s: %w", DummyLink, err)
		}
		if r.local[f], err = dp.Links.LocalAddresses(f, DummyLink); err != nil {
			return nil, fmt.Errorf("capture: node addresses: %w", err)
		}
	}
	return r, nil
}

// Dataplane is the replay as a proxier's dataplane, with the replay as its
// Model.
func (r *Replay) Dataplane() Dataplane {
	return Dataplane{IPVS: replayIPVS{r}, IPSet: replayIPSet{r}, IPTables: replayIPTables{r}, Links: replayLinks{r},
		Sysctls: replaySysctls{}, Conntrack: replayConntrack{}, Model: r}
}

// Work returns the proxier's work tallied since the last call, and starts
// the tally again.
func (r *Replay) Work() Work {
	w := r.work
	r.work = Work{}
	return w
}

// Kernel: a replay costs no kernel time.
func (r *Replay) Kernel() (total, unspent time.Duration) { return 0, 0 }

// Clocked: the proxier's time against a replay is its wall time.
func (r *Replay) Clocked() bool { return false }

// Compute tallies the work; it moves no clock.
func (r *Replay) Compute(w Work) time.Duration {
	r.work.Add(w)
	return 0
}

// ComputeAs tallies the work as Compute does, whoever did it.
func (r *Replay) ComputeAs(_ string, w Work) time.Duration { return r.Compute(w) }

type replayIPVS struct{ r *Replay }

func (v replayIPVS) Services() ([]VirtualServer, error) { return v.r.services, nil }
func (v replayIPVS) Service(k ServiceKey) (VirtualServer, error) {
	for _, vs := range v.r.services {
		if vs.ServiceKey == k {
			vs.Destinations = nil
			return vs, nil
		}
	}
	return VirtualServer{}, fmt.Errorf("ipvs get service %s: %w", k, syscall.ENOENT)
}
func (replayIPVS) AddService(VirtualServer) error    { return nil }
func (replayIPVS) UpdateService(VirtualServer) error { return nil }
func (replayIPVS) DeleteService(ServiceKey) error    { return nil }
func (v replayIPVS) Destinations(k ServiceKey) ([]RealServer, error) {
	for _, vs := range v.r.services {
		if vs.ServiceKey == k {
			return vs.Destinations, nil
		}
	}
	return nil, fmt.Errorf("ipvs list destinations %s: %w", k, fs.ErrNotExist)
}
func (replayIPVS) AddDestination(ServiceKey, RealServer) error    { return nil }
func (replayIPVS) UpdateDestination(ServiceKey, RealServer) error { return nil }
func (replayIPVS) DeleteDestination(ServiceKey, RealServer) error { return nil }

type replayIPSet struct{ r *Replay }

func (s replayIPSet) Sets() ([]Set, error) { return s.r.sets, nil }
func (s replayIPSet) Entries(name string) ([]string, error) {
	for _, set := range s.r.sets {
		if set.Name == name {
			return set.Entries, nil
		}
	}
	return nil, fmt.Errorf("ipset list %s: %w", name, syscall.ENOENT)
}
func (replayIPSet) CreateSet(Set) error     { return nil }
func (replayIPSet) DestroySet(string) error { return nil }
func (replayIPSet) Apply([]SetChange) error { return nil }

type replayIPTables struct{ r *Replay }

func (replayIPTables) Restore(Family, []byte) error { return nil }

// Command is taken as a write, -C too: kpsim's proxier, the one a replay
// measures, writes by restore and issues no command.
func (replayIPTables) Command(Family, string, ...string) error { return nil }
func (t replayIPTables) Save(f Family, table string) ([]byte, error) {
	return t.r.saved[f][table], nil
}

type replayLinks struct{ r *Replay }

func (replayLinks) EnsureDummy(string) (bool, error) { return false, nil }
func (replayLinks) DeleteLink(string) error          { return nil }
func (l replayLinks) Addresses(_ string, f Family) ([]netip.Addr, error) {
	return l.r.addrs[f], nil
}
func (replayLinks) AddAddress(string, netip.Prefix) error { return nil }
func (replayLinks) DelAddress(string, netip.Prefix) error { return nil }
func (l replayLinks) LocalAddresses(f Family, _ ...string) ([]InterfaceAddr, error) {
	return l.r.local[f], nil
}

// replaySysctls knows no key: a sysctl is one small read and write, not
// captured.
type replaySysctls struct{}

func (replaySysctls) Sysctl(key string) (string, error) {
	return "", fmt.Errorf("sysctl %s: %w", key, fs.ErrNotExist)
}
func (replaySysctls) SetSysctl(string, string) error { return nil }

type replayConntrack struct{}

func (replayConntrack) Flows(Family) ([]ConntrackFlow, error) { return nil, nil }
func (replayConntrack) Delete(ConntrackFilter) (int, error)   { return 0, nil }
