#!/usr/bin/env bash
# Triage a debug bundle offline (p2pctl triage BUNDLE.tar.gz): the doctor's judge on the facts the bundle captured,
# with no fleet and no network; the causes with the live doctor's ids, log lines naming causes, explain's verdict
# on the last missed request, and what the bundle lacks.
# Exit codes: 0 no cause, 1 causes found, 2 not a bundle (bad input).
# --help is `p2pctl triage --help` (argparse's), its usage naming this script.
set -euo pipefail
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec triage_bundle.sh triage "$@"
