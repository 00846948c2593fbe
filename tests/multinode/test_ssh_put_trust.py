"""SSHConnector.put into folders another user prepared (issue 31, item 1), on a real sshd (testbed host h1).

The other user is `nobody`, a real second account: it plants its links and folders itself (a process running as
it), and the operator connects over SSH as this user. An upload into a folder that user owns or can write, or
under one, is refused before a byte is written, and nothing is ever written through a link planted there.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from p2p_ops.connectors.ssh import SSHConnector
from p2p_ops.errors import CouldNotRun
from tests.multinode.conftest import needs_sshd

pytestmark = [pytest.mark.multinode, needs_sshd,
              pytest.mark.skipif(os.geteuid() != 0, reason="acting as a second user (nobody) needs root")]

SECRET = "P2P_ENGINE_API_KEY=sk-put-trust-0123456789\n"
NOBODY = 65534


def as_nobody(*argv: str) -> None:
    subprocess.run(argv, check=True, user=NOBODY, group=NOBODY, extra_groups=[], stdin=subprocess.DEVNULL)


@pytest.fixture
def area():
    """A folder both users can enter (/tmp itself is sticky; this one is root's, 0755), holding `shared`: a folder
    of nobody's, and `loot`: nobody's own file, where a link planted by nobody would point."""
    root = Path(tempfile.mkdtemp(prefix="p2p-put-trust-"))
    os.chmod(root, 0o755)
    shared = root / "shared"
    shared.mkdir()
    os.chown(shared, NOBODY, NOBODY)
    as_nobody("sh", "-c", f"printf 'nobody was here\\n' > {shared}/loot")
    yield root
    shutil.rmtree(root)


@pytest.fixture
def h1(testbed3):
    host = testbed3.host("h1")
    conn = SSHConnector("h1", host.address, key=testbed3.user_key, ssh_config=testbed3.ssh_config)
    yield conn
    conn.close()


@pytest.fixture
def env_sh(tmp_path):
    src = tmp_path / "env.sh"
    src.write_text(SECRET)
    return src


def assert_untouched(area: Path) -> None:
    assert (area / "shared" / "loot").read_text() == "nobody was here\n"


@pytest.mark.parametrize("under_shared", [True, False], ids=["inside-their-folder", "below-ours"])
def test_a_run_folder_another_user_made_is_refused_and_its_planted_link_not_followed(h1, area, env_sh, under_shared):
    # The case: nobody made the run folder (in a folder of theirs, or one we gave them in ours) and planted
    # env.sh.tmp there as a link to a file of theirs. The first untrusted folder on the way is named.
    if under_shared:
        run, first = area / "shared" / "run", area / "shared"
        as_nobody("mkdir", str(run))
    else:
        run = first = area / "theirs"
        run.mkdir()
        os.chown(run, NOBODY, NOBODY)
    as_nobody("ln", "-s", str(area / "shared" / "loot"), str(run / "env.sh.tmp"))
    with pytest.raises(CouldNotRun) as exc:
        h1.put(env_sh, str(run / "env.sh"), mode=0o600)
    msg = str(exc.value)
    assert f"{first}: is owned by uid {NOBODY}, not by you (uid 0)" in msg and "\n" not in msg, msg
    assert_untouched(area)
    assert not (run / "env.sh").exists() and not (run / "env.sh").is_symlink()


def test_a_folder_of_ours_under_one_another_user_can_write_is_refused(h1, area, env_sh):
    # Ours and private, but nobody can rename it away and put a folder of theirs in its place at any time.
    run = area / "shared" / "run"
    run.mkdir(mode=0o700)
    with pytest.raises(CouldNotRun) as exc:
        h1.put(env_sh, str(run / "u0" / "env.sh"))
    assert f"{area / 'shared'}: is owned by uid {NOBODY}" in str(exc.value)
    assert not (run / "u0").exists()


def test_a_folder_of_ours_others_can_write_is_refused(h1, area, env_sh):
    run = area / "open"
    run.mkdir()
    os.chmod(run, 0o777)
    with pytest.raises(CouldNotRun) as exc:
        h1.put(env_sh, str(run / "env.sh"))
    assert f"{run}: is writable by others (mode 0777)" in str(exc.value)
    assert not (run / "env.sh").exists()


def test_links_left_in_a_folder_of_ours_are_replaced_never_written_through(h1, area, env_sh):
    # Left from a time the folder was open: a planted temp name and a link at the target itself.
    run = area / "mine"
    run.mkdir(mode=0o700)
    loot = area / "shared" / "loot"
    os.symlink(loot, run / "env.sh.tmp")
    os.symlink(loot, run / "env.sh")
    h1.put(env_sh, str(run / "env.sh"), mode=0o600)
    assert_untouched(area)
    target = run / "env.sh"
    st = os.lstat(target)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and target.read_text() == SECRET
    assert sorted(p.name for p in run.iterdir()) == ["env.sh", "env.sh.tmp"]  # no temp file left behind


def test_folders_it_creates_are_private(h1, area, env_sh):
    target = area / "mine" / "a" / "b" / "start_server.sh"
    h1.put(env_sh, str(target), mode=0o700)
    for folder in (area / "mine", area / "mine" / "a", area / "mine" / "a" / "b"):
        st = os.lstat(folder)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o700), folder
    assert stat.S_IMODE(target.stat().st_mode) == 0o700


def test_a_link_above_is_followed_only_into_folders_as_trusted(h1, area, env_sh):
    (area / "mine").mkdir(mode=0o700)
    os.symlink(area / "mine", area / "to-mine")
    h1.put(env_sh, str(area / "to-mine" / "u0" / "env.sh"))
    assert (area / "mine" / "u0" / "env.sh").read_text() == SECRET
    os.symlink(area / "shared", area / "to-theirs")
    with pytest.raises(CouldNotRun) as exc:
        h1.put(env_sh, str(area / "to-theirs" / "u0" / "env.sh"))
    assert f"{area / 'shared'}: is owned by uid {NOBODY}" in str(exc.value)
    assert not (area / "shared" / "u0").exists()


# The fuzz tier (issue 31, item 7): random chains of folders and links, each ours or nobody's, open or not.
KINDS = ["ours", "ours-open", "ours-sticky", "nobodys", "nobodys-open", "link-to-ours", "link-to-nobodys"]


def trusted(path: Path, uid: int) -> bool:
    """The rule, stated on its own: every folder on the way is ours (root's too above the last) and writable by no
    one else (a sticky one above is fine); a link above counts as the folders it leads through."""
    current = Path("/")
    parts = path.parts[1:]
    for i, part in enumerate(parts):
        current = current / part
        if not os.path.lexists(current):
            return True  # made by put, 0700
        st = os.lstat(current)
        last = i == len(parts) - 1
        if stat.S_ISLNK(st.st_mode):
            if last:
                return False
            current = Path(os.path.realpath(current))
            if not all(trusted_above(p, uid) for p in [current, *current.parents][:-1]):
                return False
            continue
        if not (trusted_above(current, uid) if not last else
                st.st_uid == uid and not st.st_mode & 0o022 and stat.S_ISDIR(st.st_mode)):
            return False
    return True


def trusted_above(path: Path, uid: int) -> bool:
    st = os.lstat(path)
    return st.st_uid in (uid, 0) and (not st.st_mode & 0o022 or bool(st.st_mode & stat.S_ISVTX))


def build(area: Path, chain: list[str]) -> Path:
    current = area / "fuzz"
    current.mkdir(mode=0o700)
    for i, kind in enumerate(chain):
        nxt = current / f"d{i}"
        if kind.startswith("link-to-"):
            real = area / f"real{i}"
            real.mkdir(mode=0o700)
            if kind == "link-to-nobodys":
                os.chown(real, NOBODY, NOBODY)
            os.symlink(real, nxt)
        else:
            nxt.mkdir()
            os.chmod(nxt, {"ours": 0o700, "ours-open": 0o777, "ours-sticky": 0o1777, "nobodys": 0o755,
                           "nobodys-open": 0o777}[kind])
            if kind.startswith("nobodys"):
                os.chown(nxt, NOBODY, NOBODY)
        current = nxt
    return current


@pytest.mark.fuzz
def test_any_chain_of_folders_is_written_only_when_trusted(h1, area, env_sh):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None,
              max_examples=max(1, int(40 * float(os.environ.get("P2P_FUZZ_SCALE", "1")))))
    # Mostly trusted chains with at most one odd folder in them, so that both answers come up often.
    @given(chain=st.lists(st.sampled_from(["ours", "ours-sticky", "link-to-ours"]), min_size=1, max_size=3),
           odd=st.one_of(st.none(), st.tuples(st.integers(0, 2), st.sampled_from(KINDS))), extra=st.integers(0, 1),
           plant=st.sampled_from(["", "target", "tmp"]))
    def check(chain, odd, extra, plant):
        if odd is not None:
            chain[min(odd[0], len(chain) - 1)] = odd[1]
        shutil.rmtree(area / "fuzz", ignore_errors=True)
        for old in area.glob("real*"):
            shutil.rmtree(old)
        folder = build(area, chain)
        for _ in range(extra):
            folder = folder / "new"
        loot = area / "shared" / "loot"
        if plant and os.path.isdir(folder):
            os.symlink(loot, folder / ("env.sh" if plant == "target" else "env.sh.tmp"))
        expected = trusted(folder, os.geteuid())
        h1._dirs.clear()  # each example is a new tree
        try:
            h1.put(env_sh, str(folder / "env.sh"), mode=0o600)
            wrote = True
        except CouldNotRun as exc:
            msg = str(exc.value) if hasattr(exc, "value") else str(exc)
            assert "\n" not in msg and ("not trusted" in msg or "symbolic link" in msg), msg
            wrote = False
        assert wrote == expected, (chain, extra, plant)
        assert_untouched(area)
        if wrote:
            st_ = os.lstat(folder / "env.sh")
            assert stat.S_ISREG(st_.st_mode) and (folder / "env.sh").read_text() == SECRET

    check()
