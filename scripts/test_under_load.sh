#!/usr/bin/env bash
# Runs pytest while stress-ng keeps the CPUs busy, the way a shared CI box is: a test that only passes on an idle
# machine fails here. Usage: scripts/test_under_load.sh [pytest args...]
#   P2P_LOAD="--cpu 2 --cpu-load 40"  stress-ng's load (default: both CPUs 40 % busy, plus 256 MiB churned)
# Exit code: pytest's. Load averages at start and end go to stderr, for the note that says how it was loaded.
set -euo pipefail
command -v stress-ng >/dev/null || { echo "needs stress-ng: apt-get install -y stress-ng" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
read -r -a load <<< "${P2P_LOAD:---cpu 2 --cpu-load 40 --vm 1 --vm-bytes 256M}"
stress-ng "${load[@]}" --timeout 6h --quiet &
stress_pid=$!
trap 'kill "$stress_pid" 2>/dev/null; wait "$stress_pid" 2>/dev/null || true' EXIT
echo "stress-ng ${load[*]} (pid $stress_pid); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
rc=0
"$here/.venv/bin/python" -m pytest "$@" || rc=$?
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit "$rc"
