package observed

import (
	"context"
	"net/netip"

	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
)

// discard is a kernel that does nothing and holds nothing: the release's
// operations are mirrored onto it, through dataplane.Count, to be counted.
// EnsureDummy says it created the link: it is mirrored only for a link the
// release's own call created.
func discard() dataplane.Dataplane {
	var n nothing
	return dataplane.Dataplane{IPVS: n, IPSet: n, IPTables: n, Links: n, Sysctls: n, Conntrack: n, NFTables: n}
}

type nothing struct{}

func (nothing) Services() ([]dataplane.VirtualServer, error) { return nil, nil }
func (nothing) Service(dataplane.ServiceKey) (dataplane.VirtualServer, error) {
	return dataplane.VirtualServer{}, nil
}
func (nothing) AddService(dataplane.VirtualServer) error                           { return nil }
func (nothing) UpdateService(dataplane.VirtualServer) error                        { return nil }
func (nothing) DeleteService(dataplane.ServiceKey) error                           { return nil }
func (nothing) Destinations(dataplane.ServiceKey) ([]dataplane.RealServer, error)  { return nil, nil }
func (nothing) AddDestination(dataplane.ServiceKey, dataplane.RealServer) error    { return nil }
func (nothing) UpdateDestination(dataplane.ServiceKey, dataplane.RealServer) error { return nil }
func (nothing) DeleteDestination(dataplane.ServiceKey, dataplane.RealServer) error { return nil }
func (nothing) Sets() ([]dataplane.Set, error)                                     { return nil, nil }
func (nothing) Entries(string) ([]string, error)                                   { return nil, nil }
func (nothing) CreateSet(dataplane.Set) error                                      { return nil }
func (nothing) DestroySet(string) error                                            { return nil }
func (nothing) Apply([]dataplane.SetChange) error                                  { return nil }
func (nothing) Restore(dataplane.Family, []byte) error                             { return nil }
func (nothing) Save(dataplane.Family, string) ([]byte, error)                      { return nil, nil }
func (nothing) Command(dataplane.Family, string, ...string) error                  { return nil }
func (nothing) EnsureDummy(string) (bool, error)                                   { return true, nil }
func (nothing) DeleteLink(string) error                                            { return nil }
func (nothing) Addresses(string, dataplane.Family) ([]netip.Addr, error)           { return nil, nil }
func (nothing) AddAddress(string, netip.Prefix) error                              { return nil }
func (nothing) DelAddress(string, netip.Prefix) error                              { return nil }
func (nothing) Sysctl(string) (string, error)                                      { return "", nil }
func (nothing) SetSysctl(string, string) error                                     { return nil }
func (nothing) Flows(dataplane.Family) ([]dataplane.ConntrackFlow, error)          { return nil, nil }
func (nothing) Delete(dataplane.ConntrackFilter) (int, error)                      { return 0, nil }

func (nothing) LocalAddresses(dataplane.Family, ...string) ([]dataplane.InterfaceAddr, error) {
	return nil, nil
}

func (nothing) Table(knftables.Family, string, ...knftables.Option) (knftables.Interface, error) {
	return noTable{}, nil
}

// noTable is an nftables table that takes what a sync issues (the calls
// dataplane.Count counts) and holds nothing; nothing else is called on it.
type noTable struct{ knftables.Interface }

func (noTable) Run(context.Context, *knftables.Transaction) error { return nil }
func (noTable) List(context.Context, string) ([]string, error)    { return nil, nil }
func (noTable) ListElements(context.Context, string, string) ([]*knftables.Element, error) {
	return nil, nil
}
