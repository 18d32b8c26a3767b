#!/usr/bin/env bash
# Two Kubernetes clusters sharing one pool (docs/operations.md, "Several
# Kubernetes clusters on one pool"): the whole controller suite runs twice at once on
# the test pool, as driver instances a and b (--instance-id), each suite
# checking that it left nothing of its own. Tests that stop the monitor or
# fill the pool skip themselves there (they would disturb the other suite);
# they run next, alone, as the default instance, after which the whole pool
# is checked for anything any of them left. With that, this is a whole run
# of the controller suite, and make test runs the suite here only. Needs a
# cluster: scripts/with-cluster.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CEPH_CLUSTER_DIR:?run through scripts/with-cluster.sh}"
logs=$(mktemp -d /tmp/rbdcsi-instances.XXXXXX)
trap 'rm -rf "$logs"' EXIT
go test -c -o "$logs/controller.test" ./e2e/controller
suite() {
	(cd e2e/controller && RBDCSI_INSTANCE_ID=$1 "$logs/controller.test" -test.count=1 -test.timeout=30m -test.v) >"$logs/$1.log" 2>&1
}
start=$(date +%s)
declare -A pids
for i in a b; do
	suite "$i" &
	pids[$i]=$!
done
rc=0
for i in a b; do
	if wait "${pids[$i]}"; then
		echo "instance $i: $(grep -c '^--- PASS' "$logs/$i.log") passed, $(grep -c '^--- SKIP' "$logs/$i.log") skipped"
	else
		rc=1
		echo "instance $i FAILED:"
		grep -v '^=== \(RUN\|PAUSE\|CONT\)' "$logs/$i.log" | tail -n 200 | sed "s/^/[$i] /"
	fi
done
echo "both suites took $(($(date +%s) - start)) s"
((rc == 0)) || exit "$rc"

# The tests that skipped for needing the whole cluster (their skip says so:
# e2e/harness, NeedsWholeCluster), by their top-level names. -test.v names
# the test before each line of its output (=== RUN, CONT or NAME).
mapfile -t alone < <(awk '/^=== (RUN|CONT|NAME) /{name=$3} /disturbs every user of the cluster/{sub(/\/.*/, "", name); print name}' \
	"$logs/a.log" | sort -u)
if ((${#alone[@]} == 0)) && grep -q 'NeedsWholeCluster(' e2e/controller/*_test.go; then
	echo "no test of the controller suite skipped for needing the whole cluster, yet some call NeedsWholeCluster:" \
		"scripts/instances.sh no longer finds their skips"
	exit 1
fi
# Alone, as the default instance; after them (or with none, '^$': no test),
# TestMain checks the whole pool (images, trash, objects) as the default
# instance, which takes every instance's index objects for indexes and
# everything else for a leak.
run='^$'
((${#alone[@]} == 0)) || run="^($(IFS='|' && echo "${alone[*]}"))\$"
t=$(date +%s)
(cd e2e/controller && "$logs/controller.test" -test.run="$run" -test.count=1 -test.timeout=30m -test.v) >"$logs/alone.log" 2>&1 || rc=1
for name in "${alone[@]}"; do
	grep -q "^--- PASS: $name " "$logs/alone.log" || rc=1
done
if ((rc == 0)); then
	echo "alone: ${alone[*]:-no test} passed in $(($(date +%s) - t)) s; the pool holds nothing left"
else
	echo "alone (${alone[*]:-the pool check}) FAILED:"
	grep -v '^=== \(RUN\|PAUSE\|CONT\)' "$logs/alone.log" | tail -n 200 | sed 's/^/[alone] /'
fi
exit "$rc"
