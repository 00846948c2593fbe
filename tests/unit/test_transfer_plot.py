"""`bench transfer`'s run folder: the plot of GB/s against size and the document naming it, on a fixed result."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image as mpimg

from p2p_ops.bench.transfer import write_run
from p2p_ops.observe.bench_plots import transfer_series

RESULT = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "transfer" / "result_mixed.json"


def _doc() -> dict:
    return json.loads(RESULT.read_text())


def test_series_draw_only_sizes_that_were_read():
    s = transfer_series(_doc()["rows"])
    assert s["mib"] == [1, 2, 4, 16] and s["gbps"] == [3.40, 2.9, 2.1, 0.24]
    assert s["p99_ms"][-1] == 98.8 and s["failed"] == [64]
    assert [x for x, _ in s["memcpy"]] == [1, 2, 4, 16, 64]  # memcpy ran on the reader for every size


def test_run_folder_holds_the_plot_and_the_json_names_it(tmp_path):
    out = tmp_path / "20261201T140000Z-transfer"
    named = write_run(out, _doc())
    assert named["plot"] == str(out / "transfer.png") and named["run_dir"] == str(out)
    image = mpimg.imread(out / "transfer.png")
    assert image.shape[0] > 300 and image.shape[1] > 800  # both panels, at 100 dpi
    saved = json.loads((out / "transfer.json").read_text())
    assert saved == named and saved["rows"] == _doc()["rows"] and saved["verdict"].startswith("FAIL")


def test_no_rows_no_plot(tmp_path):
    named = write_run(tmp_path / "r", {**_doc(), "rows": []})
    assert named["plot"] is None and not (tmp_path / "r" / "transfer.png").exists()
    assert json.loads((tmp_path / "r" / "transfer.json").read_text())["plot"] is None
