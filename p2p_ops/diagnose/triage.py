"""Triage a debug bundle offline (`p2pctl triage BUNDLE.tar.gz`): the doctor's judge on the facts the bundle
captured, with no fleet and no network, for whoever reads a bundle attached to an issue.

It reads members of the tar by name and never extracts it (a bundle from elsewhere is outside input: links,
absolute paths and oversized members are skipped, the whole read is bounded). `doctor.json` holds the facts the
doctor gathered; `check` and the judge run on them again, so the causes come in the live doctor's order with the
same ids, and the ids the live doctor recorded are compared. The logs are grepped for the log signatures
(`diagnose/signatures.yaml`, as the decision tree greps them), `explain.json` gives explain's verdict on the last
missed request, and `lacks` says what the bundle does not hold that would decide more.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from pydantic import ValidationError

from p2p_ops import files
from p2p_ops.causes import CAUSES, Verdict, rank_key, verdict
from p2p_ops.diagnose.doctor import check
from p2p_ops.diagnose.doctor.model import FleetFacts
from p2p_ops.diagnose.judge.fleet import judgement
from p2p_ops.diagnose.signatures import SIGNATURES
from p2p_ops.errors import BadInput

MEMBER_CAP = 64 << 20          # one file read from a bundle
TOTAL_CAP = 2 << 30            # every member's size together: a bundle is megabytes; past this it is not ours
MEMBERS_CAP = 20_000
LOG_ROLES = {"server.log": "server", "engine.log": "engine", "coordinator.log": "coordinator"}


@dataclass
class Triage:
    bundle: str
    fleet: str
    created_utc: str
    causes: list[Verdict]                  # the judge's order on the captured facts (the likely cause first)
    recorded: Optional[list[str]]          # cause ids the live doctor gave when the bundle was taken
    logs: list[Verdict]                    # log lines naming a cause (the last one per signature and file)
    explain: list[Verdict]                 # explain's verdicts on the last request that missed
    lacks: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> Optional[bool]:
        return None if self.recorded is None else [v.id for v in self.causes] == self.recorded

    def to_dict(self) -> dict[str, Any]:
        return {"bundle": self.bundle, "fleet": self.fleet, "created_utc": self.created_utc,
                "likely_cause": self.causes[0].to_dict() if self.causes else None,
                "causes": [v.to_dict() for v in self.causes], "recorded_causes": self.recorded,
                "agrees_with_live_doctor": self.agrees, "logs": [v.to_dict() for v in self.logs],
                "explain": [v.to_dict() for v in self.explain], "lacks": self.lacks}

    def lines(self) -> list[str]:
        out = [f"triage of {self.bundle} (fleet {self.fleet}, taken {self.created_utc or '?'}), offline"]
        out += [f"  {i}. {v.id} ({v.subject}): {v.line()}" for i, v in enumerate(self.causes, 1)] or [
            "  the doctor's facts confirm no cause"]
        if self.agrees is not None:
            out.append("same causes as the live doctor gave" if self.agrees else
                       f"the live doctor gave {', '.join(self.recorded or []) or 'no cause'}: this p2pctl judges "
                       "the same facts differently (another version?)")
        out += [f"log: {v.subject}: {v.id}: {v.evidence[0].seen}" for v in self.logs]
        out += [f"explain: {v.subject}: {v.id}: {v.fix}" for v in self.explain]
        out += [f"lacks: {x}" for x in self.lacks]
        return out


def _members(path: Path) -> dict[str, bytes]:
    """Regular files of the bundle by their path below its root folder, each at most MEMBER_CAP bytes."""
    try:
        tar = tarfile.open(path, "r:gz")
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise BadInput(f"{path}: not a bundle p2pctl wrote (cannot read it as tar.gz: {' '.join(str(exc).split())}); "
                       "make one with `p2pctl bundle`") from None
    out: dict[str, bytes] = {}
    total = 0
    with tar:
        try:
            for i, m in enumerate(tar):
                total += max(m.size, 0)
                if i >= MEMBERS_CAP or total > TOTAL_CAP:
                    raise BadInput(f"{path}: more than {MEMBERS_CAP:,} files or {TOTAL_CAP >> 30} GiB: not a bundle "
                                   "p2pctl wrote")
                name = m.name.split("/", 1)[1] if "/" in m.name else ""
                if not m.isreg() or not name or m.name.startswith("/") or ".." in m.name.split("/") \
                        or m.size > MEMBER_CAP:
                    continue
                f = tar.extractfile(m)
                if f is not None:
                    out[name] = f.read(MEMBER_CAP)
        except (OSError, tarfile.TarError, EOFError) as exc:
            raise BadInput(f"{path}: the bundle is damaged ({' '.join(str(exc).split())})") from None
    return out


def _json(members: dict[str, bytes], name: str) -> Any:
    raw = members.get(name)
    if raw is None:
        return None
    return files.parse_json(raw.decode("utf-8", "replace"), f"{name} in the bundle",
                            "the bundle was changed after p2pctl wrote it")


def _facts(doctor: Any) -> FleetFacts:
    try:
        return FleetFacts.from_dict(doctor["facts"])
    except (ValidationError, TypeError, KeyError) as exc:
        where = ""
        if isinstance(exc, ValidationError):
            err = exc.errors()[0]
            where = f" at facts.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
        raise BadInput(f"doctor.json in the bundle does not hold the doctor's facts{where}; take the bundle again "
                       "with this p2pctl (`p2pctl bundle`)") from None


def _log_verdicts(members: dict[str, bytes]) -> list[Verdict]:
    found: dict[tuple[str, str], Verdict] = {}
    for name, raw in sorted(members.items()):
        role = LOG_ROLES.get(name.rsplit("/", 1)[-1])
        if role is None:
            continue
        subject = name.rsplit("/", 1)[0].rsplit("/", 1)[-1]          # the instance's folder, or "coordinator"
        sigs = [s for s in SIGNATURES.values() if role in s.logs]
        for line in raw.decode("utf-8", "replace").splitlines():
            for s in sigs:
                if s.search(line):
                    found[(s.id, name)] = verdict(s.cause, subject, (f"log:{s.id}", f"{name}: {line.strip()[:240]}"))
    return sorted(found.values(), key=rank_key)


def _explain_verdicts(explain: Any) -> list[Verdict]:
    """Explain's verdicts as recorded, each id checked against this catalogue (the bundle is outside input)."""
    nodes = explain.get("nodes") if isinstance(explain, dict) else None
    out = []
    for node in nodes if isinstance(nodes, list) else []:
        for c in node.get("causes") or [] if isinstance(node, dict) else []:
            if not isinstance(c, dict) or c.get("id") not in CAUSES:
                continue
            seen = [(str(e.get("source", "")), str(e.get("seen", ""))) for e in c.get("evidence") or []
                    if isinstance(e, dict)]
            v = verdict(c["id"], str(c.get("subject") or "?"), *seen)
            out.append(replace(v, fix=c["fix"]) if isinstance(c.get("fix"), str) else v)   # filled when recorded
    return out


def triage(path: Path) -> Triage:
    if not path.is_file():
        raise BadInput(f"{path}: no such bundle; `p2pctl bundle` writes one (p2p-run/<fleet>/bundles/)")
    members = _members(path)
    manifest = _json(members, "manifest.json")
    if not isinstance(manifest, dict):
        raise BadInput(f"{path}: no manifest.json at its root: not a bundle p2pctl wrote")
    lacks = [f"{u.get('what')}: {u.get('error')}" for u in manifest.get("unreachable") or [] if isinstance(u, dict)]
    doctor = _json(members, "doctor.json")
    causes: list[Verdict] = []
    recorded = None
    if isinstance(doctor, dict):
        facts = _facts(doctor)
        try:
            report = check(facts)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            raise BadInput(f"doctor.json in the bundle holds facts this p2pctl cannot judge ({type(exc).__name__}: "
                           f"{exc}); take the bundle again with this p2pctl") from None
        causes = [f.cause for f in judgement(facts, report).findings if f.cause is not None]
        said = (doctor.get("report") or {}).get("causes") if isinstance(doctor.get("report"), dict) else None
        recorded = [c.get("id") for c in said if isinstance(c, dict)] if isinstance(said, list) else None
    else:
        lacks.append("doctor.json: the bundle was taken with --no-doctor, or the doctor failed (see above): no "
                     "facts to judge; take it again without --no-doctor")
    explain = _json(members, "explain.json")
    if explain is None:
        lacks.append("explain.json: no request that missed was found when the bundle was taken; run a request that "
                     "misses (or `p2pctl test basic`) and take the bundle again")
    if not any(n.rsplit("/", 1)[-1] == "server.log" for n in members):
        lacks.append("no server.log: the servers' logs were not collected")
    return Triage(str(path), str(manifest.get("fleet") or "?"), str(manifest.get("created_utc") or ""), causes,
                  recorded, _log_verdicts(members), _explain_verdicts(explain), lacks)
