"""One benchmark run's output: tables written row by row, targets, notes and the box they ran on.

Every finished row is flushed to results.md/CSV/JSON at once, so a benchmark that fails later (or a run
that is interrupted) still leaves everything measured before it.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional


def box_facts() -> dict[str, Any]:
    """What a reader needs to judge the figures: the box is shared, so load matters as much as cores."""
    facts: dict[str, Any] = {"nproc": os.cpu_count(), "loadavg": _loadavg(), "python": platform.python_version(),
                             "host": platform.node(), "cpu": _cpu_model()}
    try:
        facts["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                      timeout=5, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        facts["git"] = ""
    try:
        from importlib.metadata import version

        facts["lmcache"] = version("lmcache")
    except Exception:  # not installed: the KV benchmarks will say so themselves
        facts["lmcache"] = ""
    return facts


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


@dataclass
class Target:
    name: str
    goal: str
    measured: str
    reached: Optional[bool]
    reason: str = ""


@dataclass
class Table:
    key: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # (x column, [y columns], y label, log y) for the PNG; None: no plot.
    plot: Optional[tuple[str, list[str], str, bool]] = None
    loadavg: str = ""


class Report:
    def __init__(self, out_dir: Path, size: str = "quick", echo=print) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # "tiny" (the runner's own tests), "quick" (make bench-quick) or "full" (make bench).
        self.size = size
        self.quick = size != "full"
        # Figures one benchmark leaves for the targets of another (e.g. best pull per length).
        self.facts: dict[str, Any] = {}
        self.echo = echo
        self.started = dt.datetime.now(dt.timezone.utc)
        self.box = box_facts()
        self.tables: dict[str, Table] = {}
        self.targets: list[Target] = []
        self.failures: dict[str, str] = {}
        self.timings: dict[str, float] = {}

    def table(self, key: str, title: str, columns: list[str], plot=None) -> Table:
        t = Table(key, title, columns, plot=plot)
        self.tables[key] = t
        return t

    def add_row(self, table: Table, **row: Any) -> None:
        table.rows.append(row)
        table.loadavg = _loadavg()
        self.echo(f"[{table.key}] " + "  ".join(f"{c}={_fmt(row.get(c))}" for c in table.columns if c in row))
        self.flush()

    def note(self, table: Table, text: str) -> None:
        table.notes.append(text)
        self.echo(f"[{table.key}] {text}")
        self.flush()

    def target(self, name: str, goal: str, measured: str, reached: Optional[bool], reason: str = "") -> None:
        self.targets.append(Target(name, goal, measured, reached, reason))
        mark = {True: "reached", False: "NOT reached", None: "not measured"}[reached]
        self.echo(f"[target] {name}: {measured} (goal {goal}) {mark}" + (f": {reason}" if reason else ""))
        self.flush()

    def failed(self, bench: str, error: str) -> None:
        self.failures[bench] = error
        self.echo(f"[{bench}] FAILED: {error}")
        self.flush()

    # ---- output ------------------------------------------------------------------------------

    def flush(self) -> None:
        for t in self.tables.values():
            _write_csv(self.out_dir / f"{t.key}.csv", t)
        (self.out_dir / "results.json").write_text(json.dumps(self.to_dict(), indent=2, default=str))
        (self.out_dir / "results.md").write_text(self.markdown())

    def finish(self) -> None:
        self.box["loadavg_end"] = _loadavg()
        for t in self.tables.values():
            if t.plot and t.rows:
                try:
                    _plot(self.out_dir / f"{t.key}.png", t)
                except Exception as exc:  # a broken plot must not lose the figures
                    t.notes.append(f"plot failed: {exc!r}")
        self.flush()

    def to_dict(self) -> dict[str, Any]:
        return {"started": self.started.isoformat(timespec="seconds"), "size": self.size, "box": self.box,
                "timings_s": self.timings, "targets": [asdict(t) for t in self.targets],
                "failures": self.failures,
                "tables": {k: {"title": t.title, "columns": t.columns, "rows": t.rows, "notes": t.notes,
                               "loadavg": t.loadavg} for k, t in self.tables.items()}}

    def markdown(self) -> str:
        b = self.box
        mode = {"full": "make bench", "quick": "make bench-quick"}.get(self.size, self.size)
        out = [f"# Benchmark results ({mode}, {self.started:%Y-%m-%d %H:%M} UTC)", "",
               f"Box: {b.get('nproc')} CPUs ({b.get('cpu')}), load average {b.get('loadavg')} at start"
               + (f", {b['loadavg_end']} at end" if "loadavg_end" in b else "")
               + f"; git {b.get('git')}, lmcache {b.get('lmcache')}, python {b.get('python')}. "
               "Shared box: compare figures within one table (measured interleaved), not across runs.", ""]
        if self.targets:
            out += ["## Targets", "", *self.targets_table(), ""]
        for t in self.tables.values():
            out += [f"## {t.title}", ""]
            if t.rows:
                out.append("| " + " | ".join(t.columns) + " |")
                out.append("|" + "---|" * len(t.columns))
                for r in t.rows:
                    out.append("| " + " | ".join(_fmt(r.get(c)) for c in t.columns) + " |")
                out.append("")
                out.append(f"(load average {t.loadavg} after the last row)")
                if t.plot:
                    out.append(f"\n![{t.key}]({t.key}.png)")
                out.append("")
            for n in t.notes:
                out.append(f"- {n}")
            if t.notes:
                out.append("")
        if self.failures:
            out += ["## Failures (rows above were kept)", ""]
            out += [f"- **{k}**: {v}" for k, v in self.failures.items()] + [""]
        if self.timings:
            out += ["Wall time per benchmark: " + ", ".join(f"{k} {v:.0f} s" for k, v in self.timings.items()), ""]
        return "\n".join(out)


    def targets_table(self) -> list[str]:
        out = ["| target | goal | measured | status | why |", "|---|---|---|---|---|"]
        for t in self.targets:
            mark = {True: "reached", False: "**not reached**", None: "not measured"}[t.reached]
            out.append(f"| {t.name} | {t.goal} | {t.measured} | {mark} | {t.reason} |")
        return out

    def box_line(self) -> str:
        b = self.box
        mode = {"full": "make bench", "quick": "make bench-quick"}.get(self.size, self.size)
        return (f"From `{mode}` on {self.started:%Y-%m-%d %H:%M} UTC, git {b.get('git')}: {b.get('nproc')} CPUs "
                f"({b.get('cpu')}), load average {b.get('loadavg')} at start"
                + (f", {b['loadavg_end']} at end" if "loadavg_end" in b else "")
                + " (a shared box: compare figures within one table, not across runs).")


README_BEGIN, README_END = "<!-- bench:targets -->", "<!-- /bench:targets -->"


def replace_readme_targets(readme: str, report: "Report") -> str:
    """README text with the block between the bench markers replaced by this run's box line and targets."""
    if README_BEGIN not in readme or README_END not in readme:
        raise ValueError(f"README has no {README_BEGIN} ... {README_END} block to replace; add the two markers")
    head, rest = readme.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    body = "\n".join([report.box_line(), "", *report.targets_table()])
    return f"{head}{README_BEGIN}\n{body}\n{README_END}{tail}"


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if v != v:
            return "n/a"
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.2f}" if abs(v) >= 0.01 or v == 0 else f"{v:.2g}"
    return str(v)


def _write_csv(path: Path, t: Table) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=t.columns, extrasaction="ignore")
        w.writeheader()
        for r in t.rows:
            w.writerow(r)


def _plot(path: Path, t: Table) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_col, y_cols, ylabel, logy = t.plot
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for y in y_cols:
        pts = [(r[x_col], r[y]) for r in t.rows if isinstance(r.get(y), (int, float)) and r.get(x_col) is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=y)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(x_col)
    ax.set_ylabel(ylabel)
    ax.set_title(t.title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
