"""SSHConnector without a server: how it is configured from a node, what it sends, how failures read.

Real-sshd behaviour (quoting, host keys, auth, timeouts) is in tests/multinode/test_ssh_connector_real.py.
"""

from __future__ import annotations

import shlex
import socket
from types import SimpleNamespace

import paramiko
import pytest

from p2p_ops.connectors import connector_for
from p2p_ops.connectors.ssh import SSHConnectError, SSHConnector, _UnknownHostKey
from p2p_ops.errors import CouldNotRun
from p2p_ops.spec.load import parse_fleet


def ssh_node(**extra):
    node = {"name": "gpu-1", "address": "10.1.2.3", "connection": "ssh",
            "instances": [{"id": "gpu-1-0", "ports": {"mp": 5601, "http": 8081, "p2p": 8551, "engine": 8001}}]}
    node.update(extra)
    return parse_fleet({"name": "f", "nodes": [node]}).nodes[0]


class FakeConn:
    """Stands in for fabric.Connection once `_open` has run: records commands, returns canned results."""

    def __init__(self, exited=0, stdout="", stderr=""):
        self.commands: list[str] = []
        self.kwargs: list[dict] = []
        self.answer = SimpleNamespace(exited=exited, stdout=stdout, stderr=stderr)
        self.is_connected = True
        self.user, self.host, self.port = "root", "127.0.0.9", 22

    def run(self, command, **kwargs):
        self.commands.append(command)
        self.kwargs.append(kwargs)
        return self.answer

    def close(self):
        self.is_connected = False


def with_fake(conn: SSHConnector, fake: FakeConn) -> SSHConnector:
    conn._conn = fake
    return conn


def test_for_node_takes_the_port_only_when_the_spec_sets_it(tmp_path):
    key = tmp_path / "id"
    assert SSHConnector.for_node(ssh_node()).port is None  # ssh_config's Port (or 22) applies
    c = SSHConnector.for_node(ssh_node(ssh_port=2201, ssh_user="ops", ssh_key=str(key)))
    assert (c.port, c.user, c.key, c.host, c.address) == (2201, "ops", str(key), "gpu-1", "10.1.2.3")
    assert isinstance(connector_for(ssh_node()), SSHConnector)


@pytest.mark.parametrize("command", [
    "echo hi",
    "printf '%s\\n' \"a b\" 'it'\"'\"'s'; touch /tmp/x;",
    "cd '/srv/run dir/a;b' && cat \"$HOME/x\"\nsecond line $(date) `id`",
])
def test_every_command_goes_through_bash_c_quoted_whole(command):
    fake = FakeConn(stdout="ok\n")
    res = with_fake(SSHConnector("h", "127.0.0.2"), fake).run(command, timeout=7)
    sent = fake.commands[0]
    assert shlex.split(sent) == ["bash", "-c", command]  # the login shell hands bash exactly our text
    assert fake.kwargs[0]["timeout"] == 7 and fake.kwargs[0]["warn"] and fake.kwargs[0]["in_stream"] is False
    assert fake.kwargs[0]["pty"] is False
    assert (res.host, res.command, res.exit_code, res.stdout) == ("h", command, 0, "ok\n")


def test_check_raises_command_failed_with_host_command_and_output_tail():
    fake = FakeConn(exited=3, stderr="line1\nboom: no such file\n")
    conn = with_fake(SSHConnector("h2", "127.0.0.3"), fake)
    assert conn.run("false").exit_code == 3
    with pytest.raises(CouldNotRun) as err:
        conn.run("cat /nope", check=True)
    text = str(err.value)
    assert "on h2" in text and "`cat /nope` exited 3" in text and "boom: no such file" in text


def test_a_session_dying_mid_command_is_a_host_error_not_a_traceback():
    class Dying(FakeConn):
        def run(self, command, **kwargs):
            raise EOFError("socket closed")

    conn = with_fake(SSHConnector("h3", "127.0.0.4"), Dying())
    with pytest.raises(SSHConnectError) as err:
        conn.run("true")
    assert err.value.what == "connection lost" and "h3" in str(err.value)


def _key():
    return paramiko.RSAKey.generate(1024)


@pytest.mark.parametrize("exc,what,fix", [
    (paramiko.AuthenticationException("Authentication failed."), "authentication failed", "authorized_keys"),
    (paramiko.ssh_exception.NoValidConnectionsError({("127.0.0.9", 22): ConnectionRefusedError(111, "refused")}),
     "unreachable", "sshd runs there"),
    (socket.timeout("timed out"), "unreachable", "firewalls"),
    (socket.gaierror(-2, "Name or service not known"), "unreachable", "fix the node's address"),
    (paramiko.SSHException("Error reading SSH protocol banner"), "SSH handshake failed", "speaks SSH"),
])
def test_connect_failures_name_host_what_and_fix(exc, what, fix):
    conn = SSHConnector("gpu-7", "10.9.9.9", user="ops", port=2222)
    err = conn._explain(exc)
    assert isinstance(err, SSHConnectError) and isinstance(err, CouldNotRun)
    text = str(err)
    assert text.startswith("gpu-7 (ops@10.9.9.9:2222): " + what), text
    assert fix in text and "Traceback" not in text


def test_changed_and_unknown_host_keys_say_which_key_and_how_to_fix():
    conn = SSHConnector("h1", "127.0.0.2", port=22001)
    conn.known_hosts = ["/tb/known_hosts"]
    got, expected = _key(), _key()
    changed = str(conn._explain(paramiko.BadHostKeyException("127.0.0.2", got, expected)))
    assert "host key CHANGED" in changed and got.fingerprint in changed and expected.fingerprint in changed
    assert "ssh-keygen -R '[127.0.0.2]:22001'" in changed and "/tb/known_hosts" in changed
    unknown = str(conn._explain(_UnknownHostKey("[127.0.0.2]:22001", got)))
    assert "unknown host key" in unknown and got.fingerprint in unknown
    assert "ssh-keyscan -p 22001 127.0.0.2" in unknown and "ssh_insecure_host_keys" in unknown


def test_host_keys_are_verified_unless_the_node_opts_out(tmp_path):
    kh = tmp_path / "kh"
    key = _key()
    kh.write_text(f"[127.0.0.2]:22001 {key.get_name()} {key.get_base64()}\n")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host 127.0.0.2\n  Port 22001\n  UserKnownHostsFile {kh}\n  GlobalKnownHostsFile /dev/null\n")
    strict = SSHConnector("h1", "127.0.0.2", ssh_config=str(cfg))._build()
    assert not isinstance(strict.client._policy, (paramiko.AutoAddPolicy, paramiko.WarningPolicy))
    assert strict.client._system_host_keys.lookup("[127.0.0.2]:22001") is not None
    assert strict.port == 22001  # from ssh_config, since the spec did not set ssh_port
    loose = SSHConnector("h1", "127.0.0.2", ssh_config=str(cfg), insecure_host_keys=True)._build()
    assert isinstance(loose.client._policy, paramiko.AutoAddPolicy)


def test_default_known_hosts_files_without_ssh_config():
    conn = SSHConnector("h1", "127.0.0.2")
    conn._build()
    files = conn.known_hosts
    assert any(f.endswith("/.ssh/known_hosts") for f in files) and "/etc/ssh/ssh_known_hosts" in files


def test_a_named_key_is_the_only_credential(tmp_path):
    key = tmp_path / "id_test"
    key.write_text("not read here")
    cfg = tmp_path / "cfg"
    cfg.write_text(f"Host *\n  IdentityFile {tmp_path / 'other'}\n")
    built = SSHConnector("h", "127.0.0.2", key=str(key), ssh_config=str(cfg))._build()
    assert built.connect_kwargs["key_filename"] == [str(key)]
    assert built.connect_kwargs["allow_agent"] is False and built.connect_kwargs["look_for_keys"] is False


@pytest.mark.parametrize("field", ["ssh_key", "ssh_config"])
def test_missing_key_or_config_file_is_a_clear_error(tmp_path, field):
    conn = SSHConnector.for_node(ssh_node(**{field: str(tmp_path / "missing")}))
    with pytest.raises(SSHConnectError) as err:
        conn.run("true")
    assert f"bad {field}" in str(err.value) and "gpu-1" in str(err.value)


class StallingSftp:
    """An SFTP session on a host that stalls after connecting: every operation times out."""

    def __init__(self):
        self.channel = SimpleNamespace(timeout=None)
        self.channel.settimeout = lambda t: setattr(self.channel, "timeout", t)

    def get_channel(self):
        return self.channel

    def stat(self, path):
        raise socket.timeout("timed out")

    lstat = open = chmod = posix_rename = mkdir = normalize = stat


def test_sftp_put_has_a_timeout_and_frees_the_node(tmp_path):
    from p2p_ops.connectors import ssh as ssh_mod

    sftp = StallingSftp()
    fake = FakeConn(stdout="0\n")  # `id -u`: root
    fake.sftp = lambda: sftp
    conn = with_fake(SSHConnector("h5", "127.0.0.6"), fake)
    local = tmp_path / "env.sh"
    local.write_text("export A=1\n")
    with pytest.raises(CouldNotRun, match="did not finish within"):
        conn.put(local, "/run/p2p/node-a-0/env.sh", mode=0o600)
    assert sftp.channel.timeout == ssh_mod.SFTP_TIMEOUT
    assert not fake.is_connected  # the stuck session is closed: the next step connects anew
    assert conn._lock.acquire(blocking=False)  # and the node's lock is free for the next step
    conn._lock.release()
