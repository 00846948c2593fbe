"""The one way the toolkit reads and writes files it did not make in this very call: logs, snapshots, run
folders, specs, reports. Every layer uses it; a refusal is one line naming the path and why (`Refused`).

- Reads never block and never read past a cap: the open is non-blocking, and anything but a regular file (a
  FIFO, a device, a socket, a folder) is refused before a byte is read. `follow=False` refuses a symbolic link
  as the last part of the path; `within=DIR` resolves the path and refuses it when it lands outside DIR. Both
  also refuse a file with a second hard link, which may be anywhere on the disk.
- Writes go to a fresh temp file beside the target (O_EXCL, never through a planted link), then rename over
  it: a link at the target is replaced, its target never touched. The mode is set explicitly (0600 unless
  asked), whatever the umask.
- `make_dirs` creates missing folders 0700 whatever the umask, leaving existing ones be (`-o` paths). Run
  folders are trusted only when they are ours (`private_dir`, `check_trusted`).
- `parse_json`/`read_json` read JSON nested at most `JSON_DEPTH` levels (every walker after it recurses), so a
  crafted document is one line, never a RecursionError; `check_tree` vets a snapshot tree before it is read.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from itertools import takewhile
from pathlib import Path
from typing import Any

from p2p_ops.errors import BadInput

DEFAULT_CAP = 64 << 20
# Deeper than any document the toolkit writes (a report or snapshot is a handful of levels).
JSON_DEPTH = 64
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"),
          (stat.S_ISLNK, "a symbolic link"))


class Refused(BadInput):
    def __init__(self, path: str | Path, reason: str, fix: str = ""):
        self.path, self.reason = str(path), reason
        super().__init__(f"{path}: {reason}" + (f"; {fix}" if fix else ""))


def kind(mode: int) -> str:
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _link_note(path: str) -> str:
    try:
        return f"a symbolic link (to {os.readlink(path)}); not followed"
    except OSError:
        return "a symbolic link; not followed"


def _open(path: Path, follow: bool, within: Path | None) -> int:
    target = str(path)
    if within is not None:
        target = os.path.realpath(path)
        if not _inside(target, os.path.realpath(within)):
            how = f"is a symbolic link (to {os.readlink(path)})" if os.path.islink(path) else f"resolves to {target}"
            raise Refused(path, f"{how}, outside {within}; not read")
        follow = False  # the resolved path has no link left in it, unless one appeared since: refuse that
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(target, flags | (0 if follow else os.O_NOFOLLOW))
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise Refused(path, _link_note(str(path))) from None
        raise Refused(path, exc.strerror or str(exc)) from None


def read_bytes(path: str | Path, cap: int = DEFAULT_CAP, *, follow: bool = True, within: str | Path | None = None,
               tail: bool = False) -> bytes:
    """A regular file's bytes, at most `cap` of them: a bigger file is refused (with `tail`, its last `cap`
    bytes are returned instead)."""
    path = Path(path)
    fd = _open(path, follow, Path(within) if within is not None else None)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(path, f"is {kind(st.st_mode)}, not a regular file; not read")
        if st.st_nlink > 1 and (within is not None or not follow):
            raise Refused(path, f"has {st.st_nlink} hard links (the others may lie outside); not read")
        if st.st_size > cap and not tail:
            raise Refused(path, f"is {st.st_size:,} bytes, more than the {cap:,} this reads")
        if st.st_size > cap:
            os.lseek(fd, st.st_size - cap, os.SEEK_SET)
        chunks, left = [], cap
        try:
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
        except OSError as exc:  # a sysfs attribute that errors on read, a file on a dying disk
            raise Refused(path, f"cannot be read: {exc.strerror}") from None
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | Path, cap: int = DEFAULT_CAP, **kw) -> str:
    """`read_bytes` decoded as UTF-8 (bytes that are not become U+FFFD: a log may hold anything a client sent)."""
    return read_bytes(path, cap, **kw).decode("utf-8", errors="replace")


def write_text(path: str | Path, text: str, mode: int = 0o600) -> Path:
    return write_bytes(path, text.encode("utf-8"), mode)


def write_json(path: str | Path, doc, mode: int = 0o600) -> Path:
    return write_text(path, json.dumps(doc, indent=2, default=str) + "\n", mode)


def write_bytes(path: str | Path, data: bytes, mode: int = 0o600) -> Path:
    """Through a fresh temp file and a rename: a link at `path` is replaced, never followed. The folder must
    exist."""
    path = Path(path)
    folder = path.parent
    if not folder.is_dir():
        raise Refused(path, f"folder {folder} does not exist", "create it or write elsewhere")
    if path.is_dir() and not path.is_symlink():
        raise Refused(path, "is a folder", "name a file inside it")
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), mode)  # the umask may have taken bits off
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _temp_beside(path: Path) -> tuple[int, Path]:
    for attempt in range(100):
        tmp = path.parent / f".{path.name[:200]}.{os.getpid()}.{attempt}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), tmp
        except FileExistsError:
            continue
        except OSError as exc:
            raise Refused(path, f"cannot write in {path.parent}: {exc.strerror}") from None
    raise Refused(path, f"no free temp file name in {path.parent}")


def check_trusted(path: str | Path, st: os.stat_result | None = None, uid: int | None = None,
                  above: bool = False) -> None:
    """Refuse a file or folder that is a link, belongs to another user, or others can write (its contents
    would be what someone else wants run). Root's own files are trusted by root. `uid` is whose files are
    trusted (default: ours; over SSH, the remote user's). `above`: a folder above the one written to, where
    root's folders are trusted too and a sticky one (/tmp) may be writable by all (no one else can rename what
    is ours in it)."""
    path = Path(path)
    uid = os.geteuid() if uid is None else uid
    try:
        st = st or os.lstat(path)
    except OSError as exc:
        raise Refused(path, exc.strerror or str(exc)) from None
    if stat.S_ISLNK(st.st_mode):
        raise Refused(path, _link_note(str(path)), "replace it with the real folder or file")
    if st.st_uid != uid and not (above and st.st_uid == 0):
        raise Refused(path, f"is owned by uid {st.st_uid}, not by you (uid {uid}); not trusted",
                      "use a folder of your own (--run-dir)")
    if st.st_mode & 0o022 and not (above and st.st_mode & stat.S_ISVTX):
        raise Refused(path, f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o}); not trusted",
                      f"chmod go-w {path} after checking what is in it, or re-render")


def make_dirs(path: str | Path) -> Path:
    path = Path(os.path.abspath(path))
    for folder in reversed(list(takewhile(lambda p: not os.path.lexists(p), (path, *path.parents)))):
        try:
            os.mkdir(folder, 0o700)
            _tighten(folder)  # a umask like 0777 would leave it 0000, and its children uncreatable
        except FileExistsError:
            pass
        except OSError as exc:
            raise Refused(folder, f"cannot create the folder: {exc.strerror}") from None
    if not path.is_dir():
        raise Refused(path, "is not a folder", "name a folder")
    return path


def private_dir(path: str | Path) -> Path:
    """Make `path` a folder only we can enter: every folder created on the way is 0700, an existing `path` is
    tightened to 0700 when it is ours, and a link or another user's folder is refused."""
    path = make_dirs(path) if not os.path.islink(path) else Path(os.path.abspath(path))
    _tighten(path)
    return path


def _tighten(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if os.path.islink(path):
            raise Refused(path, _link_note(str(path)), "replace it with a real folder") from None
        raise Refused(path, exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            check_trusted(path, st)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def check_tree(root: str | Path, max_entries: int = 200_000, max_depth: int = 64,
               devices_under: tuple[str, ...] = ("dev",)) -> None:
    """Refuse a snapshot tree that holds a link leading out of it (or in a loop), a FIFO or socket, a device
    outside `devices_under` (a copied /dev is only listed, never read), or is too big or too deep to be one;
    the first problem found is named."""
    root = Path(root)
    real_root = os.path.realpath(root)
    listed = tuple(str(root / d) for d in devices_under)
    stack, seen = [(root, 0)], 0
    linked: dict[tuple[int, int], list] = {}  # (device, inode) -> [a path, its link count, names seen here]
    while stack:
        folder, depth = stack.pop()
        if depth > max_depth:
            raise Refused(folder, f"is nested more than {max_depth} folders deep; not a snapshot tree")
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            raise Refused(folder, exc.strerror or str(exc)) from None
        seen += len(entries)
        if seen > max_entries:
            raise Refused(root, f"holds more than {max_entries:,} files; not a snapshot tree")
        for entry in entries:
            st = entry.stat(follow_symlinks=False)  # cached by scandir: a link is counted as itself, not its target
            _check_entry(Path(entry.path), st, real_root, root, entry.path.startswith(listed))
            if entry.is_dir(follow_symlinks=False):
                stack.append((Path(entry.path), depth + 1))
            elif st.st_nlink > 1 and stat.S_ISREG(st.st_mode):
                linked.setdefault((st.st_dev, st.st_ino), [entry.path, st.st_nlink, 0])[2] += 1
    # A hard link is harmless when all its names are in the tree (`cp -a` and tar keep a tree's own).
    for path, links, names in linked.values():
        if names < links:
            raise Refused(path, f"has {links} hard links, {links - names} of them outside the snapshot {root}; "
                                "not read")


def _check_entry(path: Path, st: os.stat_result, real_root: str, root: Path, listed_only: bool) -> None:
    if stat.S_ISLNK(st.st_mode):
        if not _inside(os.path.realpath(path), real_root):
            raise Refused(path, f"is a symbolic link to {os.readlink(path)}, outside the snapshot {root}; not read")
        try:
            st = os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused(path, "is a symbolic link loop; not read") from None
            return  # a dangling link inside the tree reads as absent, as in sysfs
    if listed_only and (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
        return
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise Refused(path, f"is {kind(st.st_mode)}, not a regular file; a snapshot holds only files and folders")


def parse_json(text: str, where: str, fix: str = "") -> Any:
    """JSON text; malformed or nested deeper than JSON_DEPTH is one BadInput line naming `where` (and `fix`)."""
    tail = f"; {fix}" if fix else ""
    too_deep = BadInput(f"{where}: JSON nested deeper than {JSON_DEPTH} levels; not a file p2pctl wrote{tail}")
    try:
        doc = json.loads(text)
    except RecursionError:
        raise too_deep from None
    except ValueError as exc:
        raise BadInput(f"{where}: is not valid JSON ({exc}){tail}") from None
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (list, dict)):
            if depth > JSON_DEPTH:
                raise too_deep
            stack += [(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value)]
    return doc


def read_json(path: str | Path, cap: int = DEFAULT_CAP, fix: str = "", **kw) -> Any:
    return parse_json(read_text(path, cap, **kw), str(path), fix)
