#!/usr/bin/env bash
# `make test` runs this first: the Debian packages some test tiers need (Prometheus + promtool, sshd, UCX
# tools, shellcheck). As root it installs what is missing; otherwise it stops with the exact command to run,
# so a fresh machine never silently skips whole tiers. libibverbs1, libnuma1 and libcurl4: Mooncake's transfer engine
# (`make setup-mooncake`) links them; without libibverbs its import fails and takes every lmcache server down.
set -euo pipefail
packages=(shellcheck prometheus openssh-server openssh-client ucx-utils iproute2 procps curl libibverbs1 libnuma1
          libcurl4)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  echo "== apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  exit 0
fi
echo "make test: missing Debian packages; install them first:" >&2
echo "  sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
exit 2
