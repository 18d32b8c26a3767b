#!/usr/bin/env bash
# Two Kubernetes clusters sharing one pool (docs/operations.md, "Several
# Kubernetes clusters on one pool"): the whole controller suite runs twice at once on
# the test pool, as driver instances a and b (--instance-id), each suite
# checking that it left nothing of its own; then the whole pool is checked
# for anything either left. Needs a cluster: scripts/with-cluster.sh.
# Tests that stop the monitor or fill the pool skip themselves here (they
# would disturb the other suite); `make integration` runs them alone.
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
# No test runs: TestMain checks the whole pool (images, trash, objects) as
# the default instance, which takes every instance's index objects for
# indexes and everything else for a leak.
(cd e2e/controller && "$logs/controller.test" -test.run='^$') || rc=1
exit "$rc"
