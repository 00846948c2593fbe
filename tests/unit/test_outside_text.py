"""What a fleet's services answer is printed as plain text (issue 44): one unauthenticated `POST /instances` to
the coordinator with an id of `[/x]` made `status` and `wait` end in rich's MarkupError, and an id holding
ESC/OSC/BEL sequences was printed raw by status, wait and doctor."""

from __future__ import annotations

import pytest

from p2p_ops.cli import output
from p2p_ops.cli.fleet_cmds import _print_status
from p2p_ops.endpoints import lmcache_api
from p2p_ops.lifecycle import status as fleet_status

HOSTILE = ["[/x]", "[bold red]FAKE READY[/]", "a\x1b]0;pwned\x07b", "x\x1b[2J\x1b[Hfleet started OK",
           "\rfleet started OK", "evil\u202etxt.exe", "zero\u200bwidth", "line\u2028two", "nul\x00byte"]


@pytest.mark.parametrize("text", HOSTILE)
def test_plain_escapes_what_would_drive_a_terminal(text):
    shown = output.plain(text)
    assert not any(ch in shown for ch in "\x00\x07\x1b\r\u202e\u200b\u2028")
    assert output.plain("tab\tand\nnewline stay") == "tab\tand\nnewline stay"


def test_status_prints_a_hostile_registration_as_plain_text(capsys):
    server = lmcache_api.ServerStatus(reachable=True, p2p_state="registered\x1b[31m", peer_count=1,
                                      peers=["[/x]", "b\x1b]0;t\x07"])
    inst = fleet_status.InstanceReport("node-a", "node-a-0", "running", "running", server, True, "http://s",
                                       "http://e", "connected")
    rep = fleet_status.FleetReport("f", "http://c", "running", True, [{"instance_id": h, "ip": "127.0.0.1"}
                                                                      for h in HOSTILE], 1, [inst])
    _print_status(rep)       # raised rich.errors.MarkupError on "[/x]" before
    out = capsys.readouterr().out
    assert "[/x]" in out and "[bold red]FAKE READY[/]" in out    # shown as written, never interpreted
    assert not any(ch in out for ch in "\x00\x07\x1b\r\u202e\u200b\u2028")
    assert "\\x1b]0;pwned\\x07" in out
