"""Run commands on a fleet node over SSH (the `ssh` connection kind), on fabric/paramiko: one lazily opened
connection per node, reused by every command and file copy.

- every command runs as `bash -c <command, shlex-quoted>`, whatever the node's login shell;
- host keys are **verified** against the known_hosts files (ssh_config's `UserKnownHostsFile` /
  `GlobalKnownHostsFile`, else the defaults) with a reject policy for unknown hosts; only
  `ssh_insecure_host_keys: true` accepts any key. (Fabric alone would auto-accept every key: it never loads
  known_hosts.) `StrictHostKeyChecking` in ssh_config is ignored;
- key auth with `ssh_key` only (no agent, no other keys: a wrong key fails as such), or, without `ssh_key`,
  the agent, the ssh_config `IdentityFile`s and the default keys;
- connect, banner, auth and per-command timeouts; no sudo, no pty, stdin closed;
- files go over SFTP (no shell), as safely as the local connector writes them: every folder on the way must be
  the remote user's (root's too, above the last) and writable by no one else (a sticky /tmp above is fine),
  folders made are 0700, and the bytes go to a fresh temp file (exclusive create: never through a planted link)
  renamed into place (a running wrapper never sees half a file).

Failures to reach a host are `SSHConnectError`s whose message names the host, what failed and the fix; a command
that runs and exits non-zero is a `Result` (or `CommandFailed` with check=True), as with the local connector.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shlex
import secrets
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Optional

from p2p_ops import files
from p2p_ops.connectors.base import CommandFailed, Result
from p2p_ops.errors import CouldNotRun

# Paramiko logs transport errors itself; without a handler Python prints them to stderr next to our message.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

CONNECT_TIMEOUT = 10.0
# Every SFTP operation (one env.sh or wrapper is a few KiB): a host that stalls after connecting must not hold
# the node's lock, and `up` with it, forever.
SFTP_TIMEOUT = 60.0
KEEPALIVE_S = 15
RETRY_AFTER_S = 15.0
DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


class SSHConnectError(CouldNotRun):
    def __init__(self, host: str, target: str, what: str, detail: str, fix: str):
        super().__init__(f"{host} ({target}): {what}: {detail}; {fix}")
        self.host, self.target, self.what, self.fix = host, target, what, fix


class _UnknownHostKey(Exception):
    def __init__(self, name: str, key):
        super().__init__(name)
        self.name, self.key = name, key


def _fingerprint(key) -> str:
    try:
        return f"{key.get_name()} {key.fingerprint}"  # paramiko >= 3: 'SHA256:...'
    except Exception:  # noqa: BLE001 - a fingerprint is only decoration in an error message
        return key.get_name()


class SSHConnector:
    def __init__(self, host: str, address: str, user: str = "", port: Optional[int] = None, key: str = "",
                 ssh_config: str = "", insecure_host_keys: bool = False,
                 connect_timeout: float = CONNECT_TIMEOUT):
        self.host, self.address, self.user, self.port = host, address, user, port
        self.key = os.path.expanduser(key) if key else ""
        self.ssh_config = os.path.expanduser(ssh_config) if ssh_config else ""
        self.insecure_host_keys, self.connect_timeout = insecure_host_keys, connect_timeout
        self._conn = None
        self._lock = threading.RLock()
        self._dirs: dict[str, str] = {}   # folder -> the same, checked, links above it resolved
        self._uid: Optional[int] = None
        self._failed: Optional[tuple[float, CouldNotRun]] = None
        self.known_hosts: list[str] = []   # the files host keys were checked against (for messages)

    @classmethod
    def for_node(cls, node) -> "SSHConnector":
        # ssh_port counts only when the spec sets it: otherwise ssh_config's Port (or 22) applies.
        port = node.ssh_port if "ssh_port" in node.model_fields_set else None
        return cls(node.name, node.address, node.ssh_user, port, node.ssh_key, node.ssh_config,
                   node.ssh_insecure_host_keys)

    @property
    def target(self) -> str:
        # As far as known before connecting.
        conn = self._conn
        if conn is not None:
            return f"{conn.user}@{conn.host}:{conn.port}"
        port = f":{self.port}" if self.port else ""
        return f"{self.user + '@' if self.user else ''}{self.address}{port}"

    def _build(self):
        from fabric import Config, Connection

        if self.ssh_config and not Path(self.ssh_config).is_file():
            raise SSHConnectError(self.host, self.target, "bad ssh_config", f"{self.ssh_config} does not exist",
                                  "fix the node's ssh_config path in fleet.yaml")
        if self.key and not Path(self.key).is_file():
            raise SSHConnectError(self.host, self.target, "bad ssh_key", f"{self.key} does not exist",
                                  "fix the node's ssh_key path in fleet.yaml")
        config = Config(runtime_ssh_path=self.ssh_config) if self.ssh_config else Config()
        connect_kwargs = {"banner_timeout": self.connect_timeout, "auth_timeout": self.connect_timeout}
        conn = Connection(self.address, user=self.user or None, port=self.port, config=config,
                          connect_timeout=int(max(1, self.connect_timeout)), connect_kwargs=connect_kwargs,
                          inline_ssh_env=True)
        if self.key:
            # Only the named key (set after Connection added ssh_config IdentityFiles, which blur a wrong key).
            conn.connect_kwargs.update(key_filename=[self.key], allow_agent=False, look_for_keys=False)
        self._trust(conn)
        return conn

    def _trust(self, conn) -> None:
        import paramiko

        if self.insecure_host_keys:
            conn.client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
            return
        cfg = conn.ssh_config
        user = (cfg.get("userknownhostsfile") or "").split() or list(DEFAULT_USER_KNOWN_HOSTS)
        glob = (cfg.get("globalknownhostsfile") or "").split() or list(DEFAULT_GLOBAL_KNOWN_HOSTS)
        self.known_hosts = [os.path.expanduser(p) for p in user + glob]
        for path in self.known_hosts:
            if os.path.isfile(path):
                conn.client.load_system_host_keys(path)

        class RejectUnknown(paramiko.MissingHostKeyPolicy):
            def missing_host_key(self, client, hostname, key):
                raise _UnknownHostKey(hostname, key)

        conn.client.set_missing_host_key_policy(RejectUnknown())

    def _open(self):
        with self._lock:
            if self._conn is None:
                self._conn = self._build()
            conn = self._conn
            if conn.is_connected:
                return conn
            # A host that just failed fails again at once for a few seconds: one dead host among many must
            # not cost a connect timeout per command (down, status), yet a host that comes back is retried.
            if self._failed is not None and time.monotonic() - self._failed[0] < RETRY_AFTER_S:
                raise self._failed[1]
            try:
                conn.open()
            except BaseException as exc:  # noqa: BLE001 - every failure becomes one clear message
                conn.client.close()
                err = self._explain(exc)
                self._failed = (time.monotonic(), err)
                raise err from None
            self._failed = None
            conn.transport.set_keepalive(KEEPALIVE_S)
            return conn

    def _explain(self, exc: BaseException) -> CouldNotRun:
        import paramiko

        if isinstance(exc, CouldNotRun):
            return exc
        port = self._conn.port if self._conn is not None else (self.port or 22)
        addr = self._conn.host if self._conn is not None else self.address
        name = addr if port == 22 else f"[{addr}]:{port}"
        files = ", ".join(self.known_hosts) or "(none)"
        if isinstance(exc, _UnknownHostKey):
            what, detail, fix = (
                "unknown host key",
                f"{name} offered {_fingerprint(exc.key)}, which is in none of the known_hosts files ({files})",
                f"verify that fingerprint on the host (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) and add it: "
                f"ssh-keyscan -p {port} {addr} >> ~/.ssh/known_hosts (or the node's UserKnownHostsFile); "
                f"only throwaway test hosts may set ssh_insecure_host_keys: true")
        elif isinstance(exc, paramiko.BadHostKeyException):
            what, detail, fix = (
                "host key CHANGED",
                f"{name} offered {_fingerprint(exc.key)} but known_hosts ({files}) has "
                f"{_fingerprint(exc.expected_key)}; this is a reinstalled host or a man-in-the-middle",
                f"confirm the new key out of band, then drop the old one: ssh-keygen -R {shlex.quote(name)} "
                f"[-f KNOWN_HOSTS] and add the new one")
        elif isinstance(exc, paramiko.AuthenticationException):
            how = f"key {self.key}" if self.key else "the agent / default keys"
            what, detail, fix = (
                "authentication failed", f"the server refused {how} ({exc})",
                "check ssh_user and ssh_key in fleet.yaml, and that the public key is in the node's "
                "~/.ssh/authorized_keys")
        elif isinstance(exc, (paramiko.ssh_exception.NoValidConnectionsError, ConnectionError)):
            what, detail, fix = ("unreachable", f"connection refused ({exc})",
                                 "check the node's address and ssh_port, and that sshd runs there")
        elif isinstance(exc, (socket.timeout, TimeoutError)):
            what, detail, fix = ("unreachable", f"no answer within {self.connect_timeout:g} s",
                                 "check the address, routing and firewalls (is the host up?)")
        elif isinstance(exc, socket.gaierror):
            what, detail, fix = ("unreachable", f"cannot resolve {addr!r} ({exc})",
                                 "fix the node's address (or its HostName in ssh_config)")
        elif isinstance(exc, OSError):
            what, detail, fix = ("unreachable", str(exc) or type(exc).__name__,
                                 "check the address, ssh_port and that sshd runs there")
        elif isinstance(exc, paramiko.SSHException):
            what, detail, fix = ("SSH handshake failed", str(exc) or type(exc).__name__,
                                 "check that the port speaks SSH and the server accepts this client")
        else:
            what, detail, fix = ("SSH failed", f"{type(exc).__name__}: {exc}",
                                 "rerun with -v logging of paramiko, or try `ssh` by hand")
        return SSHConnectError(self.host, self.target, what, detail, fix)

    def run(self, command: str, timeout: float = 60, check: bool = False) -> Result:
        from invoke.exceptions import CommandTimedOut

        conn = self._open()
        remote = "bash -c " + shlex.quote(command)
        start = time.monotonic()
        try:
            res = conn.run(remote, hide=True, warn=True, pty=False, in_stream=False, timeout=timeout)
            result = Result(self.host, command, res.exited, res.stdout, res.stderr)
            if res.exited == -1 and time.monotonic() - start >= timeout:
                # invoke can lose the race between its timer and the closed channel: no exit status after the
                # timeout is that timeout.
                result = Result(self.host, command, 124, res.stdout, f"timed out after {timeout:.0f} s")
        except CommandTimedOut as exc:
            out = exc.result.stdout if exc.result is not None else ""
            result = Result(self.host, command, 124, out, f"timed out after {timeout:.0f} s")
        except Exception as exc:  # noqa: BLE001 - a session that dies mid-command is a host problem
            self.close()
            raise SSHConnectError(self.host, self.target, "connection lost", f"{type(exc).__name__}: {exc}",
                                  "check the host (rebooted? sshd restarted?) and rerun") from None
        if check and not result.ok:
            raise CommandFailed(result)
        return result

    def put(self, local: Path, remote: str, mode: int | None = None) -> None:
        data = files.read_bytes(local)
        conn = self._open()
        try:
            with self._lock:
                sftp = conn.sftp()
                sftp.get_channel().settimeout(SFTP_TIMEOUT)
                where = remote if remote.startswith("/") else posixpath.join(sftp.normalize("."), remote)
                folder = self._private_dir(sftp, posixpath.dirname(posixpath.normpath(where)))
                target = posixpath.join(folder, posixpath.basename(remote))
                tmp = posixpath.join(folder, f".{posixpath.basename(remote)[:200]}.{secrets.token_hex(8)}.tmp")
                with sftp.open(tmp, "wbx") as out:
                    out.chmod(0o600 if mode is None else mode)
                    out.write(data)
                try:
                    sftp.posix_rename(tmp, target)
                except OSError:
                    sftp.remove(tmp)
                    raise
        except files.Refused as exc:
            raise CouldNotRun(f"{self.host} ({self.target}): {exc.path}: {exc.reason}; use a folder of this user's "
                              f"that only it can write (the node's run_dir)") from None
        except (socket.timeout, TimeoutError):
            self.close()  # the SFTP channel is stuck mid-operation: never reuse it
            raise CouldNotRun(f"{self.host} ({self.target}): writing {remote} over SFTP did not finish within "
                              f"{SFTP_TIMEOUT:g} s; check the host (disk full? stalled filesystem?)") from None
        except OSError as exc:
            raise CouldNotRun(f"{self.host} ({self.target}): cannot write {remote} over SFTP ({exc}); check that "
                              f"the node's run_dir is writable by this user") from None

    def _private_dir(self, sftp, path: str) -> str:
        """`path` made over SFTP (no shell) where missing, every folder on the way checked as the remote user's
        (`files.check_trusted`); returned with the links above it resolved."""
        if path in self._dirs:
            return self._dirs[path]
        if self._uid is None:
            self._uid = int(self.run("id -u", check=True).stdout)
        current = "/"
        parts = [p for p in path.split("/") if p not in ("", ".")]
        for i, part in enumerate(parts):
            current = posixpath.join(current, part)
            last = i == len(parts) - 1
            try:
                st = sftp.lstat(current)
            except FileNotFoundError:
                try:
                    sftp.mkdir(current, mode=0o700)
                except OSError:
                    pass  # made meanwhile by someone else: judged below like any folder found
                st = sftp.lstat(current)
            if stat.S_ISLNK(st.st_mode) and not last:
                # A link above is as safe as the folder holding it (checked) and every folder it leads through.
                current = sftp.normalize(current)
                walked = "/"
                for folder in current.strip("/").split("/"):
                    walked = posixpath.join(walked, folder)
                    files.check_trusted(walked, sftp.lstat(walked), uid=self._uid, above=True)
                continue
            if stat.S_ISLNK(st.st_mode):
                raise files.Refused(current, f"is a symbolic link (to {sftp.readlink(current)}); not followed")
            if not stat.S_ISDIR(st.st_mode):
                raise files.Refused(current, "is not a folder")
            files.check_trusted(current, st, uid=self._uid, above=not last)
        self._dirs[path] = current
        return current

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                except Exception:  # noqa: BLE001 - closing a dead session
                    pass
