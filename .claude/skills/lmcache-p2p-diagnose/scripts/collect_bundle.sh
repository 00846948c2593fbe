#!/usr/bin/env bash
# Debug bundle (p2pctl bundle): env.sh files, logs, /status, /config, /instances, metrics, package versions,
# host facts and the doctor's output in one tar.gz with manifest.json; secrets redacted before writing.
# Exit codes: 0 bundle written, 2 bad input or could not run.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  cat <<'USAGE'
usage: collect_bundle.sh [-f fleet.yaml] [--run-dir DIR] [-o FILE] [--no-doctor] [--json]

Writes p2p-run/<fleet>/bundles/p2p-bundle-<fleet>-<UTC>.tar.gz (or -o FILE, mode 0600) and prints a
short summary: path, size, how many secrets were redacted (kinds) and what could not be collected.
Tokens, API keys, passwords, private keys and cloud credentials are replaced by <redacted> in memory,
before anything is written; manifest.json lists every redaction (kind, file, line, variable name), never
the value. A stopped fleet is fine: what cannot be read is listed under "unreachable".

  -o FILE      where to write the tar.gz
  --no-doctor  skip running the fleet doctor into the bundle
  --json       print the manifest instead of the summary
USAGE
  exit 0
fi
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec collect_bundle.sh bundle "$@"
