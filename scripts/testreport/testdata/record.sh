#!/usr/bin/env bash
# Records the fixture suite's runs that testreport's tests read.
set -euo pipefail
cd "$(dirname "$0")/fixture"
rec() {
	local out=$1
	shift
	env "$@" go test -json -count=1 . >"../$out" || true
}
rec all-pass.json FIXTURE_GROUPS=1
rec no-groups.json
rec no-dm-crypt.json FIXTURE_MISSING=dm_crypt
rec no-cap.json FIXTURE_MISSING=CAP_SYS_RESOURCE
rec one-fails.json FIXTURE_FAIL=1
