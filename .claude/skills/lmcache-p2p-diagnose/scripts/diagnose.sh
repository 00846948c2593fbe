#!/usr/bin/env bash
# Symptom decision tree (p2pctl diagnose): walks the steps for one symptom, runs each step's checks (doctor
# findings, log signatures, metrics, /status) and prints what it found, the cause and the fix.
# Exit codes: 0 no problem found, 1 a step found the problem, 2 bad input (unknown symptom, no fleet file).
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  cat <<'USAGE'
usage: diagnose.sh "SYMPTOM" [-f fleet.yaml] [--run-dir DIR] [--log FILE ...] [--no-reach] [--json]
       diagnose.sh --list
       diagnose.sh --markdown          (the whole tree; references/decision-tree.md is generated from it)

Symptoms: "peers not registered", "server exits with NIXL_ERR_BACKEND", "zero cached tokens",
"l1_oom" (l1_oom / l1_contended fallbacks), "transfers on TCP" (single NIC or TCP), "slow pulls",
"requests stall". Close wordings match too (e.g. "no hits", "unregistered", "hang").

  --log FILE   also grep FILE for the log signatures (works without a fleet file)
  --json       machine-readable result; "likely_cause" names the first failing step and its subjects

The last line names the likely cause, or says that no automated check found one.
USAGE
  exit 0
fi
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec diagnose.sh diagnose "$@"
