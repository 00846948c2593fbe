"""The prompt `explain` looks at: text, a text file, chat messages (a JSON file), or a request a test run saved.

A test run's folder keeps `prompts.jsonl`, one line per request it sent, `{"request": id, "instance": ...,
"computed_on": ..., "prompt": text}` (`test basic`: requests a, b and control_b; `test stress`: the row
number of requests.csv, from 1). `computed_on` names the instance that first computed the prompt's prefix
(the warmer), which is the evidence for "evicted" and "holder down" verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from p2p_ops import files
from p2p_ops.errors import BadInput

PROMPTS_FILE = "prompts.jsonl"
# Far above any prompt a model takes (a million-token context is a few MB of text).
PROMPT_CAP = 64 << 20


@dataclass
class PromptSpec:
    label: str
    text: Optional[str] = None
    messages: Optional[list[dict]] = None
    computed_on: str = ""          # the instance a saved run says computed it first
    run: str = ""                  # that run's folder
    recorded: dict = field(default_factory=dict)   # what the run recorded for this request (cached tokens, ...)


def from_text(text: str) -> PromptSpec:
    if not text:
        raise BadInput("--prompt: empty; give the prompt text (or --prompt-file FILE)")
    return PromptSpec(f"text ({len(text)} characters)", text=text)


def from_file(path: str) -> PromptSpec:
    if not Path(path).is_file():
        raise BadInput(f"--prompt-file {path}: no such file")
    return PromptSpec(f"file {path}", text=files.read_text(Path(path), PROMPT_CAP))


def from_messages(path: str) -> PromptSpec:
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"--messages {path}: no such file; give a JSON list of {{role, content}} objects")
    try:
        messages = files.read_json(p, PROMPT_CAP, "give a list of {role, content} objects")
    except BadInput as exc:
        raise BadInput(f"--messages {exc}") from None
    if isinstance(messages, dict) and isinstance(messages.get("messages"), list):
        messages = messages["messages"]
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise BadInput(f"--messages {path}: expected a list of {{\"role\": ..., \"content\": ...}} objects")
    return PromptSpec(f"chat messages {path} ({len(messages)})", messages=messages)


def saved_requests(run_dir: Path) -> list[dict]:
    """The rows of a run's prompts.jsonl; a row of another shape is one line naming the file and line."""
    path = run_dir / PROMPTS_FILE
    if not (path.exists() or path.is_symlink()):
        return []
    rows = []
    for number, line in enumerate(files.read_text(path, 1 << 30, within=run_dir).splitlines(), 1):
        if not line.strip():
            continue
        row = files.parse_json(line, f"{path}: line {number}", "rerun the test or remove the file")
        if not isinstance(row, dict) or "request" not in row or not isinstance(row.get("prompt"), str):
            raise BadInput(f"{path}: line {number}: expected {{\"request\": ..., \"prompt\": TEXT, ...}} as "
                           "`p2pctl test` writes; rerun the test or remove the file")
        rows.append(row)
    return rows


def from_run(run_dir: str, request: Optional[str]) -> PromptSpec:
    """A request a test run saved; without `request`, its first request that was not served from cache."""
    folder = Path(run_dir)
    rows = saved_requests(folder)
    if not rows:
        raise BadInput(f"--run {run_dir}: no {PROMPTS_FILE} there; give a folder `p2pctl test basic` or `test "
                       "stress` wrote (p2p-run/<fleet>/tests/<stamp>-<kind>/)")
    if request is None:
        row = next((r for r in rows if r.get("missed")), None)
        if row is None:
            raise BadInput(f"--run {run_dir}: no request there missed the cache; name one with --request "
                           f"({', '.join(str(r['request']) for r in rows[:8])}, ...)")
    else:
        row = next((r for r in rows if str(r["request"]) == str(request)), None)
        if row is None:
            raise BadInput(f"--request {request}: not in {folder / PROMPTS_FILE}; known: "
                           + ", ".join(str(r["request"]) for r in rows[:12]))
    return PromptSpec(f"request {row['request']} of {folder.name} (sent to {row.get('instance', '?')})",
                      text=row["prompt"], computed_on=row.get("computed_on") or "", run=str(folder),
                      recorded={k: v for k, v in row.items() if k != "prompt"})


def latest_failed_run(tests_dir: Path) -> Optional[Path]:
    """The newest run folder under `tests_dir` holding a request that missed the cache (for the decision tree
    and the bundle: "the last failed proof")."""
    if not tests_dir.is_dir():
        return None
    for run in sorted((p for p in tests_dir.iterdir() if p.is_dir()), key=lambda p: p.name, reverse=True):
        for folder in (run, run / "basic"):
            if any(r.get("missed") for r in saved_requests(folder)):
                return folder
    return None
