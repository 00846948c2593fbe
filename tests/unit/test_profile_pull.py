"""bench.profile_pull's reading of py-spy's raw (collapsed) stacks."""

from bench.profile_pull import top_frames

# As `py-spy record --format raw --nolineno --subprocesses` writes them.
RAW = """process 7:"python -m x";main (x.py);retrieve (a.py);copy_ (libtorch_cpu.so) 6
process 7:"python -m x";main (x.py);retrieve (a.py) 1
process 7:"python -m x";main (x.py);lookup (a.py);poll (zmq.py) 3
"""


def test_own_and_cumulative_shares_leave_out_the_process_root(tmp_path):
    raw = tmp_path / "engine.raw"
    raw.write_text(RAW)
    total, frames = top_frames(raw)
    shares = {f: (own, cum) for f, own, cum in frames}
    assert total == 10
    assert shares["copy_ (libtorch_cpu.so)"] == (0.6, 0.6)
    assert shares["retrieve (a.py)"] == (0.1, 0.7)
    assert shares["main (x.py)"] == (0.0, 1.0)
    assert not any(f.startswith("process ") for f in shares)
    assert [f for f, _, _ in frames][0] == "main (x.py)"  # largest cumulative first
