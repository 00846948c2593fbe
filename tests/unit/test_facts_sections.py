"""The batched node read: many facts in one round trip, each back as its own Result with its own exit code."""

from __future__ import annotations

from p2p_ops.connectors import LocalConnector
from p2p_ops.facts.base import CommandFact
from p2p_ops.facts.sections import CUT_SHORT, read_node, results, script


def _fact(name: str, *argv: str) -> CommandFact:
    return CommandFact(name, tuple(argv), str.strip)


def test_each_fact_gets_its_output_and_exit_code_with_stderr_merged():
    facts = {"ok": _fact("ok", "sh", "-c", "echo out; echo err >&2"),
             "fails": _fact("fails", "sh", "-c", "echo partial; exit 3"),
             "absent": _fact("absent", "no-such-tool-p2p"),
             "a label with 'quotes' and $(spaces)": _fact("q", "echo", "$(touch PWNED)")}
    read = read_node(LocalConnector("here"), facts)
    assert read["ok"].exit_code == 0 and read["ok"].output.splitlines() == ["out", "err"]
    assert (read["fails"].exit_code, read["fails"].output) == (3, "partial")
    assert read["absent"].not_found
    assert read["a label with 'quotes' and $(spaces)"].output == "$(touch PWNED)"
    assert all(r.host == "here" for r in read.values()) and read["ok"].command == "sh -c 'echo out; echo err >&2'"


def test_a_read_cut_short_marks_the_unfinished_and_missing_sections():
    facts = {"a": _fact("a", "true"), "b": _fact("b", "true"), "c": _fact("c", "true")}
    full = LocalConnector().run(script(facts)).stdout
    cut = full[:full.index("@@p2p-section b") + len("@@p2p-section b\n")] + "half a line"
    read = results(cut, "node", facts)
    assert read["a"].exit_code == 0
    assert (read["b"].exit_code, read["b"].output) == (CUT_SHORT, "half a line")
    assert read["c"].exit_code == CUT_SHORT and "stopped" in read["c"].stderr


def test_nothing_to_read_runs_nothing():
    class Refuses:
        host = "x"

        def run(self, *_a, **_k):
            raise AssertionError("no round trip for an empty batch")

    assert read_node(Refuses(), {}) == {}
