#!/usr/bin/env bash
# Debug bundle (p2pctl bundle): env.sh files, logs, /status, /config, /instances, metrics, package versions,
# host facts and the doctor's output in one tar.gz with manifest.json; secrets redacted before writing.
# Exit codes: 0 bundle written, 2 bad input or could not run.
# --help is `p2pctl bundle --help` (argparse's), its usage naming this script.
set -euo pipefail
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec collect_bundle.sh bundle "$@"
