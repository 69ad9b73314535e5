package kernel

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kpsim/kpsim/dataplane"
)

// The ipset strategies share one model of an entry: every string the proxier
// writes is parsed against its set's type (a bad one is EINVAL before any
// process or netlink message), and every entry read back, from the ipset
// tool or from a netlink dump, is formatted the same canonical way. That is
// what makes Entries return exactly the strings the proxier wrote, whatever
// the strategy.

// setInfo is what a set's entries depend on.
type setInfo struct {
	typ              dataplane.SetType
	family           dataplane.Family // IPv4 for bitmap:port
	portFrom, portTo uint16           // bitmap:port
}

// setEntry is one parsed ipset entry; which fields are used depends on the type.
type setEntry struct {
	ip    netip.Addr
	proto uint8 // IPPROTO_*; only with a port in hash types
	port  uint16
	ip2   netip.Addr // hash:ip,port,ip and the net of hash:ip,port,net
	cidr  uint8      // hash:net: prefix length of ip
	cidr2 uint8      // hash:ip,port,net: prefix length of ip2
}

var protoNames = map[string]uint8{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "sctp": unix.IPPROTO_SCTP}

func protoName(p uint8) string {
	for n, v := range protoNames {
		if v == p {
			return n
		}
	}
	return strconv.Itoa(int(p))
}

// supportedSetTypes are the types kube-proxy creates, with the field layout
// parseEntry expects.
var supportedSetTypes = []dataplane.SetType{
	dataplane.HashIP, dataplane.HashIPPort, dataplane.HashIPPortIP,
	dataplane.HashIPPortNet, dataplane.HashNet, dataplane.BitmapPort,
}

func isSupportedSetType(t dataplane.SetType) bool {
	for _, s := range supportedSetTypes {
		if s == t {
			return true
		}
	}
	return false
}

// parseEntry parses an entry in the ipset tool's syntax for a set. Like the
// tool it accepts an upper-case protocol, a port without protocol (tcp) and a
// protocol on a bitmap:port entry; the canonical form (formatEntry) has none
// of these. Unlike the tool it takes no host names and no bracketed IPv6
// addresses (the contract's entries never have them), and it checks a
// bitmap:port entry against the set's range, which the tool leaves to the
// kernel.
func parseEntry(info setInfo, s string) (setEntry, error) {
	var e setEntry
	bad := func(why string) (setEntry, error) {
		return setEntry{}, fmt.Errorf("entry %q for %s: %s: %w", s, info.typ, why, unix.EINVAL)
	}
	fields := strings.Split(s, ",")
	want := map[dataplane.SetType]int{
		dataplane.HashIP: 1, dataplane.HashNet: 1, dataplane.BitmapPort: 1,
		dataplane.HashIPPort: 2, dataplane.HashIPPortIP: 3, dataplane.HashIPPortNet: 3,
	}[info.typ]
	if want == 0 {
		return bad("unsupported set type")
	}
	if len(fields) != want {
		return bad(fmt.Sprintf("want %d comma-separated fields", want))
	}
	if info.typ == dataplane.BitmapPort {
		p := fields[0]
		if i := strings.IndexByte(p, ':'); i >= 0 {
			if _, ok := protoNames[strings.ToLower(p[:i])]; !ok {
				return bad("unknown protocol")
			}
			p = p[i+1:]
		}
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return bad("bad port")
		}
		e.port = uint16(port)
		if e.port < info.portFrom || e.port > info.portTo {
			return bad(fmt.Sprintf("port outside the set's range %d-%d", info.portFrom, info.portTo))
		}
		return e, nil
	}
	var err error
	if info.typ == dataplane.HashNet {
		var bits int
		if e.ip, bits, err = parsePrefix(fields[0], info.family); err != nil {
			return bad(err.Error())
		}
		e.cidr = uint8(bits)
		return e, nil
	}
	if e.ip, err = parseAddr(fields[0], info.family); err != nil {
		return bad(err.Error())
	}
	if info.typ == dataplane.HashIP {
		return e, nil
	}
	proto, port, ok := strings.Cut(fields[1], ":")
	if !ok {
		proto, port = "tcp", fields[1]
	}
	if e.proto, ok = protoNames[strings.ToLower(proto)]; !ok {
		return bad("unknown protocol " + proto)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return bad("bad port " + port)
	}
	e.port = uint16(p)
	switch info.typ {
	case dataplane.HashIPPortIP:
		if e.ip2, err = parseAddr(fields[2], info.family); err != nil {
			return bad(err.Error())
		}
	case dataplane.HashIPPortNet:
		var bits int
		if e.ip2, bits, err = parsePrefix(fields[2], info.family); err != nil {
			return bad(err.Error())
		}
		e.cidr2 = uint8(bits)
	}
	return e, nil
}

func parseAddr(s string, f dataplane.Family) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("bad address %q", s)
	}
	a = a.Unmap()
	if dataplane.FamilyOf(a) != f {
		return netip.Addr{}, fmt.Errorf("address %s is not %s", a, f)
	}
	return a, nil
}

// parsePrefix parses a net of a hash:net or hash:ip,port,net entry; a bare
// address is a host. The kernel stores the masked network, so do we.
func parsePrefix(s string, f dataplane.Family) (netip.Addr, int, error) {
	addr, bits, hasBits := strings.Cut(s, "/")
	a, err := parseAddr(addr, f)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	n := a.BitLen()
	if hasBits {
		if n, err = strconv.Atoi(bits); err != nil || n < 1 || n > a.BitLen() {
			return netip.Addr{}, 0, fmt.Errorf("bad prefix length %q", bits)
		}
	}
	return netip.PrefixFrom(a, n).Masked().Addr(), n, nil
}

// formatEntry is the canonical form, the one `ipset save` prints.
func formatEntry(t dataplane.SetType, e setEntry) string {
	var buf [96]byte // the longest, hash:ip,port,net over IPv6, fits: one allocation, the string's
	return string(appendEntry(buf[:0], t, e))
}

// appendEntry is formatEntry appending to b, without fmt: a read of every
// set formats each of thousands of entries.
func appendEntry(b []byte, t dataplane.SetType, e setEntry) []byte {
	net := func(b []byte, a netip.Addr, bits uint8) []byte {
		b = a.AppendTo(b)
		if int(bits) == a.BitLen() || bits == 0 {
			return b
		}
		return strconv.AppendUint(append(b, '/'), uint64(bits), 10)
	}
	ipPort := func(b []byte) []byte {
		b = append(append(e.ip.AppendTo(b), ','), protoName(e.proto)...)
		return strconv.AppendUint(append(b, ':'), uint64(e.port), 10)
	}
	switch t {
	case dataplane.BitmapPort:
		return strconv.AppendUint(b, uint64(e.port), 10)
	case dataplane.HashIP:
		return e.ip.AppendTo(b)
	case dataplane.HashNet:
		return net(b, e.ip, e.cidr)
	case dataplane.HashIPPort:
		return ipPort(b)
	case dataplane.HashIPPortIP:
		return e.ip2.AppendTo(append(ipPort(b), ','))
	case dataplane.HashIPPortNet:
		return net(append(ipPort(b), ','), e.ip2, e.cidr2)
	}
	return fmt.Appendf(b, "%+v", e)
}

// canonical parses and re-formats a batch's entries, failing on the first bad one.
func canonical(info setInfo, set string, entries []string) ([]string, error) {
	out := make([]string, len(entries))
	for i, s := range entries {
		e, err := parseEntry(info, s)
		if err != nil {
			return nil, fmt.Errorf("ipset %s: %w", set, err)
		}
		out[i] = formatEntry(info.typ, e)
	}
	return out, nil
}

func familyName(f dataplane.Family) string {
	if f == dataplane.IPv6 {
		return "inet6"
	}
	return "inet"
}

// checkSet validates a set description before it reaches the kernel.
func checkSet(s dataplane.Set) error {
	if s.Name == "" || len(s.Name) > 31 {
		return fmt.Errorf("ipset create %q: name must be 1-31 characters: %w", s.Name, unix.EINVAL)
	}
	if !isSupportedSetType(s.Type) {
		return fmt.Errorf("ipset create %s: type %q: %w", s.Name, s.Type, unix.EINVAL)
	}
	if s.Type == dataplane.BitmapPort && s.PortFrom > s.PortTo {
		return fmt.Errorf("ipset create %s: port range %d-%d: %w", s.Name, s.PortFrom, s.PortTo, unix.EINVAL)
	}
	if s.Type != dataplane.BitmapPort && s.Family != "" && s.Family != dataplane.IPv4 && s.Family != dataplane.IPv6 {
		return fmt.Errorf("ipset create %s: family %q: %w", s.Name, s.Family, unix.EINVAL)
	}
	return nil
}

// setFamily is the family a hash set is created with: IPv4 unless IPv6.
func setFamily(s dataplane.Set) dataplane.Family {
	if s.Family == dataplane.IPv6 && s.Type != dataplane.BitmapPort {
		return dataplane.IPv6
	}
	return dataplane.IPv4
}

// infoOf is what entries of a set depend on.
func infoOf(s dataplane.Set) setInfo {
	return setInfo{typ: s.Type, family: setFamily(s), portFrom: s.PortFrom, portTo: s.PortTo}
}
