#!/usr/bin/env bash
# Short bounded run of every fuzz target under ./internal (make fuzz).
#
# A failed run is judged by replaying the input the engine names as a plain
# test:
#   - the replay fails: a real finding. The input stays in the package's
#     testdata/fuzz/ (commit it with the fix: it becomes a seed) and the run
#     fails.
#   - the replay passes: the finding is flaky. Its input and the engine's log
#     are kept under results/fuzz-flaky/ and reported at the end. If the
#     worker "hung or terminated unexpectedly", which Go's engine sometimes
#     reports with no input at fault (golang/go#56238, #52569), the target is
#     fuzzed once more; if the target itself failed on an input that passes
#     on replay, the code is not deterministic and the run fails.
#   - no input named (the engine failed on its own, or the build did):
#     fuzzed once more.
# A second failure of any kind fails the run. A committed seed that fails
# fails the run at once.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME=${FUZZTIME:-5s}
FLAKY_DIR=${FUZZ_FLAKY_DIR:-results/fuzz-flaky}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
flaky=()

# keep_flaky TARGET DIR INPUT: moves the input out of testdata (where it
# would pass as a seed and stray into a commit) to FLAKY_DIR, with the log.
keep_flaky() {
	local target=$1 dir=$2 input=$3 dest
	dest="$FLAKY_DIR/$target"
	mkdir -p "$dest"
	mv "$dir/testdata/fuzz/$target/$input" "$dest/$input"
	cp "$log" "$dest/$input.log"
	flaky+=("$target: $dest/$input (log: $dest/$input.log)")
}

# fuzz_once PKG DIR TARGET: 0 = clean run, 1 = real finding or a
# non-deterministic failure, 2 = worth fuzzing once more.
fuzz_once() {
	local pkg=$1 dir=$2 target=$3 input
	if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" >"$log" 2>&1; then
		return 0
	fi
	cat "$log"
	if grep -q 'failure while testing seed corpus entry' "$log"; then
		echo "fuzz: $target: a committed seed fails (see above)" >&2
		return 1
	fi
	# "Failing input written to testdata/fuzz/FuzzX/<name>"
	input=$(sed -n "s|.*Failing input written to testdata/fuzz/${target}/\([^[:space:]]*\).*|\1|p" "$log" | head -n 1)
	if [ -z "$input" ] || [ ! -f "$dir/testdata/fuzz/$target/$input" ]; then
		echo "fuzz: $target: go test failed without naming an input (the engine or the build, see above)" >&2
		return 2
	fi
	if ! go test -count=1 -timeout 60s -run "^${target}\$/^${input}\$" "$pkg"; then
		echo "fuzz: $target: real failure, input kept at $dir/testdata/fuzz/$target/$input" >&2
		return 1
	fi
	keep_flaky "$target" "$dir" "$input"
	if grep -q 'fuzzing process hung or terminated unexpectedly' "$log"; then
		echo "fuzz: $target: FLAKY: the worker died on $input, which passes when replayed; kept in $FLAKY_DIR/$target" >&2
		return 2
	fi
	echo "fuzz: $target: FLAKY: the target failed on $input, which passes when replayed: the code is not deterministic; kept in $FLAKY_DIR/$target" >&2
	return 1
}

report_flaky() {
	[ "${#flaky[@]}" -gt 0 ] || return 0
	echo "================================================================" >&2
	echo "fuzz: FLAKY findings (they did not fail on replay; inputs kept):" >&2
	printf '  %s\n' "${flaky[@]}" >&2
	echo "================================================================" >&2
}

# A package that does not build is not skipped: its targets would not run.
pkgs=$(go list ./internal/...)
rc=0
for pkg in $pkgs; do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	if ! tests=$(go test -list '^Fuzz' "$pkg" 2>&1); then
		echo "$tests"
		echo "fuzz: $pkg: cannot list its fuzz targets (see above)" >&2
		rc=1
		break
	fi
	for target in $(grep '^Fuzz' <<<"$tests" || true); do
		echo "fuzz $pkg $target"
		rc=0
		fuzz_once "$pkg" "$dir" "$target" || rc=$?
		if [ "$rc" = 2 ]; then
			echo "fuzz: $target: fuzzing again" >&2
			rc=0
			fuzz_once "$pkg" "$dir" "$target" || rc=$?
		fi
		[ "$rc" = 0 ] || break 2
	done
done
report_flaky
[ "$rc" = 0 ] || exit 1
