// Package sim is the in-memory node kernel: it implements every dataplane
// interface with the kernel's semantics (the same errnos, limits and
// canonical forms) and charges each operation a modeled cost from a cost
// profile, so that a proxier run against it reports what a real node would
// take without needing one. The conformance suite in
// dataplane/conformance holds it to the same tests as the real kernel.
//
// Where the kernel's answer is not an errno, or not the contract's, the sim
// picks one and the real dataplane maps to it:
//
//   - IPVS unknown scheduler: ENOENT (the kernel fails to find ip_vs_NAME).
//     A negative weight: ERANGE, as ip_vs_ctl. A destination of the other
//     family: EINVAL (NAT forwarding cannot cross families). A missing
//     service on update, delete or destination calls: ENOENT (the kernel's
//     netlink answer is ESRCH; the contract says ENOENT).
//   - ipset: a full set (IPSET_ERR_HASH_FULL) is ENOSPC; an entry that does
//     not parse, is of the wrong family, or is outside a bitmap's range
//     (IPSET_ERR_BITMAP_RANGE) is EINVAL; destroying a set an iptables rule
//     matches is EBUSY. Only kube-proxy's protocols (tcp, udp, sctp) and
//     numeric ports are accepted; hash:ip does not expand CIDR ranges.
//   - iptables-restore: every failure is EINVAL with the payload's line
//     number, since the tool reports nothing finer than its exit status.
//   - Addresses: deleting an address that is not bound is EADDRNOTAVAIL
//     and also matches ENOENT and fs.ErrNotExist, as the Links contract says.
//   - Sysctls: a key outside the modeled list is ENOENT; a non-integer value EINVAL.
//   - Links: deleting a non-dummy link is EOPNOTSUPP.
//
// Costs: every operation is counted (Ops, the way dataplane.Count counts)
// and charged from the profile (Kernel reports the total). With a TimeScale
// s, s of each cost is slept (in chunks of at least a millisecond, after the
// kernel's lock is released) and the rest is unspent, which the proxier adds
// to its phase durations. On a modeled clock (SetClock, time scale 0) each
// cost is instead spent on the clock by the caller, operation by operation,
// and the proxier's own work is priced by the profile too (Compute): a run
// on the modeled clock measures nothing and repeats exactly.
package sim
