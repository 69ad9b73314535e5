package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"sigs.k8s.io/knftables"
)

// Stoppable wraps dp so that after stop is called every operation fails at
// once without reaching the kernel, with an error matching syscall.ECANCELED:
// a proxier process killed mid-sync (a restart) issues nothing more, and the
// kernel keeps whatever the sync had done so far. Reads fail too.
func Stoppable(dp Dataplane) (out Dataplane, stop func()) {
	g := &guard{done: make(chan struct{})}
	out = dp
	out.IPVS = guardedIPVS{dp.IPVS, g}
	out.IPSet = guardedIPSet{dp.IPSet, g}
	out.IPTables = guardedIPTables{dp.IPTables, g}
	out.Links = guardedLinks{dp.Links, g}
	out.Sysctls = guardedSysctls{dp.Sysctls, g}
	out.Conntrack = guardedConntrack{dp.Conntrack, g}
	if dp.NFTables != nil {
		out.NFTables = guardedNFTables{dp.NFTables, g}
	}
	return out, func() {
		if g.stopped.CompareAndSwap(false, true) {
			close(g.done)
		}
	}
}

// guard is a Stoppable's switch. Each wrapper checks it before it names
// its operation: the name (formatted, a key and an address) is only needed
// for the error, and formatting it for every operation of a live proxier
// cost about half what the in-memory kernel's operation does.
type guard struct {
	stopped atomic.Bool
	done    chan struct{} // closed when stopped, for calls already under way (StoppableIPSet)
}

// StoppableIPSet is an IPSet whose Apply can stop partway: a batch applied
// entry by entry in time that counts (one `ipset` process each, seconds for
// thousands) ends at the next entry once stop is closed, with an error
// matching syscall.ECANCELED and the entries before it applied, as a killed
// kube-proxy's batch ends with its process. Stoppable passes its stop.
type StoppableIPSet interface {
	ApplyUntil(stop <-chan struct{}, changes []SetChange) error
}

// StoppedError is the error of operation op issued after the proxier was
// stopped; every proxier kpsim runs says it so.
func StoppedError(op string) error {
	return fmt.Errorf("%s: the proxier was stopped: %w", op, syscall.ECANCELED)
}

// CutShort is the error of a sync the run stopped on the modeled clock
// after elapsed of modeled time, whose remaining operations took none: it
// did not finish, whatever it did after.
func CutShort(elapsed time.Duration) string {
	return fmt.Sprintf("unfinished: the run stopped it after %s of modeled time", elapsed.Round(time.Microsecond))
}

// Stopped reports whether err says the proxier was stopped mid-sync: the
// sync was cut short (a restart, the run's end), it did not fail.
func Stopped(err error) bool { return errors.Is(err, syscall.ECANCELED) }

type guardedIPVS struct {
	IPVS
	g *guard
}

func (w guardedIPVS) Service(k ServiceKey) (VirtualServer, error) {
	if w.g.stopped.Load() {
		return VirtualServer{}, StoppedError("ipvs get service " + k.String())
	}
	return w.IPVS.Service(k)
}

func (w guardedIPVS) Services() ([]VirtualServer, error) {
	if w.g.stopped.Load() {
		return nil, StoppedError("ipvs list services")
	}
	return w.IPVS.Services()
}

func (w guardedIPVS) AddService(s VirtualServer) error {
	if w.g.stopped.Load() {
		return StoppedError("ipvs add service " + s.ServiceKey.String())
	}
	return w.IPVS.AddService(s)
}

func (w guardedIPVS) UpdateService(s VirtualServer) error {
	if w.g.stopped.Load() {
		return StoppedError("ipvs update service " + s.ServiceKey.String())
	}
	return w.IPVS.UpdateService(s)
}

func (w guardedIPVS) DeleteService(k ServiceKey) error {
	if w.g.stopped.Load() {
		return StoppedError("ipvs delete service " + k.String())
	}
	return w.IPVS.DeleteService(k)
}

func (w guardedIPVS) Destinations(k ServiceKey) ([]RealServer, error) {
	if w.g.stopped.Load() {
		return nil, StoppedError("ipvs list destinations of " + k.String())
	}
	return w.IPVS.Destinations(k)
}

func (w guardedIPVS) AddDestination(k ServiceKey, r RealServer) error {
	if w.g.stopped.Load() {
		return StoppedError("ipvs add destination " + k.String())
	}
	return w.IPVS.AddDestination(k, r)
}

func (w guardedIPVS) UpdateDestination(k ServiceKey, r RealServer) error {
	if w.g.stopped.Load() {
		return StoppedError("ipvs update destination " + k.String())
	}
	return w.IPVS.UpdateDestination(k, r)
}

func (w guardedIPVS) DeleteDestination(k ServiceKey, r RealServer) error {
	if w.g.stopped.Load() {
		return StoppedError("ipvs delete destination " + k.String())
	}
	return w.IPVS.DeleteDestination(k, r)
}

type guardedIPSet struct {
	IPSet
	g *guard
}

func (w guardedIPSet) Sets() ([]Set, error) {
	if w.g.stopped.Load() {
		return nil, StoppedError("ipset list")
	}
	return w.IPSet.Sets()
}

func (w guardedIPSet) Entries(name string) ([]string, error) {
	if w.g.stopped.Load() {
		return nil, StoppedError("ipset list " + name)
	}
	return w.IPSet.Entries(name)
}

func (w guardedIPSet) CreateSet(s Set) error {
	if w.g.stopped.Load() {
		return StoppedError("ipset create " + s.Name)
	}
	return w.IPSet.CreateSet(s)
}

func (w guardedIPSet) DestroySet(name string) error {
	if w.g.stopped.Load() {
		return StoppedError("ipset destroy " + name)
	}
	return w.IPSet.DestroySet(name)
}

func (w guardedIPSet) Apply(changes []SetChange) error {
	if w.g.stopped.Load() {
		return StoppedError(fmt.Sprintf("ipset apply (%d sets)", len(changes)))
	}
	if a, ok := w.IPSet.(StoppableIPSet); ok {
		return a.ApplyUntil(w.g.done, changes)
	}
	return w.IPSet.Apply(changes)
}

type guardedIPTables struct {
	IPTables
	g *guard
}

func (w guardedIPTables) Restore(f Family, payload []byte) error {
	if w.g.stopped.Load() {
		return StoppedError("iptables-restore")
	}
	return w.IPTables.Restore(f, payload)
}

func (w guardedIPTables) Save(f Family, table string) ([]byte, error) {
	if w.g.stopped.Load() {
		return nil, StoppedError("iptables-save -t " + table)
	}
	return w.IPTables.Save(f, table)
}

func (w guardedIPTables) Command(f Family, table string, args ...string) error {
	if w.g.stopped.Load() {
		return StoppedError("iptables -t " + table + " " + strings.Join(args, " "))
	}
	return w.IPTables.Command(f, table, args...)
}

type guardedLinks struct {
	Links
	g *guard
}

func (w guardedLinks) EnsureDummy(name string) (bool, error) {
	if w.g.stopped.Load() {
		return false, StoppedError("ensure dummy link " + name)
	}
	return w.Links.EnsureDummy(name)
}

func (w guardedLinks) DeleteLink(name string) error {
	if w.g.stopped.Load() {
		return StoppedError("delete link " + name)
	}
	return w.Links.DeleteLink(name)
}

func (w guardedLinks) Addresses(link string, f Family) ([]netip.Addr, error) {
	if w.g.stopped.Load() {
		return nil, StoppedError("list addresses of " + link)
	}
	return w.Links.Addresses(link, f)
}

func (w guardedLinks) AddAddress(link string, p netip.Prefix) error {
	if w.g.stopped.Load() {
		return StoppedError("bind " + p.String() + " to " + link)
	}
	return w.Links.AddAddress(link, p)
}

func (w guardedLinks) DelAddress(link string, p netip.Prefix) error {
	if w.g.stopped.Load() {
		return StoppedError("unbind " + p.String() + " from " + link)
	}
	return w.Links.DelAddress(link, p)
}

func (w guardedLinks) LocalAddresses(f Family, exclude ...string) ([]InterfaceAddr, error) {
	if w.g.stopped.Load() {
		return nil, StoppedError("list local addresses")
	}
	return w.Links.LocalAddresses(f, exclude...)
}

type guardedSysctls struct {
	Sysctls
	g *guard
}

func (w guardedSysctls) Sysctl(key string) (string, error) {
	if w.g.stopped.Load() {
		return "", StoppedError("sysctl " + key)
	}
	return w.Sysctls.Sysctl(key)
}

func (w guardedSysctls) SetSysctl(key, value string) error {
	if w.g.stopped.Load() {
		return StoppedError("sysctl " + key + "=" + value)
	}
	return w.Sysctls.SetSysctl(key, value)
}

type guardedConntrack struct {
	Conntrack
	g *guard
}

func (w guardedConntrack) Flows(f Family) ([]ConntrackFlow, error) {
	if w.g.stopped.Load() {
		return nil, StoppedError("conntrack list")
	}
	return w.Conntrack.Flows(f)
}

func (w guardedConntrack) Delete(f ConntrackFilter) (int, error) {
	if w.g.stopped.Load() {
		return 0, StoppedError("conntrack delete")
	}
	return w.Conntrack.Delete(f)
}

type guardedNFTables struct {
	NFTables
	g *guard
}

func (w guardedNFTables) Table(family knftables.Family, name string, options ...knftables.Option) (knftables.Interface, error) {
	t, err := w.NFTables.Table(family, name, options...)
	if err != nil {
		return nil, err
	}
	return guardedTable{t, w.g, string(family) + " " + name}, nil
}

// guardedTable refuses a stopped proxier's transactions and listings; a
// new transaction (which touches nothing) is still made.
type guardedTable struct {
	knftables.Interface
	g     *guard
	table string
}

func (w guardedTable) Run(ctx context.Context, tx *knftables.Transaction) error {
	if w.g.stopped.Load() {
		return StoppedError("nft transaction on " + w.table)
	}
	return w.Interface.Run(ctx, tx)
}

func (w guardedTable) Check(ctx context.Context, tx *knftables.Transaction) error {
	if w.g.stopped.Load() {
		return StoppedError("nft check on " + w.table)
	}
	return w.Interface.Check(ctx, tx)
}

func (w guardedTable) ListAll(ctx context.Context) (map[string][]string, error) {
	if w.g.stopped.Load() {
		return nil, StoppedError("nft list " + w.table)
	}
	return w.Interface.ListAll(ctx)
}

func (w guardedTable) List(ctx context.Context, objectType string) ([]string, error) {
	if w.g.stopped.Load() {
		return nil, StoppedError("nft list " + objectType + " of " + w.table)
	}
	return w.Interface.List(ctx, objectType)
}

func (w guardedTable) ListRules(ctx context.Context, chain string) ([]*knftables.Rule, error) {
	if w.g.stopped.Load() {
		return nil, StoppedError("nft list rules of " + w.table)
	}
	return w.Interface.ListRules(ctx, chain)
}

func (w guardedTable) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	if w.g.stopped.Load() {
		return nil, StoppedError("nft list " + objectType + " " + name + " of " + w.table)
	}
	return w.Interface.ListElements(ctx, objectType, name)
}

func (w guardedTable) ListCounters(ctx context.Context) ([]*knftables.Counter, error) {
	if w.g.stopped.Load() {
		return nil, StoppedError("nft list counters of " + w.table)
	}
	return w.Interface.ListCounters(ctx)
}
