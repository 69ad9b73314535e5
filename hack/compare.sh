#!/usr/bin/env bash
# compare.sh: is the working tree's kpsim better or worse than BASE's?
#
# Builds kpsim at BASE (a git ref, exported with `git archive` into a
# temporary directory: no worktree or other git state is created, so it is
# safe next to concurrent work) and at the working tree, runs each scenario
# RUNS times per side on the in-memory kernel with the same scenario file
# and seed, alternating base and head runs so that machine noise hits both
# alike, and compares the results with `kpsim compare`.
#
# Environment (all optional except BASE):
#   BASE        git ref to compare against (e.g. HEAD~1, origin/main)
#   SCENARIOS   scenario names, comma- or space-separated (default: smoke)
#   RUNS        runs per side per scenario (default: 5; one run decides every
#               figure kpsim's proxier models or counts, and the measured CPU
#               and RSS, compared over runs, need 5 per side to be called)
#   OUT         output directory (default: out/compare)
#   LATENCY     report (default): timing only reported; gate: a significant
#               timing regression fails too
#   THRESHOLD   percent change below which nothing is a regression (default 10)
#   ALLOW_OPS_CHANGE=1  a kernel operation count change is expected
#
# A change in kernel operation counts fails the comparison unless it is
# declared: ALLOW_OPS_CHANGE=1, or a commit in BASE..HEAD whose message has
# the trailer "Kpsim-Ops-Change: yes".
#
# Writes OUT/{base,head}-NAME-I.json, OUT/compare-NAME.{txt,md},
# OUT/report-NAME.html and OUT/summary.md. Exit status: that of
# `kpsim compare` (0 no regression, 1 regression or undeclared ops change),
# 0 with a note when BASE cannot run the comparison (no such ref, no kpsim
# yet), 2 on bad usage.
set -euo pipefail

die() { echo "compare: $*" >&2; exit 2; }
note() { echo "compare: note: $*" >&2; printf '> note: %s\n\n' "$*" >>"$OUT/summary.md"; }

[[ -n "${BASE:-}" ]] || die "set BASE to a git ref, e.g. make compare BASE=HEAD~1"
SCENARIOS="${SCENARIOS:-smoke}"
RUNS="${RUNS:-5}"
OUT="${OUT:-out/compare}"
LATENCY="${LATENCY:-report}"
THRESHOLD="${THRESHOLD:-10}"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS=$RUNS: want a positive number"
[[ "$LATENCY" == report || "$LATENCY" == gate ]] || die "LATENCY=$LATENCY: want report or gate"

ROOT="$(git rev-parse --show-toplevel)" || die "not inside a git repository"
cd "$ROOT"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
rm -f "$OUT"/base-*.json "$OUT"/head-*.json "$OUT"/compare-*.txt "$OUT"/compare-*.md "$OUT"/report-*.html
printf '## kpsim compare: %s vs working tree\n\n' "$BASE" >"$OUT/summary.md"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/kpsim-compare.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

if ! base_commit="$(git rev-parse --verify --quiet "$BASE^{commit}")"; then
	note "BASE=$BASE is not a commit here (no previous commit yet, or a shallow clone): nothing to compare against"
	exit 0
fi

# Head: the working tree as it is, uncommitted changes included.
echo "compare: building kpsim from the working tree" >&2
head_version="$(git describe --tags --always --dirty 2>/dev/null || echo dev)"
go build -ldflags "-X main.version=$head_version -X main.commit=$(git rev-parse HEAD)" -o "$TMP/head/kpsim" ./cmd/kpsim

# Base: the tree at BASE, without touching the repository's git state.
mkdir -p "$TMP/base-src"
git archive "$base_commit" | tar -x -C "$TMP/base-src"
if [[ ! -d "$TMP/base-src/cmd/kpsim" ]]; then
	note "BASE=$BASE ($base_commit) has no cmd/kpsim yet: nothing to compare against"
	exit 0
fi
echo "compare: building kpsim at $BASE ($base_commit)" >&2
if ! (cd "$TMP/base-src" && go build -ldflags "-X main.version=$BASE -X main.commit=$base_commit" -o "$TMP/base/kpsim" ./cmd/kpsim) 2>"$TMP/base-build.log"; then
	cat "$TMP/base-build.log" >&2
	note "kpsim at BASE=$BASE ($base_commit) does not build: nothing to compare against"
	exit 0
fi
# (Output captured first: grep -q exiting early would SIGPIPE kpsim under pipefail.)
base_help="$("$TMP/base/kpsim" help 2>/dev/null || true)"
if ! grep -qE '^  run ' <<<"$base_help"; then
	note "kpsim at BASE=$BASE ($base_commit) has no run command yet: nothing to compare against"
	exit 0
fi

allow_ops=()
if [[ "${ALLOW_OPS_CHANGE:-}" == 1 ]]; then
	allow_ops=(--allow-ops-change)
	echo "compare: kernel operation changes declared by ALLOW_OPS_CHANGE=1" >&2
elif git log --format='%(trailers:key=Kpsim-Ops-Change,valueonly)' "$base_commit..HEAD" |
	grep -qiE '^[[:space:]]*yes[[:space:]]*$'; then
	allow_ops=(--allow-ops-change)
	echo "compare: kernel operation changes declared by a Kpsim-Ops-Change: yes trailer" >&2
fi

status=0
for name in ${SCENARIOS//,/ }; do
	scenario="scenarios/$name.yaml"
	[[ -f "$scenario" ]] || die "no scenario $scenario in the working tree"
	# Both sides run the working tree's scenario file, so the input is
	# identical; a base that cannot read it falls back to its own copy.
	base_scenario="$ROOT/$scenario"
	if grep -qE '^  validate ' <<<"$base_help" &&
		! "$TMP/base/kpsim" validate "$base_scenario" >/dev/null 2>&1; then
		if [[ -f "$TMP/base-src/$scenario" ]]; then
			note "$name: kpsim at BASE cannot read the working tree's $scenario; it runs its own copy, so differences may come from the scenario"
			base_scenario="$TMP/base-src/$scenario"
		else
			note "$name: kpsim at BASE cannot read $scenario and has none of its own: skipped"
			continue
		fi
	fi
	for i in $(seq 1 "$RUNS"); do
		echo "compare: $name run $i/$RUNS" >&2
		"$TMP/base/kpsim" run -s "$base_scenario" -o "$OUT/base-$name-$i.json" >"$TMP/base-$name-$i.log" 2>&1 ||
			{ cat "$TMP/base-$name-$i.log" >&2; die "$name: base run $i failed"; }
		"$TMP/head/kpsim" run -s "$ROOT/$scenario" -o "$OUT/head-$name-$i.json" >"$TMP/head-$name-$i.log" 2>&1 ||
			{ cat "$TMP/head-$name-$i.log" >&2; die "$name: head run $i failed"; }
	done
	base_files=("$OUT"/base-"$name"-*.json)
	head_files=("$OUT"/head-"$name"-*.json)
	base_schema="$(grep -m1 -o '"schemaVersion": *[0-9]*' "${base_files[0]}" | grep -o '[0-9]*$')"
	head_schema="$(grep -m1 -o '"schemaVersion": *[0-9]*' "${head_files[0]}" | grep -o '[0-9]*$')"
	if [[ "$base_schema" != "$head_schema" ]]; then
		note "$name: results schema changed ($base_schema -> $head_schema): the files cannot be compared"
		continue
	fi
	# Both builds ran the same scenario file with the same seed: settings
	# that still differ in the recorded scenario are defaults the build
	# changed, part of what is compared (kpsim compare lists them).
	flags=(--latency="$LATENCY" --threshold="$THRESHOLD" --allow-different "${allow_ops[@]}")
	"$TMP/head/kpsim" compare "${flags[@]}" --format md -o "$OUT/compare-$name.md" \
		"${base_files[@]}" -- "${head_files[@]}" 2>/dev/null || true
	cat "$OUT/compare-$name.md" >>"$OUT/summary.md"
	echo >>"$OUT/summary.md"
	"$TMP/head/kpsim" report -o "$OUT/report-$name.html" "${base_files[0]}" "${head_files[0]}" >/dev/null
	rc=0
	"$TMP/head/kpsim" compare "${flags[@]}" "${base_files[@]}" -- "${head_files[@]}" \
		>"$OUT/compare-$name.txt" || rc=$?
	cat "$OUT/compare-$name.txt"
	if ((rc > status)); then status=$rc; fi
done
echo "compare: results, comparisons and reports in $OUT (summary: $OUT/summary.md)" >&2
exit "$status"
