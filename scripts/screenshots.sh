#!/usr/bin/env bash
# Refreshes the dashboard screenshots in docs/screenshots/: runs the handler's browser test
# (TestDashboard_Operator), which starts Azurite, seeds a month of runs into a fresh ledger
# (a missed occurrence, a gap, a skip, a failover with failed partitions, a time-out), opens
# the dashboard in headless chromium and saves a PNG of each view it checks. The browser's
# time zone is Asia/Kolkata (UTC+05:30), so the local times differ visibly from UTC.
# Needs Go, npm (make tools) and chromium (scripts/ensure-chromium.sh).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="${1:-$root/docs/screenshots}"
mkdir -p "$out"
cd "$root"
make -s tools
bash scripts/ensure-chromium.sh >/dev/null
BATON_REQUIRE_BROWSER=1 BATON_SCREENSHOTS="$out" go test -count=1 -run '^TestDashboard_Operator$' ./internal/app
ls -1 "$out"/*.png
