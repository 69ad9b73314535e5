#!/bin/bash
# Prepares the cache the VM runner boots from, once: host tools, Debian's
# kernel package unpacked (never installed) and an uncompressed vmlinux that
# QEMU boots directly (PVH entry), skipping the in-guest xz decompression that
# costs 5-8 s under TCG. Re-running with a warm cache only checks it.
#
# usage: setup.sh CACHE_DIR
set -euo pipefail
W=${1:?usage: setup.sh CACHE_DIR}
mkdir -p "$W"
cd "$W"
export DEBIAN_FRONTEND=noninteractive

TOOLS="qemu-system-x86 busybox-static ipvsadm ipset iptables nftables cpio kmod xz-utils"
missing=""
for p in $TOOLS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "setup: installing$missing"
	# shellcheck disable=SC2086 # word splitting of the package list is intended
	if ! apt-get install -y --no-install-recommends $missing >apt.log 2>&1; then
		apt-get update >>apt.log 2>&1
		# shellcheck disable=SC2086
		apt-get install -y --no-install-recommends $missing >>apt.log 2>&1 || { cat apt.log >&2; exit 1; }
	fi
fi

if [ -f kver.env ] && [ -s vmlinux ] && [ -d kroot ]; then
	exit 0
fi

kpkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
KPKG=$(kpkg)
if [ -z "$KPKG" ]; then
	apt-get update >>apt.log 2>&1
	KPKG=$(kpkg)
fi
[ -n "$KPKG" ] || { echo "setup: cannot find Debian's kernel package (apt-cache depends linux-image-amd64)" >&2; exit 1; }
KVER=${KPKG#linux-image-}
if [ ! -f "$KPKG.deb" ]; then
	echo "setup: downloading $KPKG"
	rm -f "${KPKG}"_*.deb
	apt-get download "$KPKG" >>apt.log 2>&1 || { apt-get update >>apt.log 2>&1 && apt-get download "$KPKG" >>apt.log 2>&1; }
	mv "${KPKG}"_*.deb "$KPKG.deb"
fi
rm -rf kroot
dpkg -x "$KPKG.deb" kroot
depmod -b kroot "$KVER" # the package ships no modules.dep

# bzImage -> the ELF vmlinux inside it. xz exits 1 on the trailing bytes after
# the stream; the output is complete, which `file` confirms below.
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "kroot/boot/vmlinuz-$KVER" | head -1 | cut -d: -f1)
tail -c +$((off + 1)) "kroot/boot/vmlinuz-$KVER" | xz -dcq >vmlinux.tmp 2>/dev/null || true
if ! head -c 4 vmlinux.tmp | grep -q 'ELF'; then
	echo "setup: could not extract vmlinux from kroot/boot/vmlinuz-$KVER" >&2
	exit 1
fi
mv vmlinux.tmp vmlinux
echo "KVER=$KVER" >kver.env
echo "setup: kernel $KVER ready in $W"
