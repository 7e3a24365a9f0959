"""Choosing what to rewind, and rewinding safely: one transaction, up to a
seq, refusing to pull the ground from under a later transaction (unless
--cascade), leaving a person's later edits alone (unless --force), and
finishing a rewind that was killed halfway."""
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import BUILD, TXREPLAY, assert_same, snapshot

SHIM = os.path.join(BUILD, "libftsbx.so")


def mixed(before, after, prefix):
    """AFTER, with every entry under PREFIX taken from BEFORE."""
    def under(rel):
        return rel == prefix or rel.startswith(prefix + b"/")
    out = {k: v for k, v in after.items() if not under(k)}
    out.update({k: v for k, v in before.items() if under(k)})
    return out


def test_rewind_txn_leaves_other_transactions(populated):
    s = populated
    before = s.snap()
    a = s.txn(["put", "src/main.c", "A"], ["unlink", "src/mid.bin"], ["mkdir", "src/newdir"])
    s.txn(["put", "private/notes", "B"], ["mkdir", "private/d"])
    after = s.snap()
    s.rewind("--txn", str(a))
    assert_same(mixed(before, after, b"src"), s.snap())


def test_rewind_latest_txn_alone_keeps_the_earlier_one(populated):
    s = populated
    s.txn(["put", "a.txt", "A"])
    after_a = s.snap()
    b = s.txn(["put", "a.txt", "B"], ["chmod", "a.txt", "600"])
    s.rewind("--txn", str(b))
    assert_same(after_a, s.snap())


@pytest.mark.parametrize("later", [
    [["put", "a.txt", "B"]],
    [["chmod", "a.txt", "600"]],
    [["unlink", "a.txt"]],
    [["rename", "a.txt", "moved"]],
    [["put", "nd/inner", "B"]],
], ids=["rewrites", "chmods", "removes", "renames-away", "fills-new-dir"])
def test_rewind_txn_refused_when_a_later_txn_changed_the_same_path(populated, later):
    s = populated
    before = s.snap()
    a = s.txn(["put", "a.txt", "A"], ["mkdir", "nd"])
    b = s.txn(*later)
    after = s.snap()
    r = s.rewind("--txn", str(a), rc=1)
    said = (r.stdout + r.stderr).decode(errors="replace")
    assert re.search(rf"\b{b}\b", said), f"the later txn {b} is not named: {said!r}"
    assert_same(after, s.snap())
    s.rewind("--txn", str(a), "--cascade")
    assert_same(before, s.snap())


def test_cascade_leaves_unrelated_later_transactions(populated):
    s = populated
    before = s.snap()
    a = s.txn(["put", "src/main.c", "A"])
    s.txn(["put", "src/main.c", "B"])
    s.txn(["put", "private/notes", "C"])
    after = s.snap()
    s.rewind("--txn", str(a), "--cascade")
    assert_same(mixed(before, after, b"src"), s.snap())


def test_rewind_to_seq(populated):
    s = populated
    before = s.snap()
    first = s.txn(["put", "a.txt", "1"], ["unlink", "big.bin"], ["mkdir", "d"])
    after_first = s.snap()
    s.txn(["put", "a.txt", "2"], ["rename", "d", "e"], ["unlink", "sym"])
    s.txn(["put", "d", "3"], ["chmod", "suid", "700"], ["link", "secret", "e/s"])
    cut = max(r["seq"] for r in s.log() if r["txn"] == first)
    s.rewind("--to", str(cut))
    assert_same(after_first, s.snap())
    s.rewind()
    assert_same(before, s.snap())


def by_hand(path, data):
    time.sleep(0.02)                    # so that the ctime moves past the txn's end
    with open(path, "r+b") as f:
        f.write(data)


@pytest.mark.parametrize("rel,ops", [
    ("a.txt", [["put", "a.txt", "agent's"]]),
    ("new", [["put", "new", "agent's"]]),
    ("big.bin", [["write", "big.bin", "10", "agent's"]]),
], ids=["rewritten-file", "created-file", "big-file"])
def test_drift_is_reported_and_left_alone(populated, rel, ops):
    s = populated
    before = s.snap()
    s.txn(*ops, ["put", "secret", "agent's too"])
    by_hand(s.p(rel), b"a person's edit")
    r = s.rewind(rc=1)
    said = r.stdout + r.stderr
    assert b"drift" in said.lower() and s.p(rel) in said, said
    with open(s.p(rel), "rb") as f:
        assert f.read().startswith(b"a person's edit")
    assert s.snap()[b"secret"] == before[b"secret"], "the rest was not rewound"
    s.rewind("--force")
    assert_same(before, s.snap())


def test_drift_by_chmod_is_reported(populated):
    s = populated
    before = s.snap()
    s.txn(["chmod", "script.sh", "700"])
    time.sleep(0.02)
    os.chmod(s.p("script.sh"), 0o711)
    r = s.rewind(rc=1)
    assert b"drift" in (r.stdout + r.stderr).lower()
    assert os.stat(s.p("script.sh")).st_mode & 0o7777 == 0o711
    s.rewind("--force")
    assert_same(before, s.snap())


def many_changes(s):
    return s.txn(*[op for i in range(8) for op in (
        ["put", f"f{i}", "x" * i], ["write", "a.txt", str(i), "y"], ["mkdir", f"d{i}"],
        ["rename", f"f{i}", f"d{i}/g"], ["chmod", f"d{i}", "700"])],
        ["unlink", "big.bin"], ["rename", "src", "s2"])


@pytest.mark.parametrize("after", [1, 3, 10])
def test_interrupted_rewind_finishes_when_run_again(populated, after):
    s = populated
    before = s.snap()
    many_changes(s)
    changed = s.snap()
    r = s.rewind(env={"FTSBX_REWIND_CRASH_AFTER": str(after)}, rc=None, crash_ok=True)
    assert r.returncode == -9, f"returncode {r.returncode}: {r.stderr!r}"
    halfway = s.snap()
    assert halfway != changed and halfway != before
    s.tx("verify", s.sess)
    s.rewind()
    assert_same(before, s.snap())
    s.rewind()
    assert_same(before, s.snap())


@pytest.mark.parametrize("after", range(1, 10))
def test_interrupted_rewind_of_entries_made_after_their_directory_changed(populated, after):
    """A directory's mode changes, then entries in it come and go between
    other changes: the undo of each entry changes that directory's times
    again, and a rewind killed after the next undo, run again, must see that
    change as its own, not as drift."""
    s = populated
    before = s.snap()
    s.txn(["unlink", "src/main.c"], ["chmod", "src", "700"], ["chmod", "secret", "640"],
          ["put", "src/new", "x"], ["chmod", "script.sh", "700"], ["rename", "a.txt", "src/moved"],
          ["chmod", "suid", "755"], ["chmod", "empty", "600"])
    r = s.rewind(env={"FTSBX_REWIND_CRASH_AFTER": str(after)}, rc=None, crash_ok=True)
    assert r.returncode == -9, f"returncode {r.returncode}: {r.stderr!r}"
    r = s.rewind()
    assert b" 0 drift, 0 failed" in r.stdout and b"drift:" not in r.stderr, r.stdout + r.stderr
    assert_same(before, s.snap())


@pytest.mark.parametrize("after", range(1, 5))
def test_interrupted_rewind_of_a_second_name_keeps_the_first(populated, after):
    """The undo of a hard link's creation changes the ctime of the file
    under its first name at once: a rewind killed right after it, run
    again, must take that change for its own (file times lag the records'
    clock by up to a tick), not for drift."""
    s = populated
    before = s.snap()
    s.txn(["append", "a.txt", "more\n"], ["link", "a.txt", "src/alias"])
    s.txn(["append", "empty", "x"])
    r = s.rewind(env={"FTSBX_REWIND_CRASH_AFTER": str(after)}, rc=None, crash_ok=True)
    assert r.returncode == -9, f"returncode {r.returncode}: {r.stderr!r}"
    r = s.rewind()
    assert b" 0 drift, 0 failed" in r.stdout and b"drift:" not in r.stderr, r.stdout + r.stderr
    assert_same(before, s.snap())


def test_interrupted_txn_rewind_finishes_when_run_again(populated):
    s = populated
    a = s.txn(["put", "private/notes", "A"])
    mid = s.snap()
    b = many_changes(s)
    r = s.rewind("--txn", str(b), env={"FTSBX_REWIND_CRASH_AFTER": "3"}, rc=None, crash_ok=True)
    assert r.returncode == -9
    s.rewind("--txn", str(b))
    assert_same(mid, s.snap())
    s.rewind("--txn", str(a))


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to play two users")
def test_a_directory_whose_times_cannot_be_set_holds_back_nothing_else(tmp_path):
    """A user rewinds in a workspace shared with another: the times of the
    other's directory cannot be set (EPERM, said and counted as failed),
    and everything else, the workspace's own times included, is rewound."""
    base = tempfile.mkdtemp(dir="/tmp", prefix="ftsbx-users-")
    try:
        os.chmod(base, 0o755)
        ws, od = os.path.join(base, "ws"), os.path.join(base, "ws", "od")
        os.makedirs(od)
        for path, text in ((os.path.join(ws, "shared"), "s\n"), (os.path.join(od, "f"), "f\n")):
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o666)
            os.chown(path, 1001, 1001)
        os.chmod(od, 0o777)
        os.chown(od, 1001, 1001)
        os.chown(ws, 1000, 1000)
        os.makedirs(os.path.join(base, "j"))
        os.chown(os.path.join(base, "j"), 1000, 1000)
        for p, t in ((ws, 1_000_000_000), (od, 1_100_000_000)):
            os.utime(p, ns=(t, t))
        before = snapshot(os.fsencode(ws))
        as_user = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "env", "HOME=" + base,
                   "FTSBX_JOURNAL=" + os.path.join(base, "j", "s")]
        r = subprocess.run(as_user + ["LD_PRELOAD=" + SHIM, "bash", "-c", "rm -f shared od/f && echo n > new"],
                           cwd=ws, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        r = subprocess.run(as_user + [TXREPLAY, "rewind", os.path.join(base, "j", "s")], cwd=base,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "1 failed" in r.stdout and "Operation not permitted" in r.stderr, \
            r.stdout + r.stderr
        after = snapshot(os.fsencode(ws))
        assert after[b"od"] != before[b"od"]            # its times: another user's directory
        after[b"od"] = before[b"od"]
        assert_same(before, after)
    finally:
        subprocess.run(["rm", "-rf", base])


@pytest.mark.parametrize("script", [
    "echo a > sub/passwd; echo b > other; busybox mv sub sub.old; busybox ln -s {outside} sub",
    # a directory looked at before, whose name the symlink's begins with
    "echo a > sub/d/passwd; mkdir subx; echo b > subx/zz; echo b > other; busybox mv sub sub.old; "
    "busybox ln -s {outside} sub",
    # the symlink moved by a journaled mv, a directory made in its place
    "echo a > sub/passwd; echo b > other; busybox mv sub sub.old; busybox ln -s {outside} sub; mv sub q; "
    "mkdir sub; echo x > sub/g",
])
def test_rewind_never_acts_through_a_symlink_the_journal_did_not_see_made(tmp_path, script):
    """A static program (unjournaled) swaps a directory of the workspace for
    a symlink to a directory outside it: the undo of a file created in the
    directory would remove the file of the same name outside. Rewind leaves
    it alone, says why and fails; everything else is undone."""
    ws, outside = tmp_path / "ws", tmp_path / "system" / "etc"
    (ws / "sub" / "d").mkdir(parents=True)
    (outside / "d").mkdir(parents=True)
    (outside / "passwd").write_text("root:x:0:0\n")
    (outside / "d" / "passwd").write_text("root:x:0:0\n")
    outside_before = snapshot(os.fsencode(tmp_path / "system"))
    env = dict(os.environ, HOME=str(tmp_path))
    for k in ("LD_PRELOAD", "FTSBX_TXN", "FTSBX_ROOT", "FTSBX_JOURNAL", "FTSBX_POLICY"):
        env.pop(k, None)
    j = tmp_path / "j"
    r = subprocess.run([os.path.join(BUILD, "ftsbx"), "run", "--journal", str(j), "--", "bash", "-c",
                        script.format(outside=outside)], cwd=ws, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rw = subprocess.run([TXREPLAY, "rewind", str(j)], capture_output=True, text=True)
    assert rw.returncode == 1, rw.stdout + rw.stderr
    assert f"'{ws}/sub' on its way is now a symlink" in rw.stderr, rw.stderr
    assert os.path.islink(ws / "sub")
    assert_same(outside_before, snapshot(os.fsencode(tmp_path / "system")), "the directory outside")
    assert not (ws / "other").exists()       # the rest was undone
