#!/usr/bin/env bash
# Short bounded run of every fuzz target under ./internal (make fuzz).
#
# Go's fuzz engine sometimes reports a worker as "hung or terminated
# unexpectedly" although no input is at fault (golang/go#56238, #52569); it
# still writes the input it was running to testdata/fuzz/. So a failure is
# judged by replaying that input as a plain test: if the replay fails, the
# input is a real finding and the run fails with it kept for the developer;
# if it passes (or the engine failed without naming an input), the report was
# the engine's, the input is dropped and the target is fuzzed once more; a
# second failure of any kind fails the run. Output is shown whenever
# something failed.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME=${FUZZTIME:-5s}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# fuzz_once PKG DIR TARGET: 0 = clean run, 1 = real finding, 2 = engine flake.
fuzz_once() {
	local pkg=$1 dir=$2 target=$3 corpus before after input
	corpus="$dir/testdata/fuzz/$target"
	before=$(ls "$corpus" 2>/dev/null || true)
	if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" >"$log" 2>&1; then
		return 0
	fi
	cat "$log"
	after=$(ls "$corpus" 2>/dev/null || true)
	input=$(comm -13 <(echo "$before") <(echo "$after"))
	input=${input%%$'\n'*}
	if [ -z "$input" ]; then
		echo "fuzz: $target: the engine failed without naming an input (see above)" >&2
		return 2
	fi
	if go test -count=1 -timeout 60s -run "^${target}\$/^${input}\$" "$pkg"; then
		echo "fuzz: $target: the input the engine reported passes when replayed; dropping it (golang/go#56238)" >&2
		rm -f "$corpus/$input"
		rmdir "$corpus" "$dir/testdata/fuzz" "$dir/testdata" 2>/dev/null || true
		return 2
	fi
	echo "fuzz: $target: real failure, input kept at $corpus/$input" >&2
	return 1
}

for pkg in $(go list ./internal/...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "fuzz $pkg $target"
		rc=0
		fuzz_once "$pkg" "$dir" "$target" || rc=$?
		if [ "$rc" = 2 ]; then
			echo "fuzz: $target: fuzzing again" >&2
			rc=0
			fuzz_once "$pkg" "$dir" "$target" || rc=$?
		fi
		[ "$rc" = 0 ] || exit 1
	done
done
