#!/bin/bash
# make test-kernel: boots Debian's kernel (which has IPVS and dummy links,
# unlike the host's) in QEMU and runs kpsim's kernel tests inside it, as
# listed in tests.sh. Passes only when the VM prints KPSIM-VM-RESULT: PASS.
#
# Everything it downloads or builds is cached in .cache/kernel-vm/ (or
# $KPSIM_VM_CACHE): the tools (apt), the kernel package (unpacked, not
# installed), the initramfs base. VERSION and COMMIT (set by make) stamp the
# kpsim binaries built for the VM. Settings: KPSIM_VM_TIMEOUT (seconds, 1500),
# KPSIM_VM_MEM (MiB, 2048: the initramfs holds a kpsim binary per kube-proxy
# release, about 80 MB each, and the kernel unpacks it into memory),
# KPSIM_VM_SMP (2), KPSIM_VM_ONLY (comma-separated
# step names to run, default all).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VM=$REPO/kernel/vm
CACHE=${KPSIM_VM_CACHE:-$REPO/.cache/kernel-vm}
TIMEOUT=${KPSIM_VM_TIMEOUT:-1500}
mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
if ! flock -n 9; then
	echo "test-kernel: another run is using $CACHE; waiting for it" >&2
	flock 9
fi
start=$(date +%s.%N)
elapsed() { awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

bash "$VM/setup.sh" "$CACHE"
base=$(bash "$VM/mkinitramfs.sh" "$CACHE")

R=$CACHE/run.tree
rm -rf "$R"
mkdir -p "$R/kpsim"
(
	cd "$REPO"
	# shellcheck source=tests.sh
	. "$VM/tests.sh"
	vm_build "$R/kpsim"
)
install -m 0755 "$VM/init" "$R/init"
cp "$VM/tests.sh" "$R/kpsim/tests.sh"
(cd "$R" && find . -print0 | cpio --null -o -H newc --quiet) >"$CACHE/run.cpio"
# The kernel unpacks concatenated archives in order: the cached base, then this run's files.
cat "$base" "$CACHE/run.cpio" >"$CACHE/initramfs.cpio"
echo "test-kernel: built in $(elapsed)s"

# KVM only where the CPU says it virtualises; elsewhere (these machines: a
# /dev/kvm that hangs ordinary guests) software emulation.
if grep -qwE 'vmx|svm' /proc/cpuinfo && [ -w /dev/kvm ]; then
	accel=(-accel kvm -cpu host)
else
	accel=(-accel "tcg,thread=multi" -cpu max)
fi
LOG=$CACHE/vm.log
boot=$(date +%s.%N)
# transparent_hugepage=never: a CI run's guest once stalled for minutes
# with khugepaged blocked and soft lockups on both vCPUs, in a step that
# passed in 12 s in the next boot; under emulation, collapsing pages into
# huge ones is work the tests do not need.
set +e
timeout "$TIMEOUT" qemu-system-x86_64 "${accel[@]}" -m "${KPSIM_VM_MEM:-2048}" -smp "${KPSIM_VM_SMP:-2}" \
	-nographic -no-reboot -nodefaults -serial stdio -net none \
	-kernel "$CACHE/vmlinux" -initrd "$CACHE/initramfs.cpio" \
	-append "console=ttyS0 panic=-1 quiet norandmaps transparent_hugepage=never kpsim.only=${KPSIM_VM_ONLY:-}" </dev/null | tee "$LOG"
qemu=${PIPESTATUS[0]}
set -e
vmtime=$(awk -v a="$boot" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')

# Files the VM exported with vm_export.
mkdir -p "$CACHE/out"
awk -v dir="$CACHE/out" '
	/^KPSIM-VM-FILE-BEGIN / { name = $2; sub(/\r$/, "", name); f = dir "/" name ".b64"; printf "" > f; next }
	/^KPSIM-VM-FILE-END/ { close(f); f = ""; next }
	f != "" { sub(/\r$/, ""); print >> f }
' "$LOG"
for b in "$CACHE"/out/*.b64; do
	[ -e "$b" ] || continue
	base64 -d "$b" >"${b%.b64}" && rm "$b" && echo "test-kernel: exported ${b%.b64}"
done

if [ "$qemu" -eq 124 ]; then
	echo "test-kernel: FAIL: the VM did not finish within ${TIMEOUT}s (log: $LOG)"
	exit 1
fi
# The VM's kpsim says which build it is (vm_tests prints its version).
if [ -n "${COMMIT:-}" ] && [ "${COMMIT}" != unknown ] && ! grep -q "^commit ${COMMIT}" "$LOG"; then
	echo "test-kernel: FAIL: the VM's kpsim does not say it is commit ${COMMIT} (log: $LOG)"
	exit 1
fi
if grep -q '^KPSIM-VM-RESULT: PASS' "$LOG"; then
	echo "test-kernel: PASS in $(elapsed)s (VM ${vmtime}s; log: $LOG)"
	exit 0
fi
# The failed tests' own words, last: a CI log is often read from its tail,
# and the files exported above push the tests' output far up.
grep -a -E -e '--- FAIL|^[[:space:]]+(Error|Messages):|^panic:' "$LOG" | tr -d '\r' | tail -n 30 | sed 's/^/test-kernel: /' || true
echo "test-kernel: FAIL: $(grep -a '^KPSIM-VM-RESULT' "$LOG" | tr -d '\r' || echo "no verdict from the VM (qemu exit $qemu)") in $(elapsed)s (log: $LOG)"
exit 1
