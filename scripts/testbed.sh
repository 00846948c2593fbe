#!/usr/bin/env bash
# A multi-host testbed on one machine: N "hosts", each with its own OpenSSH server, so fleets launch over
# real SSH (with host-key verification ON) without a cluster.
# Needs OpenSSH (server and client) and python3 (scripts/testbed_describe.py writes testbed.json, nodes.yaml).
# Exit codes: 0 success, 1 a host does not answer ssh after `up`, 2 bad input or could not run.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: testbed.sh up N [--netns] [--dir DIR] [--port PORT] [--subnet K]
       testbed.sh down [--dir DIR]
       testbed.sh status [--dir DIR]

up N      start N hosts h1..hN, each an sshd (/usr/sbin/sshd -D -f DIR/hI/sshd_config, detached,
          pidfile DIR/hI/sshd.pid) with a generated ed25519 host key. One generated user key
          (DIR/user_key) logs in to every host as the current user. Written for clients:
            DIR/ssh_config      Host h1..hN (and their addresses): HostName, Port, User, IdentityFile,
                                UserKnownHostsFile DIR/known_hosts, StrictHostKeyChecking yes
            DIR/known_hosts     the generated host keys, so host-key verification stays on
            DIR/testbed.json    hosts (name, address, port, netns, veth) + key/config paths
            DIR/nodes.yaml      a `nodes:` fragment for fleet.yaml (add instances)
          Default (no root needed): hosts on loopback aliases 127.0.0.2, 127.0.0.3, ...
          --netns (root): one network namespace per host, each with a veth pair into a bridge;
          hosts get 198.18.K.2, 198.18.K.3, ... (198.18.0.0/15 is reserved for benchmarking) and
          this namespace gets 198.18.K.1 on the bridge, so each host has its own interface and
          byte counters (/sys/class/net/<veth>/statistics on the host-side veth).
          Try: ssh -F DIR/ssh_config h1 hostname
down      stop the sshds (by pidfile), kill what still runs inside the namespaces, delete the
          namespaces, veths and bridge, remove the generated files. Safe to repeat and after a
          failed `up` (everything is recorded in DIR/state as it is created).
status    list the hosts and whether each sshd runs.

--dir DIR     where everything lives (default for up: $P2P_TESTBED_DIR, else a fresh private folder
              made by mktemp -d under ${XDG_CACHE_HOME:-~/.cache}/p2p-testbed, printed by up; down and
              status need it). It must belong to you and be writable by nobody else, and (sshd runs
              with StrictModes yes) so must every folder above it: /tmp itself is world-writable.
--port PORT   sshd port on every host (default: a free port in 22000-22999)
--subnet K    third octet of the --netns subnet 198.18.K.0/24 (default: a free one in 1-254)
USAGE
}

die() { echo "testbed: $*" >&2; exit 2; }
log() { echo "testbed: $*" >&2; }

cmd=""; count=""; netns=0; port=""; subnet=""
dir="${P2P_TESTBED_DIR:-}"
[ $# -gt 0 ] || { usage; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    up|down|status) [ -z "$cmd" ] || die "one command at a time (got $cmd and $1)"; cmd="$1" ;;
    --netns) netns=1 ;;
    --dir) [ $# -ge 2 ] || die "--dir needs a value"; dir="$2"; shift ;;
    --port) [ $# -ge 2 ] || die "--port needs a value"; port="$2"; shift ;;
    --subnet) [ $# -ge 2 ] || die "--subnet needs a value"; subnet="$2"; shift ;;
    [0-9]*) if [ "$cmd" != up ] || [ -n "$count" ]; then die "unexpected argument $1 (see --help)"; fi
            count="$1" ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done
[ -n "$cmd" ] || die "no command; use up, down or status (see --help)"

SSHD=/usr/sbin/sshd
# testbed.json and nodes.yaml are written by Python (stdlib only, run isolated: -I), from what up started.
DESCRIBE="$(cd "$(dirname "$0")" && pwd -P)/testbed_describe.py"
STATE="$dir/state"
# Every file is created fresh (O_EXCL): a name that already exists, a planted symlink included, is an error,
# never followed. Writers remove their target first (inside a folder only we can write to).
set -o noclobber
umask 077
# The first line of the state file: `down` trusts only a state file that carries it, for this very folder.
state_marker() { echo "# p2p-testbed state for $dir"; }
HOST_MARKER=.p2p-testbed-host

in_range() {  # in_range VALUE LO HI: VALUE is an integer within [LO, HI]
  [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]
}

# ---- process helpers ---------------------------------------------------------------------------------
alive() {  # exists and is not a zombie (an orphaned sshd may wait unreaped under a minimal init)
  [ -n "$1" ] && [ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -c1)" != Z ]
}

owns() {  # owns PID STRING: the command line of PID contains STRING (a recycled pid is never signalled)
  tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"
}

stop_pid() {  # TERM, wait up to 5 s, then KILL
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 1 50); do alive "$pid" || return 0; sleep 0.1; done
  log "pid $pid ignored TERM after ${i}x0.1 s; sending KILL"
  kill -KILL "$pid" 2>/dev/null || true
}

# ---- the folder: ours, private, and (for sshd's StrictModes) every folder above it safe too ---------------
mode_of() { stat -c '%a' -- "$1"; }
owner_of() { stat -c '%u' -- "$1"; }

check_private() {  # DIR: a real folder owned by us that nobody else can write to
  [ ! -L "$1" ] || die "$1 is a symlink; pass the real folder"
  [ -d "$1" ] || die "$1 is not a folder"
  [ "$(owner_of "$1")" = "$(id -u)" ] || die "$1 belongs to uid $(owner_of "$1"), not to you; use a folder of your own"
  (( (8#$(mode_of "$1") & 8#022) == 0 )) || die "$1 is writable by group or others (mode $(mode_of "$1")); chmod go-w $1 or use a private folder"
}

check_parents() {  # DIR: sshd's StrictModes refuses keys below a folder others can write to or that is not root's/ours
  local p
  p=$(dirname -- "$1")
  while :; do
    local o; o=$(owner_of "$p")
    [ "$o" = 0 ] || [ "$o" = "$(id -u)" ] || die "$p (above $1) belongs to uid $o: sshd (StrictModes yes) refuses keys below it; use a folder under \$HOME (the default)"
    (( (8#$(mode_of "$p") & 8#022) == 0 )) || die "$p (above $1) is writable by group or others (mode $(mode_of "$p")): sshd (StrictModes yes) refuses keys below it; use a folder under \$HOME (the default)"
    [ "$p" != / ] || break
    p=$(dirname -- "$p")
  done
}

inside_dir() {  # PATH: a path strictly inside $dir, with no .. component
  case "$1" in "$dir"/*) ;; *) return 1 ;; esac
  case "/$1/" in */../*|*/./*) return 1 ;; esac
}

# ---- down ----------------------------------------------------------------------------------------------
undo_line() {  # undo one recorded resource: KIND ARGS...
  local kind=$1; shift
  case "$kind" in
    sshd)  # sshd PIDFILE CONFIG
      if ! inside_dir "$1" || ! inside_dir "$2"; then log "ignoring state line outside $dir: sshd $*"; return 0; fi
      local pid=""
      [ -s "$1" ] && pid=$(cat "$1")
      if alive "$pid" && owns "$pid" "$2"; then stop_pid "$pid"; fi
      rm -f -- "$1" ;;
    netns)  # netns NAME: whatever still runs in it was started through this testbed
      [[ "$1" =~ ^p2p-[0-9a-f]{4}-h[0-9]+$ ]] || { log "ignoring netns not made by a testbed: $1"; return 0; }
      if ip netns list 2>/dev/null | grep -qw -- "$1"; then
        local pids p
        pids=$(ip netns pids "$1" 2>/dev/null || true)
        for p in $pids; do stop_pid "$p"; done
        ip netns del "$1" 2>/dev/null || log "could not delete netns $1"
      fi ;;
    link)  # link NAME (a veth end or the bridge)
      [[ "$1" =~ ^p2p[0-9a-f]{4}(h[0-9]+|br)$ ]] || { log "ignoring link not made by a testbed: $1"; return 0; }
      if ip link show "$1" >/dev/null 2>&1; then ip link del "$1" 2>/dev/null || log "could not delete link $1"; fi ;;
    file)  # file PATH: only what up generates, inside this folder; a host folder only with its marker
      inside_dir "$1" || { log "ignoring state line outside $dir: file $1"; return 0; }
      case "${1#"$dir"/}" in
        user_key|user_key.pub|authorized_keys|ssh_config|known_hosts|testbed.json|nodes.yaml)
          [ ! -d "$1" ] || [ -L "$1" ] || { log "ignoring $1: a folder where up writes a file"; return 0; }
          rm -f -- "$1" ;;
        h[0-9]|h[0-9][0-9]|h[0-9][0-9][0-9])
          if [ -L "$1" ]; then rm -f -- "$1"
          elif [ -f "$1/$HOST_MARKER" ]; then rm -rf -- "$1"
          elif [ -e "$1" ]; then log "keeping $1: it has no $HOST_MARKER marker, so up did not make it"; fi ;;
        *) log "ignoring state line for a file up never writes: $1" ;;
      esac ;;
    *) log "unknown state line: $kind $*" ;;
  esac
}

do_down() {  # [keep-files]: stop and delete everything but the generated files (kept for their logs)
  local keep=${1:-}
  if [ ! -f "$STATE" ]; then
    echo "testbed: nothing to stop in $dir"
    return 0
  fi
  local line i lines=() kept=()
  if [ -L "$STATE" ] || [ ! -f "$STATE" ]; then die "$STATE is not a regular file; refusing to act on it"; fi
  while IFS= read -r line; do lines+=("$line"); done < "$STATE"
  [ "${lines[0]:-}" = "$(state_marker)" ] || die "$STATE does not start with '$(state_marker)': not written by testbed.sh up for this folder; refusing to act on it"
  for ((i = ${#lines[@]} - 1; i >= 1; i--)); do
    local -a words
    read -r -a words <<< "${lines[$i]}"
    [ ${#words[@]} -gt 0 ] || continue
    if [ -n "$keep" ] && [ "${words[0]}" = file ]; then kept=("${lines[$i]}" "${kept[@]}"); continue; fi
    undo_line "${words[@]}"
  done
  if [ ${#kept[@]} -gt 0 ]; then
    rm -f -- "$STATE"
    { state_marker; printf '%s\n' "${kept[@]}"; } > "$STATE"
    return 0
  fi
  rm -f "$STATE"
  rmdir "$dir" 2>/dev/null || true
  echo "testbed: down ($dir)"
}

# ---- up ------------------------------------------------------------------------------------------------
record() { echo "$*" >> "$STATE"; }

port_listening() {  # port_listening ADDR PORT: something accepts connections there
  # shellcheck disable=SC2016  # expanded by the inner bash, from its arguments
  timeout 1 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

pick_port() {  # a port in 22000-22999 that no host address listens on
  local try p a busy
  for try in $(seq 1 100); do
    p=$((22000 + RANDOM % 1000))
    busy=0
    for a in "$@"; do if port_listening "$a" "$p"; then busy=1; break; fi; done
    if [ "$busy" = 0 ]; then echo "$p"; return 0; fi
  done
  die "no free port in 22000-22999 after $try tries; pass --port"
}

pick_subnet() {
  local try k
  for try in $(seq 1 100); do
    k=$((1 + RANDOM % 254))
    if ! ip -4 addr show | grep -q "inet 198\.18\.$k\."; then echo "$k"; return 0; fi
  done
  die "no free 198.18.K.0/24 subnet after $try tries; pass --subnet"
}

write_sshd_config() {  # HOSTDIR ADDRESS
  rm -f -- "$1/sshd_config"
  cat > "$1/sshd_config" <<EOF
# sshd for testbed host $(basename "$1"), written by testbed.sh
Port $port
ListenAddress $2
HostKey $1/ssh_host_ed25519_key
PidFile $1/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
AllowUsers $user
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes yes
X11Forwarding no
AllowTcpForwarding no
PrintMotd no
# bash sources ~/.bashrc for commands sent over ssh unless SHLVL says it is nested; a bashrc that runs e.g.
# "pyenv init" then costs about a second per command. Test hosts skip it (commands use absolute paths).
SetEnv SHLVL=1
MaxStartups 100:30:200
MaxSessions 64
LogLevel VERBOSE
Subsystem sftp internal-sftp
EOF
}

start_sshd() {  # NAME HOSTDIR [NETNS]
  local name=$1 hdir=$2 ns=${3:-} i
  record sshd "$hdir/sshd.pid" "$hdir/sshd_config"
  if [ -n "$ns" ]; then
    setsid ip netns exec "$ns" "$SSHD" -D -f "$hdir/sshd_config" -E "$hdir/sshd.log" \
      > /dev/null 2>&1 < /dev/null &
  else
    setsid "$SSHD" -D -f "$hdir/sshd_config" -E "$hdir/sshd.log" > /dev/null 2>&1 < /dev/null &
  fi
  for i in $(seq 1 50); do [ -s "$hdir/sshd.pid" ] && break; sleep 0.1; done
  [ -s "$hdir/sshd.pid" ] || die "sshd of $name wrote no pidfile after ${i}x0.1 s; see $hdir/sshd.log: $(tail -n 3 "$hdir/sshd.log" 2>/dev/null)"
}

make_netns_host() {  # I ADDRESS -> creates netns + veth into the bridge
  local i=$1 addr=$2 ns="p2p-$tag-h$1" host_if="p2p${tag}h$1" peer_if="p2p${tag}n$1"
  record netns "$ns"
  ip netns add "$ns"
  record link "$host_if"
  ip link add "$host_if" type veth peer name "$peer_if"
  ip link set "$peer_if" netns "$ns"
  ip link set "$host_if" master "$bridge" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip link set "$peer_if" name eth0
  ip netns exec "$ns" ip addr add "$addr/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  ns_names[i]=$ns; veths[i]=$host_if
}

on_up_exit() {
  local rc=$?
  [ "$rc" -ne 0 ] || return 0
  do_down keep-files
  log "up failed; stopped what it started (logs kept under $dir; \`$0 down --dir $dir\` removes them)"
}

do_up() {
  in_range "$count" 1 50 || die "up N: N must be 1..50 (got '${count}')"
  [ -x "$SSHD" ] || die "$SSHD not found; install it: apt-get install openssh-server"
  command -v ssh-keygen >/dev/null || die "ssh-keygen not found; install it: apt-get install openssh-client"
  command -v python3 >/dev/null || die "python3 not found (it writes testbed.json); install it: apt-get install python3"
  [ -r "$DESCRIBE" ] || die "$DESCRIBE not found; run testbed.sh from a checkout (scripts/ with testbed_describe.py)"
  [ ! -f "$dir/state" ] || die "a testbed is already up in $dir; run: $0 down --dir $dir"
  if [ "$netns" = 1 ]; then
    [ "$(id -u)" = 0 ] || die "--netns needs root (ip netns, veth, bridge); without it use loopback mode"
    command -v ip >/dev/null || die "ip not found; install it: apt-get install iproute2"
  fi
  if [ -z "$dir" ]; then
    local base="${XDG_CACHE_HOME:-$HOME/.cache}/p2p-testbed"
    mkdir -p -- "$base" && chmod 700 -- "$base"
    dir=$(mktemp -d -- "$base/tb.XXXXXX")
    log "private folder $dir (stop with: $0 down --dir $dir)"
  fi
  case "$dir" in *[[:space:]]*) die "--dir must not contain whitespace (sshd_config paths cannot)" ;; esac
  [ -e "$dir" ] || [ -L "$dir" ] || { mkdir -p -- "$(dirname -- "$dir")" && mkdir -m 700 -- "$dir"; }
  check_private "$dir"
  dir=$(cd "$dir" && pwd -P)
  check_parents "$dir"
  STATE="$dir/state"
  rm -f -- "$STATE"
  state_marker > "$STATE"
  # From here on every created thing is recorded. A failure stops and deletes what it started; the generated
  # files (with the sshd logs) stay until `down`.
  trap on_up_exit EXIT

  user=$(id -un)
  [ "$user" = root ] && mkdir -p /run/sshd   # sshd's privilege-separation directory
  record file "$dir/user_key"; record file "$dir/user_key.pub"; record file "$dir/authorized_keys"
  record file "$dir/ssh_config"; record file "$dir/known_hosts"; record file "$dir/testbed.json"
  record file "$dir/nodes.yaml"
  rm -f -- "$dir/user_key" "$dir/user_key.pub" "$dir/authorized_keys"
  ssh-keygen -q -t ed25519 -N '' -C "p2p-testbed-user" -f "$dir/user_key"
  cat "$dir/user_key.pub" > "$dir/authorized_keys"

  local -a addrs=() ns_names=() veths=()
  local i mode=loopback control="" bridge=""
  tag=$(printf '%04x' $((RANDOM % 65536)))
  if [ "$netns" = 1 ]; then
    mode=netns
    [ -n "$subnet" ] || subnet=$(pick_subnet)
    in_range "$subnet" 0 255 || die "--subnet must be 0..255"
    [ "$count" -le 250 ] || die "--netns supports up to 250 hosts"
    bridge="p2p${tag}br"
    control="198.18.$subnet.1"
    record link "$bridge"
    ip link add "$bridge" type bridge
    ip addr add "$control/24" dev "$bridge"
    ip link set "$bridge" up
    for i in $(seq 1 "$count"); do addrs[i]="198.18.$subnet.$((i + 1))"; done
  else
    [ "$count" -le 50 ] || die "loopback mode supports up to 50 hosts"
    for i in $(seq 1 "$count"); do addrs[i]="127.0.0.$((i + 1))"; done
  fi
  # Fresh namespaces have nothing listening (and probing 198.18.K.x before they exist must not happen).
  if [ -z "$port" ] && [ "$netns" = 1 ]; then port=$((22000 + RANDOM % 1000)); fi
  [ -n "$port" ] || port=$(pick_port "${addrs[@]:1}")
  in_range "$port" 1 65535 || die "--port must be 1..65535"

  rm -f -- "$dir/known_hosts" "$dir/ssh_config"
  : > "$dir/known_hosts"
  {
    echo "# ssh client config for the testbed in $dir (written by testbed.sh)"
  } > "$dir/ssh_config"
  for i in $(seq 1 "$count"); do
    local name="h$i" hdir="$dir/h$i" addr=${addrs[i]}
    record file "$hdir"
    mkdir -m 700 -- "$hdir" || die "$hdir exists already; run: $0 down --dir $dir (or pick another --dir)"
    : > "$hdir/$HOST_MARKER"
    ssh-keygen -q -t ed25519 -N '' -C "p2p-testbed-$name" -f "$hdir/ssh_host_ed25519_key"
    write_sshd_config "$hdir" "$addr"
    echo "[$addr]:$port $(cut -d' ' -f1,2 < "$hdir/ssh_host_ed25519_key.pub")" >> "$dir/known_hosts"
    cat >> "$dir/ssh_config" <<EOF

Host $name $addr
  HostName $addr
  Port $port
  User $user
  IdentityFile $dir/user_key
  IdentitiesOnly yes
  UserKnownHostsFile $dir/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
  LogLevel ERROR
EOF
    if [ "$netns" = 1 ]; then make_netns_host "$i" "$addr"; fi
    if [ "$netns" = 1 ]; then
      start_sshd "$name" "$hdir" "${ns_names[i]}"
    else
      port_listening "$addr" "$port" && die "$addr:$port is already in use; pass another --port"
      start_sshd "$name" "$hdir"
    fi
  done

  # Wait until each sshd accepts connections, then prove a verified login works.
  local bad=0
  for i in $(seq 1 "$count"); do
    for _ in $(seq 1 50); do port_listening "${addrs[i]}" "$port" && break; sleep 0.1; done
    port_listening "${addrs[i]}" "$port" || die "h$i: sshd does not listen on ${addrs[i]}:$port; see $dir/h$i/sshd.log"
  done
  for i in $(seq 1 "$count"); do
    if ! ssh -F "$dir/ssh_config" "h$i" true < /dev/null; then
      log "h$i: ssh login failed (ssh -F $dir/ssh_config h$i true); see $dir/h$i/sshd.log"
      bad=1
    fi
  done

  write_descriptions "$mode" "$control" "$bridge"
  trap - EXIT
  print_status
  [ "$bad" = 0 ] || exit 1
}

write_descriptions() {  # MODE CONTROL_ADDRESS BRIDGE: testbed.json and nodes.yaml, serialized by Python
  local i
  local -a hosts=() control=()
  for i in $(seq 1 "$count"); do
    hosts+=(--host "h$i" "${addrs[i]}")
    if [ "$1" = netns ]; then hosts+=("${ns_names[i]}" "${veths[i]}"); fi
  done
  if [ -n "$2" ]; then control=(--control-address "$2" --bridge "$3"); fi
  python3 -I "$DESCRIBE" --dir "$dir" --mode "$1" --user "$user" --port "$port" "${control[@]}" "${hosts[@]}" \
    || die "could not write $dir/testbed.json and nodes.yaml (scripts/testbed_describe.py failed)"
}

print_status() {
  [ -f "$dir/testbed.json" ] || { echo "testbed: nothing up in $dir"; return 0; }
  local f pid state addr name mode
  # shellcheck disable=SC2016  # a Python program, not a shell string
  mode=$(python3 -I -c 'import json, sys; print(json.load(open(sys.argv[1]))["mode"])' "$dir/testbed.json") \
    || mode="unknown"
  echo "testbed in $dir ($mode mode)"
  for f in "$dir"/h*/sshd_config; do
    name=$(basename "$(dirname "$f")")
    addr=$(awk '$1 == "ListenAddress" {print $2}' "$f")
    pid=$(cat "$(dirname "$f")/sshd.pid" 2>/dev/null || true)
    state=down
    if alive "$pid" && owns "$pid" "$f"; then state="sshd pid $pid"; fi
    printf '  %-4s %s:%s  %s\n' "$name" "$addr" "$(awk '$1 == "Port" {print $2}' "$f")" "$state"
  done
  echo "try: ssh -F $dir/ssh_config h1 hostname     (fleet nodes: $dir/nodes.yaml)"
}

case "$cmd" in
  up) [ -n "$count" ] || die "up needs N, the number of hosts"; do_up ;;
  down|status)
    [ -n "$dir" ] || die "$cmd needs --dir DIR (the folder up printed) or \$P2P_TESTBED_DIR"
    if [ ! -e "$dir" ]; then echo "testbed: nothing to stop in $dir"; exit 0; fi
    check_private "$dir"
    dir=$(cd "$dir" && pwd -P)
    STATE="$dir/state"
    if [ "$cmd" = down ]; then do_down ""; else print_status; fi ;;
esac
