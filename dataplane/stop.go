package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"
)

// Stoppable wraps dp so that after stop is called every operation fails at
// once without reaching the kernel, with an error matching syscall.ECANCELED:
// a proxier process killed mid-sync (a restart) issues nothing more, and the
// kernel keeps whatever the sync had done so far. Reads fail too.
func Stoppable(dp Dataplane) (out Dataplane, stop func()) {
	g := &guard{}
	out = dp
	out.IPVS = guardedIPVS{dp.IPVS, g}
	out.IPSet = guardedIPSet{dp.IPSet, g}
	out.IPTables = guardedIPTables{dp.IPTables, g}
	out.Links = guardedLinks{dp.Links, g}
	out.Sysctls = guardedSysctls{dp.Sysctls, g}
	out.Conntrack = guardedConntrack{dp.Conntrack, g}
	return out, func() { g.stopped.Store(true) }
}

type guard struct{ stopped atomic.Bool }

func (g *guard) err(op string) error {
	if g.stopped.Load() {
		return StoppedError(op)
	}
	return nil
}

// StoppedError is the error of operation op issued after the proxier was
// stopped; every proxier kpsim runs says it so.
func StoppedError(op string) error {
	return fmt.Errorf("%s: the proxier was stopped: %w", op, syscall.ECANCELED)
}

// Stopped reports whether err says the proxier was stopped mid-sync: the
// sync was cut short (a restart, the run's end), it did not fail.
func Stopped(err error) bool { return errors.Is(err, syscall.ECANCELED) }

type guardedIPVS struct {
	IPVS
	g *guard
}

func (w guardedIPVS) Services() ([]VirtualServer, error) {
	if err := w.g.err("ipvs list services"); err != nil {
		return nil, err
	}
	return w.IPVS.Services()
}

func (w guardedIPVS) AddService(s VirtualServer) error {
	if err := w.g.err("ipvs add service " + s.ServiceKey.String()); err != nil {
		return err
	}
	return w.IPVS.AddService(s)
}

func (w guardedIPVS) UpdateService(s VirtualServer) error {
	if err := w.g.err("ipvs update service " + s.ServiceKey.String()); err != nil {
		return err
	}
	return w.IPVS.UpdateService(s)
}

func (w guardedIPVS) DeleteService(k ServiceKey) error {
	if err := w.g.err("ipvs delete service " + k.String()); err != nil {
		return err
	}
	return w.IPVS.DeleteService(k)
}

func (w guardedIPVS) Destinations(k ServiceKey) ([]RealServer, error) {
	if err := w.g.err("ipvs list destinations of " + k.String()); err != nil {
		return nil, err
	}
	return w.IPVS.Destinations(k)
}

func (w guardedIPVS) AddDestination(k ServiceKey, r RealServer) error {
	if err := w.g.err("ipvs add destination " + k.String()); err != nil {
		return err
	}
	return w.IPVS.AddDestination(k, r)
}

func (w guardedIPVS) UpdateDestination(k ServiceKey, r RealServer) error {
	if err := w.g.err("ipvs update destination " + k.String()); err != nil {
		return err
	}
	return w.IPVS.UpdateDestination(k, r)
}

func (w guardedIPVS) DeleteDestination(k ServiceKey, r RealServer) error {
	if err := w.g.err("ipvs delete destination " + k.String()); err != nil {
		return err
	}
	return w.IPVS.DeleteDestination(k, r)
}

type guardedIPSet struct {
	IPSet
	g *guard
}

func (w guardedIPSet) Sets() ([]Set, error) {
	if err := w.g.err("ipset list"); err != nil {
		return nil, err
	}
	return w.IPSet.Sets()
}

func (w guardedIPSet) CreateSet(s Set) error {
	if err := w.g.err("ipset create " + s.Name); err != nil {
		return err
	}
	return w.IPSet.CreateSet(s)
}

func (w guardedIPSet) DestroySet(name string) error {
	if err := w.g.err("ipset destroy " + name); err != nil {
		return err
	}
	return w.IPSet.DestroySet(name)
}

func (w guardedIPSet) Apply(changes []SetChange) error {
	if err := w.g.err(fmt.Sprintf("ipset apply (%d sets)", len(changes))); err != nil {
		return err
	}
	return w.IPSet.Apply(changes)
}

type guardedIPTables struct {
	IPTables
	g *guard
}

func (w guardedIPTables) Restore(f Family, payload []byte) error {
	if err := w.g.err("iptables-restore"); err != nil {
		return err
	}
	return w.IPTables.Restore(f, payload)
}

func (w guardedIPTables) Save(f Family, table string) ([]byte, error) {
	if err := w.g.err("iptables-save -t " + table); err != nil {
		return nil, err
	}
	return w.IPTables.Save(f, table)
}

type guardedLinks struct {
	Links
	g *guard
}

func (w guardedLinks) EnsureDummy(name string) (bool, error) {
	if err := w.g.err("ensure dummy link " + name); err != nil {
		return false, err
	}
	return w.Links.EnsureDummy(name)
}

func (w guardedLinks) DeleteLink(name string) error {
	if err := w.g.err("delete link " + name); err != nil {
		return err
	}
	return w.Links.DeleteLink(name)
}

func (w guardedLinks) Addresses(link string, f Family) ([]netip.Addr, error) {
	if err := w.g.err("list addresses of " + link); err != nil {
		return nil, err
	}
	return w.Links.Addresses(link, f)
}

func (w guardedLinks) AddAddress(link string, p netip.Prefix) error {
	if err := w.g.err("bind " + p.String() + " to " + link); err != nil {
		return err
	}
	return w.Links.AddAddress(link, p)
}

func (w guardedLinks) DelAddress(link string, p netip.Prefix) error {
	if err := w.g.err("unbind " + p.String() + " from " + link); err != nil {
		return err
	}
	return w.Links.DelAddress(link, p)
}

func (w guardedLinks) LocalAddresses(f Family, exclude ...string) ([]InterfaceAddr, error) {
	if err := w.g.err("list local addresses"); err != nil {
		return nil, err
	}
	return w.Links.LocalAddresses(f, exclude...)
}

type guardedSysctls struct {
	Sysctls
	g *guard
}

func (w guardedSysctls) Sysctl(key string) (string, error) {
	if err := w.g.err("sysctl " + key); err != nil {
		return "", err
	}
	return w.Sysctls.Sysctl(key)
}

func (w guardedSysctls) SetSysctl(key, value string) error {
	if err := w.g.err("sysctl " + key + "=" + value); err != nil {
		return err
	}
	return w.Sysctls.SetSysctl(key, value)
}

type guardedConntrack struct {
	Conntrack
	g *guard
}

func (w guardedConntrack) Delete(f ConntrackFilter) (int, error) {
	if err := w.g.err("conntrack delete"); err != nil {
		return 0, err
	}
	return w.Conntrack.Delete(f)
}
