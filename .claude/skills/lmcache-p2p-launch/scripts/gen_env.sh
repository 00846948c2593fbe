#!/usr/bin/env bash
# Render env.sh and the start wrappers of every instance (p2pctl render).
# Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
# --help is `p2pctl render --help` (argparse's), its usage naming this script.
set -euo pipefail
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec gen_env.sh render "$@"
