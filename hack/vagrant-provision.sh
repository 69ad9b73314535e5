#!/bin/bash
# Provisions the Vagrant VM (Debian 12) for kpsim's kernel backend: the
# kernel tools kube-proxy's IPVS mode drives, Go, the kernel modules, a kpsim
# build, and `kpsim doctor` as the verdict on whether the VM can run kernel
# scenarios. Safe to run again.
#
# usage: vagrant-provision.sh [SOURCE_DIR]   (default /vagrant)
set -euo pipefail

SRC=${1:-/vagrant}
GO_VERSION=${GO_VERSION:-1.26.0}
GO_ROOT=/usr/local/go
export DEBIAN_FRONTEND=noninteractive

apt-get update -qq
apt-get install -y -qq --no-install-recommends \
	ca-certificates curl make git ipvsadm ipset iptables conntrack iproute2 kmod

# Go from the official tarball: Debian 12's golang package is too old for go.mod.
if ! "$GO_ROOT/bin/go" version 2>/dev/null | grep -q "go$GO_VERSION "; then
	tarball="go$GO_VERSION.linux-amd64.tar.gz"
	curl -fsSL -o "/tmp/$tarball" "https://go.dev/dl/$tarball"
	rm -rf "$GO_ROOT"
	tar -C /usr/local -xzf "/tmp/$tarball"
	rm -f "/tmp/$tarball"
fi
ln -sf "$GO_ROOT/bin/go" /usr/local/bin/go
ln -sf "$GO_ROOT/bin/gofmt" /usr/local/bin/gofmt

# The modules kube-proxy's IPVS mode needs, now and at every boot.
MODULES="ip_vs ip_vs_rr ip_vs_wrr ip_vs_lc ip_vs_wlc ip_vs_sh ip_vs_mh nf_conntrack
nf_conntrack_netlink dummy veth xt_set ip_set_hash_ip ip_set_hash_ipport
ip_set_hash_ipportip ip_set_hash_ipportnet ip_set_hash_net ip_set_bitmap_port
xt_ipvs xt_MASQUERADE xt_mark xt_comment xt_conntrack xt_addrtype ipt_REJECT"
: > /etc/modules-load.d/kpsim.conf
for m in $MODULES; do
	echo "$m" >> /etc/modules-load.d/kpsim.conf
	modprobe "$m"
done

# Build kpsim as the vagrant user would, into /usr/local/bin.
cd "$SRC"
go build -trimpath -o /usr/local/bin/kpsim ./cmd/kpsim

# The verdict: doctor exits non-zero when a kernel scenario cannot run here.
kpsim doctor
