#!/bin/bash
# Builds the part of the VM's initramfs that does not change between runs:
# busybox, the Debian kernel's modules kpsim needs (in insmod order, computed
# here with kmod) and the dynamic userland tools with their libraries
# (ipset, ipvsadm, iptables legacy and nft, nft, ip, conntrack). Written as an
# uncompressed cpio (gzip costs seconds to unpack under TCG); run.sh appends a
# second cpio with kpsim's binaries, and the kernel unpacks both.
#
# usage: mkinitramfs.sh CACHE_DIR   (after setup.sh); prints the cpio's path
set -euo pipefail
W=${1:?usage: mkinitramfs.sh CACHE_DIR}
# shellcheck source=/dev/null
. "$W/kver.env"
KROOT=$W/kroot

# ip_vs and every scheduler (doctor lists them), dummy and veth links,
# conntrack with its netlink interface, each ipset type kube-proxy uses, and
# the netfilter pieces of kube-proxy's ruleset in both iptables variants
# (REJECT included: the KUBE-IPVS-FILTER rule uses it), and what nftables
# mode's table uses besides (numgen for its endpoint choice, fib for its
# node ports).
MODS="ip_vs ip_vs_rr ip_vs_wrr ip_vs_lc ip_vs_wlc ip_vs_lblc ip_vs_lblcr ip_vs_dh ip_vs_sh ip_vs_sed ip_vs_nq ip_vs_mh
 dummy veth bridge br_netfilter
 nf_conntrack nf_conntrack_netlink nf_nat
 ip_set ip_set_hash_ip ip_set_hash_ipport ip_set_hash_ipportip ip_set_hash_ipportnet ip_set_hash_net
 ip_set_hash_netport ip_set_bitmap_port xt_set
 xt_ipvs xt_MASQUERADE xt_mark xt_comment xt_conntrack xt_addrtype xt_physdev xt_statistic xt_nat xt_tcpudp
 xt_multiport xt_REDIRECT xt_recent
 iptable_nat iptable_filter iptable_mangle iptable_raw ip6table_nat ip6table_filter ip6table_mangle ip6table_raw
 ipt_REJECT ip6t_REJECT
 nf_tables nft_compat nft_chain_nat nft_ct nft_nat nft_masq nft_redir nft_reject_ipv4 nft_reject_ipv6
 nft_numgen nft_fib_ipv4 nft_fib_ipv6"
BINS="/usr/sbin/ipset /usr/sbin/ipvsadm /usr/sbin/xtables-legacy-multi /usr/sbin/xtables-nft-multi /usr/sbin/nft"
for b in /usr/sbin/ip /usr/bin/ip /usr/sbin/conntrack; do
	[ -x "$b" ] && BINS="$BINS $b"
done

# Rebuild only when an input changed.
key=$( (echo "$KVER $MODS $BINS"; sha256sum /usr/bin/busybox "$0"; for b in $BINS; do sha256sum "$(readlink -f "$b")"; done) | sha256sum | cut -c1-16)
OUT=$W/base-$key.cpio
if [ -s "$OUT" ]; then
	echo "$OUT"
	exit 0
fi

T=$W/base.tree
rm -rf "$T"
mkdir -p "$T"/{usr/bin,usr/sbin,usr/lib,usr/lib64,proc,sys,dev,run,tmp,etc,var,kpsim/bin}
for d in bin sbin lib lib64; do ln -s usr/$d "$T/$d"; done
ln -s ../run "$T/var/run"
cp /usr/bin/busybox "$T/usr/bin/busybox"

: >"$T/modules.list"
# shellcheck disable=SC2086 # the module list is split on purpose
for m in $MODS; do
	modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" || { echo "mkinitramfs: no module $m in $KVER" >&2; exit 1; }
done | awk '$1=="insmod"{print $2}' | awk '!seen[$0]++' | while read -r ko; do
	rel=${ko#"$KROOT"}
	rel=/usr${rel#/usr}
	mkdir -p "$T$(dirname "$rel")"
	cp "$ko" "$T$rel"
	echo "$rel" >>"$T/modules.list"
done
cp "$KROOT/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$T/usr/lib/modules/$KVER/"
depmod -b "$T" "$KVER"

# shellcheck disable=SC2086
for b in $BINS; do cp -L "$b" "$T$b"; done
mkdir -p "$T/usr/lib/x86_64-linux-gnu"
cp -a /usr/lib/x86_64-linux-gnu/xtables "$T/usr/lib/x86_64-linux-gnu/" # dlopen()ed: ldd does not list them
# shellcheck disable=SC2086
ldd $BINS /usr/lib/x86_64-linux-gnu/xtables/*.so 2>/dev/null |
	awk '/=>/ && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u | while read -r lib; do
	dst=/usr${lib#/usr}
	mkdir -p "$T$(dirname "$dst")"
	cp "$(readlink -f "$lib")" "$T$dst"
done
for v in legacy nft; do
	for t in iptables ip6tables; do
		for s in "" -save -restore; do ln -sf "xtables-$v-multi" "$T/usr/sbin/$t-$v$s"; done
	done
done
for t in iptables ip6tables; do
	for s in "" -save -restore; do ln -sf "$t-legacy$s" "$T/usr/sbin/$t$s"; done
done
cp /etc/protocols /etc/services "$T/etc/"
echo 'hosts: files' >"$T/etc/nsswitch.conf"
echo 'root:x:0:0:root:/root:/bin/sh' >"$T/etc/passwd"

rm -f "$W"/base-*.cpio
(cd "$T" && find . -print0 | cpio --null -o -H newc --quiet) >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "mkinitramfs: $(wc -l <"$T/modules.list") modules, $(du -sh "$T" | cut -f1) unpacked" >&2
rm -rf "$T"
echo "$OUT"
