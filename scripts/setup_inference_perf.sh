#!/usr/bin/env bash
# Creates the inference-perf environment (default ./.venv-inference-perf): PyPI inference-perf, kubernetes-sigs' load
# generator (the one llm-d publishes its P2P figures with), in a venv of its own so its pins (transformers,
# pandas, pydantic, ...) never move the project's .venv. It needs Python >= 3.12: the first of python3.13,
# python3.12, python3 (or $PYTHON) that is new enough. Idempotent: a stamp marks a finished set-up.
set -euo pipefail

VERSION=0.7.0
usage() {
  cat <<USAGE
usage: setup_inference_perf.sh [VENV]   (default .venv-inference-perf)

Installs inference-perf $VERSION (about 800 MB with its dependencies, no torch; a few minutes) into a Python >= 3.12
venv and checks that \`inference-perf --help\` runs. \`p2pctl test stress --generator inference-perf\` runs
\$VENV/bin/inference-perf. Set PYTHON to choose the interpreter.
USAGE
}
case "${1:-}" in -h|--help) usage; exit 0 ;; esac

venv="${1:-.venv-inference-perf}"
stamp="$venv/.p2p-inference-perf-setup-done"
if [ -f "$stamp" ]; then
  echo "inference-perf environment ready in $venv"
  exit 0
fi

new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; }
python=""
for candidate in ${PYTHON:-} python3.13 python3.12 python3 "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 && new_enough "$candidate"; then python="$candidate"; break; fi
done
if [ -z "$python" ]; then
  echo "inference-perf $VERSION needs Python >= 3.12 and none was found (tried \$PYTHON, python3.13, python3.12," \
       "python3, ~/.pyenv/versions/3.12+); install one (e.g. apt-get install python3.12 python3.12-venv) or set PYTHON" >&2
  exit 1
fi

export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ -x "$venv/bin/python" ] && ! new_enough "$venv/bin/python"; then
  echo "$venv holds a Python older than 3.12; remove it and rerun" >&2
  exit 1
fi
test -x "$venv/bin/python" || "$python" -m venv "$venv"
echo "== inference-perf $VERSION into $venv ($("$venv/bin/python" --version))"
"$venv/bin/python" -m pip install -q "inference-perf==$VERSION"
TRANSFORMERS_VERBOSITY=error "$venv/bin/inference-perf" --help >/dev/null
touch "$stamp"
echo "inference-perf environment ready in $venv"
