"""The debug bundle's writer: files redacted in memory, then every secret value found in any of them scrubbed from
all (a log prints a key bare); `manifest.json` lists each redaction (kind, file, line, name; never the value)."""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from p2p_ops import files
from p2p_ops.diagnose.redact import Redaction, RedactionResult, manifest_entries, redact_text, scrub_known
from p2p_ops.diagnose.redact.structure import redact_structure
from p2p_ops.errors import BadInput

FORMAT = "p2p-bundle/1"


@dataclass
class BundleWriter:
    """Collects redacted files in memory; `write` makes the tar.gz (nothing unredacted ever touches disk).
    `entries`, `unreachable` and `refused` are the manifest's rows as they are written."""

    root: str
    files: dict[str, bytes] = field(default_factory=dict)
    entries: list[dict] = field(default_factory=list)
    redactions: list[Redaction] = field(default_factory=list)
    unreachable: list[dict] = field(default_factory=list)
    refused: list[dict] = field(default_factory=list)
    known: dict[str, str] = field(default_factory=dict)  # each secret value known (the spec's, any masked) -> name

    def add_text(self, path: str, text: str, what: str, source: str, truncated: bool = False) -> None:
        self._add(path, redact_text(text, where=path), what, source, truncated)

    def add_spec(self, path: str, text: str, source: str) -> None:
        """A fleet spec, redacted from its parsed structure (every YAML layout of a secret); one that does not
        parse is left out, not copied."""
        try:
            result = redact_structure(text, path)
        except BadInput as exc:
            self.missing("the fleet spec", source, f"not copied: {exc}")
            return
        self._add(path, result, "the fleet spec, written back from its parsed structure with secrets masked "
                                "(comments and layout not kept)", source, False)

    def _add(self, path: str, result: RedactionResult, what: str, source: str, truncated: bool) -> None:
        data = result.text.encode("utf-8", errors="replace")
        self.files[path] = data
        self.redactions += result.redactions
        self.known.update(result.values)
        self.entries.append({"path": path, "what": what, "source": source, "bytes": len(data),
                             "redactions": len(result.redactions), "truncated": truncated})

    def add_json(self, path: str, obj: Any, what: str, source: str) -> None:
        text = json.dumps(obj, indent=2, default=lambda o: asdict(o) if is_dataclass(o) else str(o))  # parsed facts
        self.add_text(path, text + "\n", what, source)

    def merge(self, part: BundleWriter) -> None:
        for name in ("files", "known"):
            getattr(self, name).update(getattr(part, name))
        for name in ("entries", "redactions", "unreachable", "refused"):
            getattr(self, name).extend(getattr(part, name))

    def scrub_known(self) -> None:
        """Remove every known secret value from every file, wherever it was learnt (files before env.sh too)."""
        counts = {}
        for path, data in self.files.items():
            result = scrub_known(data.decode("utf-8"), self.known, path)
            if result.redactions:
                self.files[path] = result.text.encode("utf-8")
                self.redactions += result.redactions
                counts[path] = len(result.redactions)
        for entry in self.entries:
            entry["redactions"] += counts.get(entry["path"], 0)
            entry["bytes"] = len(self.files.get(entry["path"], b""))
        for item in self.unreachable + self.refused:
            why = "error" if "error" in item else "reason"
            item[why] = scrub_known(item[why], self.known, "manifest").text

    def refuse(self, what: str, source: str, reason: str) -> None:
        self.refused.append({"what": what, "source": source, "reason": redact_text(reason, "manifest").text[:500]})

    def missing(self, what: str, source: str, error: str) -> None:
        self.unreachable.append({"what": what, "source": source,
                                 "error": redact_text(str(error), "manifest").text[:500]})

    def manifest(self, extra: dict) -> dict:
        summary = {"total": len(self.redactions), "by_kind": dict(Counter(r.kind for r in self.redactions)),
                   "files": sorted({r.where for r in self.redactions})}
        return {"format": FORMAT, **extra, "files": self.entries, "redactions": manifest_entries(self.redactions),
                "redaction_summary": summary, "unreachable": self.unreachable, "refused": self.refused}

    def write(self, out: Path, extra: dict, force: bool = False) -> dict:
        self.scrub_known()
        manifest = self.manifest(extra)
        files.make_dirs(out.parent)
        # A fresh private temp file (O_EXCL, 0600): a planted `<out>.tmp` symlink is never followed.
        fd, tmp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        tmp = Path(tmp_name)
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            items = [("manifest.json", (json.dumps(manifest, indent=2) + "\n").encode())] + sorted(self.files.items())
            for path, data in items:
                info = tarfile.TarInfo(f"{self.root}/{path}")
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                tar.addfile(info, io.BytesIO(data))
        tmp.chmod(0o600)
        if force:
            tmp.replace(out)
            return manifest
        try:  # a hard link never replaces: a file that appeared meanwhile (or a planted symlink) stays as it is
            os.link(tmp, out)
        except FileExistsError:
            raise BadInput(f"{out} exists; name a new file or add --force to replace it") from None
        finally:
            tmp.unlink(missing_ok=True)
        return manifest
