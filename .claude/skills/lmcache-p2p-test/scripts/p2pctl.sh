# Sourced by this skill's scripts: finds the p2pctl to run and execs it. Self-contained, so the skill folder
# still works when copied elsewhere (e.g. ~/.claude/skills). Identical in every lmcache-p2p-* skill.
# Order: $P2PCTL (a p2pctl executable); $P2P_KV_OPS_HOME/.venv/bin/p2pctl (a checkout); the checkout this
# folder sits in; `p2pctl` on PATH (pip install p2p-kv-ops).
# shellcheck shell=bash
_p2p_find() {
  if [ -n "${P2PCTL:-}" ]; then
    [ -x "$P2PCTL" ] || { echo "P2PCTL=$P2PCTL is not an executable p2pctl; fix or unset it" >&2; return 2; }
    return 0
  fi
  if [ -n "${P2P_KV_OPS_HOME:-}" ]; then
    P2PCTL="$P2P_KV_OPS_HOME/.venv/bin/p2pctl"
    [ -x "$P2PCTL" ] || { echo "P2P_KV_OPS_HOME=$P2P_KV_OPS_HOME has no .venv/bin/p2pctl; run 'make setup' there" >&2; return 2; }
    return 0
  fi
  local d
  d="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  while [ "$d" != "/" ]; do
    if [ -x "$d/.venv/bin/p2pctl" ] && grep -qs 'name = "p2p-kv-ops"' "$d/pyproject.toml"; then
      P2PCTL="$d/.venv/bin/p2pctl"
      return 0
    fi
    d="$(dirname "$d")"
  done
  if command -v p2pctl >/dev/null 2>&1; then
    P2PCTL="$(command -v p2pctl)"
    return 0
  fi
  echo "p2pctl not found: install it (pip install p2p-kv-ops, or 'make setup' in a checkout and put" \
       ".venv/bin on PATH), or set P2PCTL=/path/to/p2pctl or P2P_KV_OPS_HOME=/path/to/checkout" >&2
  return 2
}

# p2p_exec PROG ARGS...: run `p2pctl ARGS...` with usage and error lines naming PROG (this script).
p2p_exec() {
  local prog="$1"
  shift
  _p2p_find || exit 2
  export P2PCTL
  P2PCTL_PROG="$prog" exec "$P2PCTL" "$@"
}
