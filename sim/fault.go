package sim

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/kpsim/kpsim/dataplane"
)

// Fault makes chosen operations fail, so that the proxier's error paths run.
// A fault is checked before the operation changes any state: a failed
// operation has no effect (for an ipset batch, the entries before the failing
// one stay applied, as with the real tools).
type Fault struct {
	Op dataplane.Op
	// Object, when set, limits the fault to operations whose object contains
	// it: the service key ("10.96.0.5:80/TCP"), "SERVICE DEST" for
	// destinations ("10.96.0.5:80/TCP 10.0.0.1:8080"), "SET ENTRY" for ipset
	// entries ("KUBE-CLUSTER-IP 10.96.0.5,tcp:80"), the set name for
	// create/destroy/list, "LINK PREFIX" for addresses ("kube-ipvs0
	// 10.96.0.5/32"), the link name for link-create and address-list, the
	// payload for iptables-restore, "FAMILY TABLE" for iptables-save, the key
	// for sysctl-write, and the filter for conntrack-delete.
	Object string
	// Every fails every Nth matching operation (the Nth, 2Nth, ...).
	Every int
	// Times fails the next Times matching operations, then the fault is spent.
	// With neither Every nor Times, every matching operation fails until
	// ClearFaults.
	Times int
	// Err is the errno returned, wrapped with the operation; 0 means EIO.
	Err syscall.Errno
}

type faultState struct {
	Fault
	seen, failed int
}

// InjectFault adds a fault. Faults accumulate; the first that fires wins.
func (k *Kernel) InjectFault(f Fault) error {
	if f.Op < 0 || int(f.Op) >= nOps {
		return fmt.Errorf("sim: fault: unknown operation %d", int(f.Op))
	}
	if f.Every < 0 || f.Times < 0 || (f.Every > 0 && f.Times > 0) {
		return fmt.Errorf("sim: fault on %s: set at most one of Every (%d) and Times (%d), not negative", f.Op, f.Every, f.Times)
	}
	if f.Err == 0 {
		f.Err = syscall.EIO
	}
	k.lock()
	defer k.unlock()
	k.faults = append(k.faults, &faultState{Fault: f})
	k.faultOps[f.Op]++
	return nil
}

// ClearFaults removes every fault.
func (k *Kernel) ClearFaults() {
	k.lock()
	defer k.unlock()
	k.faults = nil
	k.faultOps = [nOps]int{}
}

// faulty reports whether any fault targets op; callers build the object
// string only then, keeping the hot path free of formatting.
func (k *Kernel) faulty(op dataplane.Op) bool { return k.faultOps[op] > 0 }

// fault returns the injected error for an operation on obj, or nil.
func (k *Kernel) fault(op dataplane.Op, obj string) error {
	for i, f := range k.faults {
		if f.Op != op || !strings.Contains(obj, f.Object) {
			continue
		}
		f.seen++
		switch {
		case f.Every > 0:
			if f.seen%f.Every != 0 {
				continue
			}
		case f.Times > 0:
			f.failed++
			if f.failed >= f.Times {
				k.faults = append(k.faults[:i:i], k.faults[i+1:]...)
				k.faultOps[op]--
			}
		}
		return fmt.Errorf("injected fault: %w", f.Err)
	}
	return nil
}
