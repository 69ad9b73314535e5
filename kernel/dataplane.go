// Package kernel is the dataplane on the Linux kernel, the counterpart of the
// in-memory kernel in sim/: the dataplane interfaces over IPVS and ipset
// netlink or the ipset tool, iptables-restore, links and addresses,
// conntrack and sysctls, and detection of what the kernel offers. The
// namespaces a kernel run lives in are kernel/netns; the topology, real
// probes and the scenario backend around it, kernel/testbed; measuring its
// costs for the sim, calibrate.
//
// The dataplane works in the network namespace of the current process. kpsim
// moves its whole process into a fresh namespace before any kernel work, so
// every netlink socket and every tool it executes (ipset, iptables-restore)
// sees that namespace and never the host's.
package kernel

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"

	"github.com/moby/ipvs"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel/netns"
)

// Options configure the kernel dataplane.
type Options struct {
	// IPSetStrategy is how ipset batches reach the kernel; empty means
	// dataplane.DefaultIPSetStrategy.
	IPSetStrategy dataplane.IPSetStrategy
	// IPTablesMode is "legacy" or "nft"; empty detects the mode the way
	// kube-proxy's image does (see DetectIPTablesMode).
	IPTablesMode string
}

// Kernel is the dataplane of the current network namespace.
type Kernel struct {
	link      *netlink.Handle
	addrs     *dumpSocket  // listing addresses, see links
	ipvs      *ipvs.Handle // nil when the kernel has no IPVS
	ipvsMu    sync.Mutex   // see ipvsTable
	ipvsErr   error        // why ipvs is nil
	ipset     dataplane.IPSet
	ipsetNL   *ipsetNetlink // open for every strategy: set types are looked up over netlink
	iptables  *iptables
	sysctls   sysctls
	conntrack conntrack
}

// New opens the dataplane of the current network namespace. A kernel without
// IPVS still yields a Kernel (ipset and iptables work on the host kernel);
// its IPVS methods then fail with the reason, and Detect says so up front.
func New(opts Options) (*Kernel, error) {
	strategy := opts.IPSetStrategy
	if strategy == "" {
		strategy = dataplane.DefaultIPSetStrategy
	}
	// The network rule: never program the namespace kpsim was started in.
	if !netns.Isolated() {
		return nil, netns.ErrNotIsolated
	}
	mode := opts.IPTablesMode
	if mode == "" {
		mode = DetectIPTablesMode()
	}
	if mode != "legacy" && mode != "nft" {
		return nil, fmt.Errorf("iptables mode %q: want legacy or nft", mode)
	}
	// Not XFRM: netlink.NewHandle opens every family by default, and xfrm_user
	// is a module that Debian's kernel does not load in the VM.
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	k := &Kernel{link: h, iptables: &iptables{mode: mode}, conntrack: conntrack{h}}
	if k.addrs, err = newAddrSocket(); err != nil {
		h.Close()
		return nil, err
	}
	k.ipsetNL, err = newIPSetNetlink()
	if err != nil {
		k.addrs.Close()
		h.Close()
		return nil, err
	}
	switch strategy {
	case dataplane.IPSetNetlink:
		k.ipset = k.ipsetNL
	case dataplane.IPSetExec, dataplane.IPSetRestore:
		k.ipset = &ipsetCLI{restore: strategy == dataplane.IPSetRestore, types: k.ipsetNL}
	default:
		k.Close()
		return nil, fmt.Errorf("ipset strategy %q: want one of %v", strategy, dataplane.IPSetStrategies)
	}
	if err := ipvsAvailable(); err != nil {
		k.ipvsErr = err
	} else if k.ipvs, err = ipvs.New(""); err != nil {
		k.ipvsErr = fmt.Errorf("open IPVS netlink: %w", err)
	}
	return k, nil
}

// Dataplane returns the dataplane interfaces backed by this kernel.
func (k *Kernel) Dataplane() dataplane.Dataplane {
	return dataplane.Dataplane{
		IPVS:      ipvsTable{k},
		IPSet:     k.ipset,
		IPTables:  k.iptables,
		Links:     links{k.link, k.addrs},
		Sysctls:   k.sysctls,
		Conntrack: k.conntrack,
		NFTables:  nftables{},
	}
}

// HasIPVS reports whether this kernel has IPVS (nftables mode runs without).
func (k *Kernel) HasIPVS() bool { return k.ipvs != nil }

// IPTablesMode is the iptables variant in use, "legacy" or "nft" (after
// detection when Options left it empty), for a run's results to record.
func (k *Kernel) IPTablesMode() string { return k.iptables.mode }

// Close releases the netlink sockets. Kernel state stays as it is: it lives
// and dies with the namespace.
func (k *Kernel) Close() {
	if k.ipvs != nil {
		k.ipvs.Close()
	}
	if k.ipsetNL != nil {
		k.ipsetNL.close()
	}
	k.addrs.Close()
	k.link.Close()
}

// run executes a tool in the current namespace with stdin, returning its
// stdout. A failure carries the tool's stderr, which is how the tools report
// what went wrong (and how errnoFromTool classifies it).
func run(stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) && msg != "" {
			return stdout.Bytes(), &toolError{tool: name, msg: msg}
		}
		return stdout.Bytes(), fmt.Errorf("%s: %w", name, err)
	}
	return stdout.Bytes(), nil
}

// toolError is a tool that ran and failed; Unwrap classifies its message as
// an errno where the message is one the kernel's answer maps to.
type toolError struct {
	tool string
	msg  string
}

func (e *toolError) Error() string { return e.tool + ": " + e.msg }

func (e *toolError) Unwrap() error {
	m := strings.ToLower(e.msg)
	switch {
	case strings.Contains(m, "is full"):
		return unix.ENOSPC
	case strings.Contains(m, "in use"):
		return unix.EBUSY
	case strings.Contains(m, "already exists"), strings.Contains(m, "already added"):
		return unix.EEXIST
	case strings.Contains(m, "does not exist"), strings.Contains(m, "no chain/target/match by that name"),
		strings.Contains(m, "doesn't exist"), strings.Contains(m, "does a matching rule exist"),
		strings.Contains(m, "no such file or directory"):
		return unix.ENOENT
	case strings.Contains(m, "syntax error"), strings.Contains(m, "invalid"), strings.Contains(m, "unknown"),
		strings.Contains(m, "bad argument"), strings.Contains(m, "cannot be parsed"), strings.Contains(m, "error occurred at line"),
		strings.Contains(m, "out of the range"):
		return unix.EINVAL
	}
	return nil
}
