# Sourced by the skill scripts: sets P2PCTL to the p2pctl of this checkout (or the one on PATH).
# shellcheck shell=bash
_repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -n "${P2PCTL:-}" ]; then
  :
elif [ -x "$_repo_root/.venv/bin/p2pctl" ]; then
  P2PCTL="$_repo_root/.venv/bin/p2pctl"
elif command -v p2pctl >/dev/null 2>&1; then
  P2PCTL="$(command -v p2pctl)"
else
  echo "p2pctl not found: run 'make setup' in $_repo_root first" >&2
  exit 2
fi
export P2PCTL
