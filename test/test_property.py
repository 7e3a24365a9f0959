"""Random sequences of changes, in one or several transactions, always
rewind to the exact tree they started from (Hypothesis). A small model of
the tree keeps the generated ops mostly valid; an op the model got wrong
makes jdrive exit 1 and the example only checks the rewind.

FTSBX_LONG=1 runs 1000 examples instead of about 40."""
import os
import shutil
import stat
import tempfile

from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from conftest import LONG, Scratch, assert_same, begun_txn, snapshot

NAMES = [b"a", b"b", b"\xff x", b"n\nl"]
DATA = [b"x", b"hello\n", b"tab\tand more", b"\xfe\xff bytes"]
OFFSETS = [b"0", b"1", b"4095", b"70000"]
SIZES = [b"0", b"10", b"5000", b"300000"]
MODES = [b"600", b"644", b"755", b"700", b"4755"]
TARGETS = [b"a", b"../b", b"nowhere", b"\xff", b"a/b/c"]
XATTRS = [b"user.a", b"user.b"]


class Model:
    """What is in the workspace: path -> (kind, inode key), and the xattr
    names of each inode. Paths are relative bytes; the root is b""."""

    def __init__(self, ws):
        self.ws = ws
        self.entries, self.xattrs, self.next_ino = {}, {}, 0
        for top, dirs, files in os.walk(ws):
            for name in dirs + files:
                path = os.path.join(top, name)
                st_ = os.lstat(path)
                rel = os.path.relpath(path, ws)
                self.entries[rel] = (self.kind(st_.st_mode), st_.st_ino)
                if stat.S_ISREG(st_.st_mode) or stat.S_ISDIR(st_.st_mode):
                    self.xattrs[st_.st_ino] = {os.fsencode(n) for n in
                                               os.listxattr(path, follow_symlinks=False)}

    @staticmethod
    def kind(mode):
        return "d" if stat.S_ISDIR(mode) else "f" if stat.S_ISREG(mode) else \
            "l" if stat.S_ISLNK(mode) else "p"

    def new_ino(self, kind):
        self.next_ino -= 1
        if kind in "fd":
            self.xattrs[self.next_ino] = set()
        return self.next_ino

    def of(self, kinds):
        return sorted(p for p, (k, _) in self.entries.items() if k in kinds)

    def dirs(self):
        return [b""] + self.of("d")

    def absent(self):
        return sorted(os.path.join(d, n) for d in self.dirs() for n in NAMES
                      if os.path.join(d, n) not in self.entries)

    def children(self, path):
        return [p for p in self.entries if p.startswith(path + b"/")]

    def create(self, path, kind, ino=None):
        self.entries[path] = (kind, self.new_ino(kind) if ino is None else ino)

    def remove(self, path):
        del self.entries[path]

    def rename(self, src, dst, exchange=False):
        moved = {p: v for p, v in self.entries.items() if p == src or p.startswith(src + b"/")}
        other = {p: v for p, v in self.entries.items() if p == dst or p.startswith(dst + b"/")}
        for p in list(moved) + (list(other) if exchange or other else []):
            self.entries.pop(p, None)
        for p, v in moved.items():
            self.entries[dst + p[len(src):]] = v
        if exchange:
            for p, v in other.items():
                self.entries[src + p[len(dst):]] = v


def pick(data, choices):
    return data.draw(st.sampled_from(choices)) if choices else None


def gen_content(data, m, op):
    """write, put, append, fill on a file or a new path; truncate on a file."""
    target = pick(data, m.of("f") + ([] if op == b"truncate" else m.absent()))
    if target is None:
        return None
    if target not in m.entries:
        m.create(target, "f")
    if op == b"write":
        return [op, target, pick(data, OFFSETS), pick(data, DATA)]
    if op in (b"fill", b"truncate"):
        return [op, target, pick(data, SIZES)]
    return [op, target, pick(data, DATA)]


def gen_create(data, m, op):
    path = pick(data, m.absent())
    if path is None:
        return None
    if op == b"mkdir":
        m.create(path, "d")
        return [op, path] + data.draw(st.sampled_from([[], [b"700"], [b"755"]]))
    if op == b"mkfifo":
        m.create(path, "p")
        return [op, path]
    if op == b"symlink":
        m.create(path, "l")
        return [op, pick(data, TARGETS), path]
    src = pick(data, m.of("f"))
    if src is None:
        return None
    m.create(path, "f", m.entries[src][1])
    return [b"link", src, path]


def gen_remove(data, m, op):
    if op == b"rmdir":
        path = pick(data, [d for d in m.of("d") if not m.children(d)])
    else:
        path = pick(data, m.of("flp"))
    if path is not None:
        m.remove(path)
        return [op, path]
    return None


def gen_rename(data, m, op):
    src = pick(data, m.of("fdlp"))
    if src is None:
        return None
    kind = m.entries[src][0]
    dsts = [p for p in m.absent() if not p.startswith(src + b"/")]
    if kind != "d":
        dsts += [p for p in m.of("flp") if p != src]
    dst = pick(data, dsts)
    if dst is None:
        return None
    flag = data.draw(st.sampled_from([[], [b"noreplace"]])) if dst not in m.entries else \
        data.draw(st.sampled_from([[], [b"exchange"]]))
    m.rename(src, dst, exchange=flag == [b"exchange"])
    return [op, src, dst] + flag


def gen_meta(data, m, op):
    if op == b"chmod":
        path = pick(data, m.of("fd"))
        return path and [op, path, pick(data, MODES)]
    if op == b"chown":
        path = pick(data, m.of("fdlp"))
        ids = pick(data, [[b"0", b"0"], [b"1000", b"1000"], [b"65534", b"7"]])
        return path and [op, path] + ids
    if op == b"utime":
        path = pick(data, m.of("fdlp"))
        sec = str(data.draw(st.integers(0, 2**33))).encode()
        nsec = str(data.draw(st.integers(0, 999_999_999))).encode()
        return path and [op, path, sec, nsec]
    if op == b"setxattr":
        path = pick(data, m.of("fd"))
        if path is None:
            return None
        name = pick(data, XATTRS)
        m.xattrs[m.entries[path][1]].add(name)
        return [op, path, name, pick(data, DATA)]
    pairs = [(p, n) for p in m.of("fd") for n in sorted(m.xattrs[m.entries[p][1]])]
    if not pairs:
        return None
    path, name = pick(data, pairs)
    m.xattrs[m.entries[path][1]].discard(name)
    return [op, path, name]


GENERATORS = {
    b"write": gen_content, b"put": gen_content, b"append": gen_content,
    b"fill": gen_content, b"truncate": gen_content,
    b"mkdir": gen_create, b"mkfifo": gen_create, b"symlink": gen_create, b"link": gen_create,
    b"rmdir": gen_remove, b"unlink": gen_remove, b"rename": gen_rename,
    b"chmod": gen_meta, b"chown": gen_meta, b"utime": gen_meta,
    b"setxattr": gen_meta, b"rmxattr": gen_meta,
}


def initial_tree(ws):
    """A small tree with a bit of everything, deep enough to matter."""
    def put(rel, data):
        with open(os.path.join(ws, rel), "wb") as f:
            f.write(data)
    for d in (b"a", b"a/b", b"a/b/\xff x", b"a/b/\xff x/n\nl"):
        os.mkdir(os.path.join(ws, d))
    put(b"b", b"bee\n" * 100)
    put(b"a/a", b"x" * 9000)
    put(b"a/b/b", b"deep\n")
    put(b"a/b/\xff x/n\nl/a", b"deepest\n")
    os.link(os.path.join(ws, b"b"), os.path.join(ws, b"a/\xff x"))
    os.symlink(b"../b", os.path.join(ws, b"a/b/a"))
    os.mkfifo(os.path.join(ws, b"n\nl"))
    os.setxattr(os.path.join(ws, b"b"), b"user.a", b"1")
    os.chmod(os.path.join(ws, b"a/a"), 0o4755)
    for i, (top, dirs, files) in enumerate(sorted(os.walk(ws))):
        for j, name in enumerate(dirs + files + [b"."]):
            os.utime(os.path.join(top, name), ns=(10**18 + i, 10**18 + 1000 * i + j + 1),
                     follow_symlinks=False)


REWIND_MODES = ["all", "txn-by-txn", "killed-then-resumed"]


@settings(max_examples=1000 if LONG else 40, deadline=None, database=None, derandomize=not LONG,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_changes_rewind_exactly(data):
    base = tempfile.mkdtemp(prefix="ftsbx-prop-", dir="/tmp")
    try:
        s = Scratch(base)
        initial_tree(s.ws)
        before = s.snap()
        txns = []
        for _ in range(data.draw(st.integers(1, 3), label="transactions")):
            m = Model(s.ws)
            ops = []
            for _ in range(data.draw(st.integers(1, 10))):
                op = data.draw(st.sampled_from(sorted(GENERATORS)))
                made = GENERATORS[op](data, m, op)
                if made:
                    ops.append(made)
            note(f"txn {len(txns) + 1}: {ops!r}")
            proc = s.jd([b"begin", b"prop"], *ops, [b"end", b"0"], rc=None)
            assert proc.returncode in (0, 1), proc.stderr
            txns.append(begun_txn(proc))
            if proc.returncode:
                event("an op failed")
                note(f"jdrive exit 1: {proc.stderr!r}")
                break
        mode = data.draw(st.sampled_from(REWIND_MODES), label="rewind")
        if mode == "txn-by-txn":
            for n in reversed(txns):
                s.rewind("--txn", str(n))
        elif mode == "killed-then-resumed":
            after = str(data.draw(st.integers(1, 6), label="killed after"))
            r = s.rewind(env={"FTSBX_REWIND_CRASH_AFTER": after}, rc=None, crash_ok=True)
            assert r.returncode in (0, -9), r.stderr
        s.rewind()
        assert_same(before, snapshot(s.ws))
        s.tx("verify", s.sess)
    finally:
        shutil.rmtree(base)


@settings(max_examples=1000 if LONG else 40, deadline=None, database=None, derandomize=not LONG,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(st.data())
def test_interleaved_transactions_rewind_exactly(data):
    """Two or three transactions open at once, taking turns op by op on the
    same tree (tool calls whose processes overlap): the whole session
    rewinds exactly."""
    base = tempfile.mkdtemp(prefix="ftsbx-prop-", dir="/tmp")
    try:
        s = Scratch(base)
        initial_tree(s.ws)
        before = s.snap()
        k = data.draw(st.integers(2, 3), label="transactions")
        proc = s.jd(*[[b"begin", b"turn", b"%d" % i] for i in range(k)])
        txns = [int(w.split()[1]) for w in proc.stdout.decode().splitlines() if w.startswith("txn ")]
        assert len(txns) == k, proc.stdout
        m = Model(s.ws)
        ops = []
        for _ in range(data.draw(st.integers(2, 16), label="ops")):
            op = data.draw(st.sampled_from(sorted(GENERATORS)))
            made = GENERATORS[op](data, m, op)
            if made:
                ops += [[b"txn", b"%d" % data.draw(st.sampled_from(txns), label="by")], made]
        note(f"ops: {ops!r}")
        proc = s.jd(*ops, rc=None) if ops else None
        assert proc is None or proc.returncode in (0, 1), proc.stderr
        if proc and proc.returncode:
            event("an op failed")
            note(f"jdrive exit 1: {proc.stderr!r}")
        for n in txns:
            s.jd([b"txn", b"%d" % n], [b"end", b"0"])
        s.rewind()
        assert_same(before, snapshot(s.ws))
        s.tx("verify", s.sess)
    finally:
        shutil.rmtree(base)
