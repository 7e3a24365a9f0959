"""The comparator the other tests lean on sees every property a rewind must
restore, so that "identical" means something."""
import os

import pytest

from conftest import ODD_NAMES, diff_snapshots, snapshot


def change_content(ws):
    with open(os.path.join(ws, b"a.txt"), "r+b") as f:
        f.write(b"J")                           # same size, other bytes


def keep_mtime(fn):
    """Apply FN to the tree, then put a.txt's and the root's times back."""
    def run(ws):
        times = {p: os.lstat(p).st_mtime_ns for p in (ws, os.path.join(ws, b"a.txt"))}
        fn(ws)
        for p, t in times.items():
            if os.path.lexists(p):
                os.utime(p, ns=(t, t), follow_symlinks=False)
    return run


def break_hard_link(ws):
    """Replace hard1 by a copy of itself: same bytes, mode and mtime, but no
    longer the inode src/hard2 has."""
    old, tmp = os.path.join(ws, b"hard1"), os.path.join(ws, b"copy")
    st = os.lstat(old)
    with open(old, "rb") as f, open(tmp, "wb") as g:
        g.write(f.read())
    os.chmod(tmp, st.st_mode & 0o7777)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.rename(tmp, old)


CHANGES = {
    "content": keep_mtime(change_content),
    "mode": lambda ws: os.chmod(os.path.join(ws, b"suid"), 0o755),
    "owner": lambda ws: os.lchown(os.path.join(ws, b"a.txt"), 1000, -1),
    "file-mtime-by-1ns": lambda ws: os.utime(
        os.path.join(ws, b"a.txt"), ns=(0, os.lstat(os.path.join(ws, b"a.txt")).st_mtime_ns + 1)),
    "dir-mtime": lambda ws: os.utime(os.path.join(ws, b"emptydir"), ns=(0, 5)),
    "symlink-mtime": lambda ws: os.utime(os.path.join(ws, b"sym"), ns=(0, 5), follow_symlinks=False),
    "symlink-target": lambda ws: (os.unlink(os.path.join(ws, b"sym")),
                                  os.symlink(b"secret", os.path.join(ws, b"sym"))),
    "xattr-value": lambda ws: os.setxattr(os.path.join(ws, b"xattr.txt"), b"user.empty", b"x"),
    "hard-link-broken": keep_mtime(break_hard_link),
    "type": keep_mtime(lambda ws: (os.unlink(os.path.join(ws, b"fifo")),
                                   os.mkdir(os.path.join(ws, b"fifo")))),
    "odd-name-gone": lambda ws: os.unlink(os.path.join(ws, ODD_NAMES[3])),
    "sparse-size": lambda ws: os.truncate(os.path.join(ws, b"sparse"), 1 << 21),
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_snapshot_sees_the_change(populated, change):
    before = populated.snap()
    change(populated.ws)
    assert diff_snapshots(before, populated.snap())


def test_snapshot_is_stable_and_ignores_atime(populated):
    before = populated.snap()
    with open(populated.p("big.bin"), "rb") as f:
        f.read()
    assert not diff_snapshots(before, populated.snap())


def test_snapshot_covers_every_kind_of_entry(populated):
    kinds = {e["type"] for e in snapshot(populated.ws).values()}
    assert kinds == {"dir", "file", "symlink", "fifo"}
    groups = [e["link_group"] for e in populated.snap().values() if e.get("link_group") is not None]
    assert groups == [0, 0]
