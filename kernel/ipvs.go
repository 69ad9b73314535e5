package kernel

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/moby/ipvs"
	"golang.org/x/sys/unix"

	"github.com/kpsim/kpsim/dataplane"
)

// ipvsTable is dataplane.IPVS over moby/ipvs. The handle's socket matches
// replies by sequence number and drops the ones it does not expect, so two
// proxiers (dual-stack) must not use it concurrently: Kernel.ipvsMu
// serialises them, as one kube-proxy process does with its single handle.
type ipvsTable struct{ k *Kernel }

var _ dataplane.IPVS = ipvsTable{}

// ipvsAvailable says why this namespace has no IPVS, or nil. /proc/net/ip_vs
// exists in every namespace once the module is loaded; when it is missing,
// modprobe is tried once, as kube-proxy's image does.
func ipvsAvailable() error {
	if _, err := os.Stat(procIPVS); err == nil {
		return nil
	}
	out, err := exec.Command("modprobe", "ip_vs").CombinedOutput()
	if _, serr := os.Stat(procIPVS); serr == nil {
		return nil
	}
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return errNoIPVS("no /proc/net/ip_vs and no modprobe to load it")
	case err != nil:
		return errNoIPVS("no /proc/net/ip_vs and " + strings.TrimPrefix(firstLine(string(out), err.Error()), "modprobe: "))
	}
	return errNoIPVS("no /proc/net/ip_vs after modprobe ip_vs")
}

// errNoIPVS is a kernel without IPVS; it matches EPROTONOSUPPORT.
type errNoIPVS string

func (e errNoIPVS) Error() string { return "module ip_vs not available: " + string(e) }
func (e errNoIPVS) Unwrap() error { return unix.EPROTONOSUPPORT }

func firstLine(s, fallback string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return fallback
	}
	return s
}

func (t ipvsTable) do(op, obj string, f func(h *ipvs.Handle) error) error {
	if t.k.ipvs == nil {
		return fmt.Errorf("ipvs %s %s: %w", op, obj, t.k.ipvsErr)
	}
	t.k.ipvsMu.Lock()
	err := f(t.k.ipvs)
	t.k.ipvsMu.Unlock()
	if err != nil {
		return fmt.Errorf("ipvs %s %s: %w", op, obj, ipvsErrno(err))
	}
	return nil
}

// ipvsErrno maps the kernel's answers to the contract's errnos: IPVS says
// ESRCH for a missing virtual server where every other facility says ENOENT.
func ipvsErrno(err error) error {
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("%w (kernel: %v)", unix.ENOENT, err)
	}
	return err
}

// Services reads the table in two reads whatever its size: the virtual
// servers from one netlink dump (every attribute: flags, persistence
// timeout, netmask, scheduler), their real servers from /proc/net/ip_vs of
// this namespace in one go. A netlink request per virtual server for its
// real servers costs a kernel round trip each, about 2.5 s at 5,000 in the
// VM, against about 0.4 s for the two reads (BenchmarkReadBack);
// /proc/net/ip_vs alone is not enough: it leaves out flags other than
// persistence and the netmask of other services, and prints the timeout in
// jiffies of a HZ the kernel does not tell.
func (t ipvsTable) Services() ([]dataplane.VirtualServer, error) {
	var svcs []*ipvs.Service
	err := t.do("list", "services", func(h *ipvs.Handle) (err error) {
		svcs, err = h.GetServices()
		return err
	})
	if err != nil {
		return nil, err
	}
	dests, err := readProcDestinations()
	if err != nil {
		return nil, err
	}
	out := make([]dataplane.VirtualServer, 0, len(svcs))
	for _, s := range svcs {
		if s.FWMark != 0 {
			continue // kube-proxy never creates firewall-mark services
		}
		vs, err := fromIPVSService(s)
		if err != nil {
			return nil, err
		}
		vs.Destinations = dests[vs.ServiceKey]
		out = append(out, vs)
	}
	return out, nil
}

// procIPVS is where the kernel prints a namespace's table.
const procIPVS = "/proc/net/ip_vs"

// threadProcIPVS is the table of the calling thread's namespace.
// /proc/net is the thread group leader's, which need not be the process's:
// a goroutine that moved a locked thread into a scratch namespace and ended
// (as capability detection does) leaves Go's main thread wedged there.
const threadProcIPVS = "/proc/thread-self/net/ip_vs"

// readProcDestinations reads every virtual server's real servers from
// /proc/net/ip_vs:
//
//	TCP  0A600001:0050 rr
//	  -> 0A010001:1F90      Masq    1      0          0
//	TCP  [fd00:0000:...:0001]:0050 rr persistent 2700000 FFFFFFFF
//	  -> [fd00:0001:...:0001]:1F90      Masq    1      0          0
func readProcDestinations() (map[dataplane.ServiceKey][]dataplane.RealServer, error) {
	runtime.LockOSThread()
	b, err := os.ReadFile(threadProcIPVS)
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("ipvs list: %w", err)
	}
	return parseProcDestinations(b)
}

// parseProcDestinations reads the table without allocating per line: at
// thousands of virtual servers the parse, not the kernel, is what an
// emulated machine spends its time on.
func parseProcDestinations(b []byte) (map[dataplane.ServiceKey][]dataplane.RealServer, error) {
	// One backing array for every real server, one map entry per service.
	pool := make([]dataplane.RealServer, 0, bytes.Count(b, []byte("->")))
	out := make(map[dataplane.ServiceKey][]dataplane.RealServer, bytes.Count(b, []byte("\n"))/4)
	var cur dataplane.ServiceKey
	have, from := false, 0
	flush := func() {
		if have && len(pool) > from {
			out[cur] = pool[from:len(pool):len(pool)]
		}
		have, from = false, len(pool)
	}
	var f [8][]byte
	for line := range bytes.Lines(b) {
		n := fields(line, &f)
		switch {
		case n >= 6 && string(f[0]) == "->":
			if !have {
				continue // a firewall-mark service's, or the header's
			}
			ap, err := procAddrPort(f[1])
			w, ok1 := atoi(f[3])
			active, ok2 := atoi(f[4])
			inactive, ok3 := atoi(f[5])
			if err != nil || !ok1 || !ok2 || !ok3 {
				return nil, fmt.Errorf("%s: %q: %w", procIPVS, line, errors.Join(err, unix.EINVAL))
			}
			pool = append(pool, dataplane.RealServer{Address: ap.Addr(), Port: ap.Port(), Weight: w, ActiveConns: active, InactiveConns: inactive})
		case n >= 2:
			flush()
			proto, ok := procProtocols[string(f[0])]
			if !ok {
				continue // the header, or a firewall-mark (FWM) service
			}
			ap, err := procAddrPort(f[1])
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %w", procIPVS, line, err)
			}
			cur, have = dataplane.ServiceKey{Address: ap.Addr(), Port: ap.Port(), Protocol: proto}, true
		}
	}
	flush()
	return out, nil
}

var procProtocols = map[string]dataplane.Protocol{"TCP": dataplane.TCP, "UDP": dataplane.UDP, "SCTP": dataplane.SCTP}

// fields splits a line at runs of blanks into f, returning how many it
// found (at most len(f)).
func fields(line []byte, f *[8][]byte) int {
	n := 0
	for n < len(f) {
		i := 0
		for i < len(line) && (line[i] == ' ' || line[i] == '\t' || line[i] == '\n') {
			i++
		}
		line = line[i:]
		if len(line) == 0 {
			break
		}
		j := 0
		for j < len(line) && line[j] != ' ' && line[j] != '\t' && line[j] != '\n' {
			j++
		}
		f[n] = line[:j]
		n++
		line = line[j:]
	}
	return n
}

// atoi reads a non-negative decimal number.
func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// hex reads a hexadecimal number of at most 8 digits.
func hex(b []byte) (uint32, bool) {
	if len(b) == 0 || len(b) > 8 {
		return 0, false
	}
	var v uint32
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint32(c-'0')
		case c >= 'A' && c <= 'F':
			v = v<<4 | uint32(c-'A'+10)
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint32(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// procAddrPort reads "0A010001:1F90" (IPv4, hexadecimal in network order)
// or "[fd00:0001:0000:0000:0000:0000:0000:0001]:1F90".
func procAddrPort(s []byte) (netip.AddrPort, error) {
	i := bytes.LastIndexByte(s, ':')
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	port, ok := hex(s[i+1:])
	if !ok || port > 0xffff {
		return netip.AddrPort{}, fmt.Errorf("port of %q", s)
	}
	host := s[:i]
	if len(host) > 2 && host[0] == '[' {
		a, err := netip.ParseAddr(string(host[1 : len(host)-1]))
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("address %q", s)
		}
		return netip.AddrPortFrom(a, uint16(port)), nil
	}
	v, ok := hex(host)
	if !ok || len(host) != 8 {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), uint16(port)), nil
}

func (t ipvsTable) AddService(vs dataplane.VirtualServer) error {
	s, err := toIPVSService(vs)
	if err != nil {
		return fmt.Errorf("ipvs add-service %s: %w", vs.ServiceKey, err)
	}
	return t.do("add-service", vs.ServiceKey.String(), func(h *ipvs.Handle) error { return h.NewService(s) })
}

func (t ipvsTable) UpdateService(vs dataplane.VirtualServer) error {
	s, err := toIPVSService(vs)
	if err != nil {
		return fmt.Errorf("ipvs update-service %s: %w", vs.ServiceKey, err)
	}
	return t.do("update-service", vs.ServiceKey.String(), func(h *ipvs.Handle) error { return h.UpdateService(s) })
}

func (t ipvsTable) DeleteService(k dataplane.ServiceKey) error {
	s, err := serviceID(k)
	if err != nil {
		return fmt.Errorf("ipvs delete-service %s: %w", k, err)
	}
	return t.do("delete-service", k.String(), func(h *ipvs.Handle) error { return h.DelService(s) })
}

// Destinations lists a virtual server's real servers. The kernel answers a
// dump for a missing service with an empty list, so an empty answer is
// checked against the service itself to report ENOENT as the contract says.
// Service reads one virtual server (IPVS_CMD_GET_SERVICE).
func (t ipvsTable) Service(k dataplane.ServiceKey) (dataplane.VirtualServer, error) {
	s, err := serviceID(k)
	if err != nil {
		return dataplane.VirtualServer{}, fmt.Errorf("ipvs get-service %s: %w", k, err)
	}
	var got *ipvs.Service
	err = t.do("get-service", k.String(), func(h *ipvs.Handle) (err error) {
		got, err = h.GetService(s)
		return err
	})
	if err != nil {
		return dataplane.VirtualServer{}, err
	}
	return fromIPVSService(got)
}

func (t ipvsTable) Destinations(k dataplane.ServiceKey) ([]dataplane.RealServer, error) {
	s, err := serviceID(k)
	if err != nil {
		return nil, fmt.Errorf("ipvs list-destinations %s: %w", k, err)
	}
	var dsts []*ipvs.Destination
	err = t.do("list-destinations", k.String(), func(h *ipvs.Handle) error {
		var err error
		if dsts, err = h.GetDestinations(s); err != nil || len(dsts) > 0 {
			return err
		}
		_, err = h.GetService(s)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]dataplane.RealServer, 0, len(dsts))
	for _, d := range dsts {
		a, ok := netip.AddrFromSlice(d.Address)
		if !ok {
			return nil, fmt.Errorf("ipvs list-destinations %s: kernel returned address %v", k, d.Address)
		}
		if k.Address.Is4() {
			a = a.Unmap()
		}
		out = append(out, dataplane.RealServer{
			Address: a, Port: d.Port, Weight: d.Weight,
			ActiveConns: d.ActiveConnections, InactiveConns: d.InactiveConnections,
		})
	}
	return out, nil
}

func (t ipvsTable) AddDestination(k dataplane.ServiceKey, r dataplane.RealServer) error {
	return t.destination("add-destination", k, r, (*ipvs.Handle).NewDestination)
}

func (t ipvsTable) UpdateDestination(k dataplane.ServiceKey, r dataplane.RealServer) error {
	return t.destination("update-destination", k, r, (*ipvs.Handle).UpdateDestination)
}

func (t ipvsTable) DeleteDestination(k dataplane.ServiceKey, r dataplane.RealServer) error {
	return t.destination("delete-destination", k, r, (*ipvs.Handle).DelDestination)
}

func (t ipvsTable) destination(op string, k dataplane.ServiceKey, r dataplane.RealServer,
	f func(*ipvs.Handle, *ipvs.Service, *ipvs.Destination) error) error {
	obj := k.String() + " -> " + r.AddrPort().String()
	s, err := serviceID(k)
	if err != nil {
		return fmt.Errorf("ipvs %s %s: %w", op, obj, err)
	}
	if !r.Address.IsValid() || dataplane.FamilyOf(r.Address) != dataplane.FamilyOf(k.Address) {
		return fmt.Errorf("ipvs %s %s: real server address not of the service's family: %w", op, obj, unix.EINVAL)
	}
	d := &ipvs.Destination{
		Address:       net.IP(r.Address.Unmap().AsSlice()),
		Port:          r.Port,
		Weight:        r.Weight,
		AddressFamily: s.AddressFamily,
		// ConnectionFlags 0 is IP_VS_CONN_F_MASQ: NAT, kube-proxy's forwarding method.
	}
	return t.do(op, obj, func(h *ipvs.Handle) error { return f(h, s, d) })
}

var ipProtos = map[dataplane.Protocol]uint16{
	dataplane.TCP:  unix.IPPROTO_TCP,
	dataplane.UDP:  unix.IPPROTO_UDP,
	dataplane.SCTP: unix.IPPROTO_SCTP,
}

// serviceID is the part of an ipvs.Service the kernel uses to find one.
func serviceID(k dataplane.ServiceKey) (*ipvs.Service, error) {
	proto, ok := ipProtos[k.Protocol]
	if !ok {
		return nil, fmt.Errorf("protocol %q: %w", k.Protocol, unix.EINVAL)
	}
	if !k.Address.IsValid() {
		return nil, fmt.Errorf("no address: %w", unix.EINVAL)
	}
	s := &ipvs.Service{Address: net.IP(k.Address.Unmap().AsSlice()), Port: k.Port, Protocol: proto, AddressFamily: unix.AF_INET}
	if dataplane.FamilyOf(k.Address) == dataplane.IPv6 {
		s.AddressFamily = unix.AF_INET6
	}
	return s, nil
}

func toIPVSService(vs dataplane.VirtualServer) (*ipvs.Service, error) {
	s, err := serviceID(vs.ServiceKey)
	if err != nil {
		return nil, err
	}
	s.SchedName = vs.Scheduler
	s.Flags = uint32(vs.Flags &^ dataplane.FlagHashed)
	s.Timeout = vs.Timeout
	s.Netmask = vs.Netmask
	return s, nil
}

func fromIPVSService(s *ipvs.Service) (dataplane.VirtualServer, error) {
	var proto dataplane.Protocol
	for p, n := range ipProtos {
		if n == s.Protocol {
			proto = p
		}
	}
	a, ok := netip.AddrFromSlice(s.Address)
	if !ok || proto == "" {
		return dataplane.VirtualServer{}, fmt.Errorf("ipvs list: kernel returned service %v:%d proto %d", s.Address, s.Port, s.Protocol)
	}
	if s.AddressFamily == unix.AF_INET {
		a = a.Unmap()
	}
	return dataplane.VirtualServer{
		ServiceKey: dataplane.ServiceKey{Address: a, Port: s.Port, Protocol: proto},
		Scheduler:  s.SchedName,
		Flags:      dataplane.ServiceFlags(s.Flags),
		Timeout:    s.Timeout,
		Netmask:    s.Netmask,
	}, nil
}
