#!/usr/bin/env bash
# compare-releases.sh: is kube-proxy release HEAD_RELEASE worse than
# BASE_RELEASE on a scenario?
#
# Builds the release binaries that hold them (make bin/kpsim-kube-proxy-vX.Y),
# runs the scenario RUNS times per release on the in-memory kernel,
# alternating base and head runs so that machine noise hits both alike,
# and compares the runs with `kpsim compare`. A release's run is one sample
# (it iterates Go maps, whose order Go randomizes in every run): the
# comparison reads every figure over runs and says when they cannot
# decide. Operation counts may differ between releases (--allow-ops-change);
# what fails is a regression: more broken traffic, more failed syncs, and
# with LATENCY=gate (the default) slower syncs.
#
# Environment (all optional except BASE_RELEASE and HEAD_RELEASE):
#   BASE_RELEASE, HEAD_RELEASE  kube-proxy releases, e.g. v1.30.3 and v1.37.1
#                               (the same release twice compares it with itself)
#   SCENARIO    a shipped scenario or a file (default: restart-stale-ipsets)
#   RUNS        runs per release (default: 8, what decides most comparisons)
#   SETS        more --set overrides, space-separated KEY=VALUE
#   LATENCY     gate (default): slower syncs fail too; report: only reported
#   OUT         output directory (default: out/compare-releases)
#
# Writes OUT/{base,head}-runI.json, OUT/compare.{txt,md}, OUT/report.html
# (the first run of each side) and OUT/summary.md. Exit status: that of
# `kpsim compare` (0 no regression, 1 regression), 2 on bad usage, 3 when a
# run failed.
set -euo pipefail

die() { echo "compare-releases: $*" >&2; exit 2; }

release='^v[0-9]+\.[0-9]+\.[0-9]+$'
[[ "${BASE_RELEASE:-}" =~ $release ]] || die "set BASE_RELEASE to a kube-proxy release, e.g. BASE_RELEASE=v1.30.3 (got '${BASE_RELEASE:-}')"
[[ "${HEAD_RELEASE:-}" =~ $release ]] || die "set HEAD_RELEASE to a kube-proxy release, e.g. HEAD_RELEASE=v1.37.1 (got '${HEAD_RELEASE:-}')"
SCENARIO="${SCENARIO:-restart-stale-ipsets}"
RUNS="${RUNS:-8}"
LATENCY="${LATENCY:-gate}"
OUT="${OUT:-out/compare-releases}"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS=$RUNS: want a positive number"
[[ "$LATENCY" == report || "$LATENCY" == gate ]] || die "LATENCY=$LATENCY: want report or gate"

cd "$(dirname "$0")/.."
mkdir -p "$OUT"
rm -f "$OUT"/base-run*.json "$OUT"/head-run*.json "$OUT"/compare.txt "$OUT"/compare.md "$OUT"/report.html "$OUT"/summary.md

# The binary that holds a release: the module of its minor version.
binary() { echo "bin/kpsim-kube-proxy-${1%.*}"; }
for rel in "$BASE_RELEASE" "$HEAD_RELEASE"; do
	make --no-print-directory "$(binary "$rel")" >&2 || die "cannot build $(binary "$rel") for $rel"
done
make --no-print-directory build >&2

sets=()
for s in ${SETS:-}; do sets+=(--set "$s"); done
run() { # side release i
	local log="$OUT/$1-run$3.log"
	echo "compare-releases: $1 $2 run $3/$RUNS" >&2
	if ! "$(binary "$2")" run -s "$SCENARIO" --set "proxier.implementation=kube-proxy@$2" "${sets[@]}" -o "$OUT/$1-run$3.json" >"$log" 2>&1; then
		tail -5 "$log" >&2
		echo "compare-releases: $1 run $3 of kube-proxy@$2 failed (log: $log)" >&2
		exit 3
	fi
}
for i in $(seq 1 "$RUNS"); do
	run base "$BASE_RELEASE" "$i"
	run head "$HEAD_RELEASE" "$i"
done

base_files=() head_files=()
for i in $(seq 1 "$RUNS"); do base_files+=("$OUT/base-run$i.json"); head_files+=("$OUT/head-run$i.json"); done
flags=(--latency="$LATENCY" --allow-ops-change)
[[ "$BASE_RELEASE" == "$HEAD_RELEASE" ]] || flags+=(--allow-different)
bin/kpsim compare "${flags[@]}" --format md -o "$OUT/compare.md" "${base_files[@]}" -- "${head_files[@]}" 2>/dev/null || true
{
	printf '## kube-proxy %s (base) against %s (head) on %s, %s runs each\n\n' "$BASE_RELEASE" "$HEAD_RELEASE" "$SCENARIO" "$RUNS"
	cat "$OUT/compare.md"
} >"$OUT/summary.md"
bin/kpsim report -o "$OUT/report.html" "${base_files[0]}" "${head_files[0]}" >/dev/null
status=0
bin/kpsim compare "${flags[@]}" "${base_files[@]}" -- "${head_files[@]}" >"$OUT/compare.txt" || status=$?
cat "$OUT/compare.txt"
echo "compare-releases: runs, comparison and report in $OUT (summary: $OUT/summary.md)" >&2
exit "$status"
