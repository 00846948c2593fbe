#!/usr/bin/env bash
# Creates the router environment (default ./.venv-router): PyPI vllm-router, vLLM's Rust router (no torch),
# in a venv of its own so its pins never move the project's .venv. Idempotent: a stamp marks a finished set-up.
set -euo pipefail

usage() {
  cat <<USAGE
usage: setup_router.sh [VENV]   (default .venv-router)

Installs vllm-router 0.1.17 (about 130 MB, a minute) and checks that \`vllm-router --help\` runs.
Fleets with \`router: {enabled: true}\` use \$VENV/bin/vllm-router unless router.venv names another venv.
USAGE
}
case "${1:-}" in -h|--help) usage; exit 0 ;; esac

venv="${1:-.venv-router}"
stamp="$venv/.p2p-router-setup-done"
if [ -f "$stamp" ]; then
  echo "router environment ready in $venv"
  exit 0
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
test -x "$venv/bin/python" || python3 -m venv "$venv"
echo "== vllm-router 0.1.17 into $venv"
"$venv/bin/python" -m pip install -q vllm-router==0.1.17
"$venv/bin/vllm-router" --help >/dev/null
touch "$stamp"
echo "router environment ready in $venv"
