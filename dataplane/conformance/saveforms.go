package conformance

import "github.com/kpsim/kpsim/dataplane"

// SaveForm is a rule as written to iptables-restore and as iptables-save
// prints it back (the text after "-A CHAIN"). Each was found by restoring
// In on a kernel and saving it, with iptables 1.8.9, legacy and nft alike;
// the suite holds every dataplane to them and dataplane.CanonicalRule must
// give Saved for In.
type SaveForm struct {
	Family    dataplane.Family
	Table     string // "filter" unless said
	In, Saved string
	// IPVSMatch: the rule uses iptables' ipvs match (xt_ipvs).
	IPVSMatch bool
}

// SaveFormSet is the set SaveForms match, a hash:ip of the form's family.
const SaveFormSet = "KPSIM-FORM"

// SaveForms are the rewrites iptables-save makes that kpsim relies on:
// every spelling kube-proxy's ruleset uses, and the neighbouring ones.
var SaveForms = []SaveForm{
	// Generic options first (-s -d -i -o -p), long forms short, addresses
	// masked with their prefix length, protocols by name.
	{Family: dataplane.IPv4, In: `-m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KPSIM-FORM dst ! -s 10.244.0.0/16 -j RETURN`,
		Saved: `! -s 10.244.0.0/16 -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KPSIM-FORM dst -j RETURN`},
	{Family: dataplane.IPv4, In: `-s 10.0.0.1 -j RETURN`, Saved: `-s 10.0.0.1/32 -j RETURN`},
	{Family: dataplane.IPv4, In: `-s 127.0.0.0/8 -j RETURN`, Saved: `-s 127.0.0.0/8 -j RETURN`},
	{Family: dataplane.IPv4, In: `-i eth0 -o eth1 -s 10.1.2.3/8 ! -d 10.0.0.1 -j RETURN`, Saved: `-s 10.0.0.0/8 ! -d 10.0.0.1/32 -i eth0 -o eth1 -j RETURN`},
	{Family: dataplane.IPv4, In: `--src 10.0.0.1 --protocol udp --in-interface eth0 -j RETURN`, Saved: `-s 10.0.0.1/32 -i eth0 -p udp -j RETURN`},
	{Family: dataplane.IPv4, In: `-p 6 -j RETURN`, Saved: `-p tcp -j RETURN`},
	{Family: dataplane.IPv4, In: `-p 17 -j RETURN`, Saved: `-p udp -j RETURN`},
	{Family: dataplane.IPv4, In: `-p 132 -j RETURN`, Saved: `-p sctp -j RETURN`},
	{Family: dataplane.IPv4, In: `! -p TCP -j RETURN`, Saved: `! -p tcp -j RETURN`},
	{Family: dataplane.IPv6, In: `-s fd00:0:0::1 -d 2001:DB8::/32 -j RETURN`, Saved: `-s fd00::1/128 -d 2001:db8::/32 -j RETURN`},
	{Family: dataplane.IPv6, In: `-s ::1/128 -j RETURN`, Saved: `-s ::1/128 -j RETURN`},
	{Family: dataplane.IPv6, In: `-s fd00::1:2/64 -j RETURN`, Saved: `-s fd00::/64 -j RETURN`},

	// A protocol's own options load its match where they appear; its
	// options print in the match's order, under their short names.
	{Family: dataplane.IPv4, In: `-p tcp --dport 80 -j RETURN`, Saved: `-p tcp -m tcp --dport 80 -j RETURN`},
	{Family: dataplane.IPv4, In: `-p TCP -m tcp --dport 80 -d 10.0.0.0/8 -j RETURN`, Saved: `-d 10.0.0.0/8 -p tcp -m tcp --dport 80 -j RETURN`},
	{Family: dataplane.IPv4, In: `-p tcp ! --dport 80 -j RETURN`, Saved: `-p tcp -m tcp ! --dport 80 -j RETURN`},
	{Family: dataplane.IPv4, In: `-p tcp --destination-port 80 --source-port 1000:2000 -j RETURN`, Saved: `-p tcp -m tcp --sport 1000:2000 --dport 80 -j RETURN`},
	{Family: dataplane.IPv4, In: `-p udp -m comment --comment x --sport 53 -j RETURN`, Saved: `-p udp -m comment --comment x -m udp --sport 53 -j RETURN`},
	{Family: dataplane.IPv4, In: `-p tcp -m tcp -m comment --comment x --dport 80 -j RETURN`, Saved: `-p tcp -m tcp --dport 80 -m comment --comment x -j RETURN`},
	{Family: dataplane.IPv4, In: `-p tcp ! --syn -j RETURN`, Saved: `-p tcp -m tcp ! --tcp-flags FIN,SYN,RST,ACK SYN -j RETURN`},
	{Family: dataplane.IPv4, In: `-m multiport -p tcp --dports 80,443 -j RETURN`, Saved: `-p tcp -m multiport --dports 80,443 -j RETURN`},
	{Family: dataplane.IPv4, In: `-p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KPSIM-FORM dst -j RETURN`,
		Saved: `-p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KPSIM-FORM dst -j RETURN`},

	// Free text is quoted unless it is one word of letters, digits, '_'
	// and '-'; quotes and backslashes in it are escaped.
	{Family: dataplane.IPv4, In: `-m comment --comment single -j RETURN`, Saved: `-m comment --comment single -j RETURN`},
	{Family: dataplane.IPv4, In: `-m comment --comment "a_b-C9" -j RETURN`, Saved: `-m comment --comment a_b-C9 -j RETURN`},
	{Family: dataplane.IPv4, In: `-m comment --comment "a.b" -j RETURN`, Saved: `-m comment --comment "a.b" -j RETURN`},
	{Family: dataplane.IPv4, In: `-m comment --comment "with type 'hash ip:port'" -j RETURN`, Saved: `-m comment --comment "with type \'hash ip:port\'" -j RETURN`},
	{Family: dataplane.IPv4, In: `-m comment --comment "back\\slash" -j RETURN`, Saved: `-m comment --comment "back\\slash" -j RETURN`},
	{Family: dataplane.IPv4, In: `-m comment --comment "" -j RETURN`, Saved: `-m comment --comment "" -j RETURN`},

	// The target comes last, whatever was written after it.
	{Family: dataplane.IPv4, In: `-j ACCEPT -m comment --comment x`, Saved: `-m comment --comment x -j ACCEPT`},

	// Marks: every way of setting one is --set-xmark VALUE/MASK; values
	// in short hexadecimal; a match's all-ones mask left out.
	{Family: dataplane.IPv4, In: `-j MARK --or-mark 0x00004000`, Saved: `-j MARK --set-xmark 0x4000/0x4000`},
	{Family: dataplane.IPv4, In: `-j MARK --xor-mark 0x00004000`, Saved: `-j MARK --set-xmark 0x4000/0x0`},
	{Family: dataplane.IPv4, In: `-j MARK --and-mark 0x4000`, Saved: `-j MARK --set-xmark 0x0/0xffffbfff`},
	{Family: dataplane.IPv4, In: `-j MARK --set-mark 0x4000`, Saved: `-j MARK --set-xmark 0x4000/0xffffffff`},
	{Family: dataplane.IPv4, In: `-j MARK --set-mark 16384`, Saved: `-j MARK --set-xmark 0x4000/0xffffffff`},
	{Family: dataplane.IPv4, In: `-j MARK --set-mark 0x4000/0xffff`, Saved: `-j MARK --set-xmark 0x4000/0xffff`},
	{Family: dataplane.IPv4, In: `-j MARK --set-xmark 0x00004000/0x00004000`, Saved: `-j MARK --set-xmark 0x4000/0x4000`},
	{Family: dataplane.IPv4, In: `-j MARK --set-xmark 0x4000`, Saved: `-j MARK --set-xmark 0x4000/0xffffffff`},
	{Family: dataplane.IPv4, In: `-m mark ! --mark 0x00004000/0x00004000 -j RETURN`, Saved: `-m mark ! --mark 0x4000/0x4000 -j RETURN`},
	{Family: dataplane.IPv4, In: `-m mark --mark 0x4000/0xffffffff -j RETURN`, Saved: `-m mark --mark 0x4000 -j RETURN`},
	{Family: dataplane.IPv4, In: `-m mark --mark 0 -j RETURN`, Saved: `-m mark --mark 0x0 -j RETURN`},

	// Connection states in the kernel's order.
	{Family: dataplane.IPv4, In: `-m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT`, Saved: `-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`},
	{Family: dataplane.IPv4, In: `-m conntrack --ctstate established,new -j ACCEPT`, Saved: `-m conntrack --ctstate NEW,ESTABLISHED -j ACCEPT`},
	{Family: dataplane.IPv4, In: `-m conntrack --ctstate DNAT,SNAT,UNTRACKED,ESTABLISHED,RELATED,NEW,INVALID -j RETURN`,
		Saved: `-m conntrack --ctstate INVALID,NEW,RELATED,ESTABLISHED,UNTRACKED,SNAT,DNAT -j RETURN`},
	{Family: dataplane.IPv4, In: `-m conntrack ! --ctstate NEW -j RETURN`, Saved: `-m conntrack ! --ctstate NEW -j RETURN`},

	// A bare REJECT says which reply it sends.
	{Family: dataplane.IPv4, In: `-m conntrack --ctstate NEW -m set --match-set KPSIM-FORM dst -j REJECT`,
		Saved: `-m conntrack --ctstate NEW -m set --match-set KPSIM-FORM dst -j REJECT --reject-with icmp-port-unreachable`},
	{Family: dataplane.IPv6, In: `-j REJECT`, Saved: `-j REJECT --reject-with icmp6-port-unreachable`},
	{Family: dataplane.IPv4, In: `-p tcp -j REJECT --reject-with tcp-rst`, Saved: `-p tcp -j REJECT --reject-with tcp-reset`},
	{Family: dataplane.IPv4, In: `-j REJECT --reject-with icmp-net-prohibited`, Saved: `-j REJECT --reject-with icmp-net-prohibited`},

	// Written as they are printed.
	{Family: dataplane.IPv4, In: `-m addrtype --dst-type LOCAL --src-type LOCAL -j RETURN`, Saved: `-m addrtype --src-type LOCAL --dst-type LOCAL -j RETURN`},
	{Family: dataplane.IPv4, In: `-m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT`, Saved: `-m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT`},
	{Family: dataplane.IPv4, In: `-m set ! --match-set KPSIM-FORM dst -j RETURN`, Saved: `-m set ! --match-set KPSIM-FORM dst -j RETURN`},
	{Family: dataplane.IPv4, In: `-m set --match-set KPSIM-FORM src --return-nomatch -j RETURN`, Saved: `-m set --match-set KPSIM-FORM src --return-nomatch -j RETURN`},
	{Family: dataplane.IPv4, In: `-m state --state NEW,ESTABLISHED -j RETURN`, Saved: `-m state --state NEW,ESTABLISHED -j RETURN`},
	{Family: dataplane.IPv4, Table: "nat", In: `-m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`,
		Saved: `-m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`},

	// iptables mode's: the statistic match keeps a 31-bit fraction, recent
	// prints its options in its own order, DNAT's are kept.
	{Family: dataplane.IPv4, Table: "nat", In: `-m comment --comment "x" -m statistic --mode random --probability 0.3333333333 -j RETURN`,
		Saved: `-m comment --comment x -m statistic --mode random --probability 0.33333333349 -j RETURN`},
	{Family: dataplane.IPv4, Table: "nat", In: `-m statistic --mode random --probability 0.5000000000 -j RETURN`,
		Saved: `-m statistic --mode random --probability 0.50000000000 -j RETURN`},
	{Family: dataplane.IPv4, Table: "nat", In: `-m tcp -p tcp -j DNAT --to-destination 10.244.1.204:8080`,
		Saved: `-p tcp -m tcp -j DNAT --to-destination 10.244.1.204:8080`},
	{Family: dataplane.IPv4, Table: "nat", In: `-m recent --set --name KUBE-SEP-X --mask 255.255.255.255 --rsource -m tcp -p tcp -j DNAT --to-destination 10.0.0.1:80`,
		Saved: `-p tcp -m recent --set --name KUBE-SEP-X --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 10.0.0.1:80`},
	{Family: dataplane.IPv4, Table: "nat", In: `-m recent --name KUBE-SEP-X --mask 255.255.255.255 --rsource --rcheck --seconds 10800 --reap -j RETURN`,
		Saved: `-m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-X --mask 255.255.255.255 --rsource -j RETURN`},

	// The ipvs match prints the protocol by number, the address without a
	// host's prefix length, in its own option order.
	{Family: dataplane.IPv4, In: `-s 198.51.100.2 -m ipvs --vaddr 198.51.100.2 --vproto tcp --vport 80 -j DROP`,
		Saved: `-s 198.51.100.2/32 -m ipvs --vproto 6 --vaddr 198.51.100.2 --vport 80 -j DROP`, IPVSMatch: true},
	{Family: dataplane.IPv6, In: `-s 2001:db8:1::2 -m ipvs --vaddr 2001:db8:1::2 --vproto tcp --vport 80 -j DROP`,
		Saved: `-s 2001:db8:1::2/128 -m ipvs --vproto 6 --vaddr 2001:db8:1::2 --vport 80 -j DROP`, IPVSMatch: true},
}
