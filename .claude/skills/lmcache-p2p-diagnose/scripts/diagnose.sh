#!/usr/bin/env bash
# Symptom decision tree (p2pctl diagnose): walks the steps for one symptom, runs each step's checks (doctor
# findings, log signatures, metrics, /status) and prints what it found, the cause and the fix.
# Exit codes: 0 no problem found, 1 a step found the problem, 2 bad input (unknown symptom, no fleet file).
# --help is `p2pctl diagnose --help` (argparse's), its usage naming this script.
set -euo pipefail
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec diagnose.sh diagnose "$@"
