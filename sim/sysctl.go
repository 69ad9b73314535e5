package sim

import (
	"strconv"
	"strings"
	"syscall"

	"github.com/kpsim/kpsim/dataplane"
)

// defaultSysctls are the keys kube-proxy reads or writes, at the values a
// freshly booted kernel (IPVS and br_netfilter loaded) has on a node that
// routes pod traffic: forwarding is on before kube-proxy starts (the
// network plugin turns it on; the kernel testbed's node routes between its
// client and its pods), so both dataplanes leave it as it is. Other keys do
// not exist in the sim: reading or writing them is ENOENT, as for a missing
// /proc/sys file.
func defaultSysctls() map[string]string {
	return map[string]string{
		"net/ipv4/vs/conntrack":                              "0",
		"net/ipv4/vs/expire_nodest_conn":                     "0",
		"net/ipv4/vs/expire_quiescent_template":              "0",
		"net/ipv4/vs/conn_reuse_mode":                        "1",
		"net/ipv4/ip_forward":                                "1",
		"net/ipv4/conf/all/arp_ignore":                       "0",
		"net/ipv4/conf/all/arp_announce":                     "0",
		"net/ipv4/conf/all/route_localnet":                   "0",
		"net/ipv4/conf/all/rp_filter":                        "0",
		"net/ipv6/conf/all/forwarding":                       "1",
		"net/bridge/bridge-nf-call-iptables":                 "1",
		"net/bridge/bridge-nf-call-ip6tables":                "1",
		"net/netfilter/nf_conntrack_max":                     "262144",
		"net/netfilter/nf_conntrack_tcp_timeout_established": "432000",
		"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  "60",
		"net/netfilter/nf_conntrack_tcp_be_liberal":          "0",
		"net/netfilter/nf_conntrack_udp_timeout":             "30",
		"net/netfilter/nf_conntrack_udp_timeout_stream":      "120",
	}
}

// Sysctl reads a key. Reads are not counted (the contract counts only
// writes) but are charged what a write costs: the same open, one read or
// write, close of a /proc/sys file, which under emulation is 0.1-0.4 ms,
// and a full sync reads every key it ensures.
func (k *Kernel) Sysctl(key string) (string, error) {
	k.lock()
	defer k.unlock()
	k.charge(k.costs.op[dataplane.OpSysctlWrite])
	v, ok := k.sysctls[key]
	if !ok {
		return "", errorf(syscall.ENOENT, "sysctl %s", key)
	}
	return v, nil
}

// SetSysctl writes a key. Every modeled key is an integer, so anything else
// is EINVAL, as the kernel's proc_dointvec answers.
func (k *Kernel) SetSysctl(key, value string) error {
	k.lock()
	defer k.unlock()
	k.count(dataplane.OpSysctlWrite, 1)
	if k.faulty(dataplane.OpSysctlWrite) {
		if err := k.fault(dataplane.OpSysctlWrite, key); err != nil {
			return errorf(err, "sysctl %s=%s", key, value)
		}
	}
	if _, ok := k.sysctls[key]; !ok {
		return errorf(syscall.ENOENT, "sysctl %s=%s", key, value)
	}
	v := strings.TrimSpace(value)
	if _, err := strconv.ParseInt(v, 10, 64); err != nil {
		return errorf(syscall.EINVAL, "sysctl %s=%s: not an integer", key, value)
	}
	k.sysctls[key] = v
	return nil
}
