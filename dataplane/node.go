package dataplane

import "net/netip"

// DummyLink is the dummy link kube-proxy's IPVS mode binds every service
// address to. The proxier creates it, state dumps read it, and a node's own
// addresses are every address except its.
const DummyLink = "kube-ipvs0"

// Schedulers are the IPVS schedulers kube-proxy accepts (its ipvs.scheduler
// setting), in the order its documentation lists them.
var Schedulers = []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "mh"}

// DefaultNodeAddresses are the node's own addresses, one per family, wherever
// a run says nothing else (the in-memory kernel's eth0, the kernel backend's
// node, a scenario's node, kpsim state without a Node object's address): sim
// and kernel runs of one scenario then program and probe the same NodePort
// addresses.
var DefaultNodeAddresses = map[Family]netip.Prefix{
	IPv4: netip.MustParsePrefix("192.168.0.10/24"),
	IPv6: netip.MustParsePrefix("fd00::10/64"),
}
