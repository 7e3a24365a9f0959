"""Shared fixtures and helpers for the journal tests.

Every test works in its own scratch directory (pytest's tmp_path, under /tmp):
a workspace tree `ws` that the test changes through test/jdrive, and a session
directory `j/sess` that jdrive journals into and txreplay reads and rewinds.
The programs come from $FTSBX_BUILD (default /work/main/build).

The central helper is snapshot(root): everything a rewind promises to restore
(DESIGN.md, invariant 3) about every entry under root, so that "rewind gave the
tree back" is one comparison: assert_same(before, snapshot(root)).
"""
import hashlib
import itertools
import json
import os
import random
import stat
import struct
import subprocess

import pytest

BUILD = os.environ.get("FTSBX_BUILD") or "/work/main/build"
JDRIVE = os.path.join(BUILD, "test", "jdrive")
TXREPLAY = os.path.join(BUILD, "txreplay")
LONG = os.environ.get("FTSBX_LONG") == "1"

# --- the on-disk format (journal/format.h) ------------------------------------

FILE_HDR = 32
FRAME_HDR = 8
BODY_FIXED = 24
LINK_LEN = 32
REC_MIN = BODY_FIXED + LINK_LEN
REC_MAX = 1 << 28
INLINE_MAX = 256 << 10

J = dict(SESSION=1, SEGMENT=2, TXN_BEGIN=3, TXN_END=4, EXEC=5, REFUSE=6,
         CREATE=10, CONTENT=11, APPEND=12, REMOVE=13, RENAME=14, META=15,
         REWOUND=16)
F = dict(PATH=1, PATH2=2, ARGV=3, CWD=4, PID=5, PPID=6, UID=7, STAT=8,
         DATA=9, OBJECT=10, INODE=11, TARGET=12, XATTRS=13, FLAGS=14,
         STATUS=15, OP=16, RULE=17, ERRNO=18, SEQREF=19, HOST=20, POLICY=21)


def _crc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc_table()


def crc32c(crc, data):
    """CRC-32C continuing from CRC, as journal/checksum.c's jcrc32c()."""
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc_mask(c):
    """The LevelDB-style mask of journal/internal.h's jcrc_mask()."""
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def crc_seed(salt):
    """A session's crc seed, as journal/session.c's jseed()."""
    return crc32c(0x46545342, salt)


def frame_crc(salt, frame):
    """The masked crc a frame (bytes from its crc field on) must carry."""
    return crc_mask(crc32c(crc_seed(salt), frame[4:]))


def header_with(header, version=None):
    """A 32-byte file header with VERSION patched in and its crc redone."""
    h = bytearray(header[:FILE_HDR])
    if version is not None:
        h[8:10] = struct.pack("<H", version)
    h[28:32] = struct.pack("<I", crc32c(0, bytes(h[:28])))
    return bytes(h)


class Frame:
    """One framed record of a journal file, as parsed by frames()."""

    def __init__(self, data, off):
        self.offset = off
        self.crc, self.len = struct.unpack_from("<II", data, off)
        self.end = off + FRAME_HDR + self.len
        body = data[off + FRAME_HDR:self.end]
        self.body = body
        self.type, self.flags, self.nfields, self.txn, self.seq, self.time = \
            struct.unpack_from("<BBHIQq", body, 0)
        self.link = body[-LINK_LEN:]
        self.fields = []
        p = BODY_FIXED
        for _ in range(self.nfields):
            tag, n = struct.unpack_from("<HI", body, p)
            self.fields.append((tag, body[p + 6:p + 6 + n]))
            p += 6 + n

    def field(self, tag):
        for t, v in self.fields:
            if t == tag:
                return v
        return None


def frames(path):
    """(header, [Frame...]) of a session or segment file: every complete
    frame up to the end or the first frame whose length cannot be right."""
    with open(path, "rb") as f:
        data = f.read()
    out, off = [], FILE_HDR
    while off + FRAME_HDR <= len(data):
        (n,) = struct.unpack_from("<I", data, off + 4)
        if n < REC_MIN or n > REC_MAX or off + FRAME_HDR + n > len(data):
            break
        out.append(Frame(data, off))
        off = out[-1].end
    return data[:FILE_HDR], out


def segments(session):
    """Absolute paths of a session's segment files, sorted by name."""
    log = os.path.join(session, b"log")
    return sorted(os.path.join(log, n) for n in os.listdir(log) if n.endswith(b".ftj"))


def salt_of(session):
    with open(os.path.join(session, b"session"), "rb") as f:
        return f.read(FILE_HDR)[16:28]


# --- damage ---------------------------------------------------------------------

def last_seq(session):
    """The session's last seq taken: the first counter of SESSION/shared
    (JI_SHARED), or of SESSION/seq in an older session."""
    name = os.path.join(_b(session), b"shared")
    if not os.path.exists(name):
        name = os.path.join(_b(session), b"seq")
    with open(name, "rb") as f:
        return struct.unpack("<Q", f.read(8))[0]


def shrink(path, n):
    """Cut the file PATH down to its first N bytes."""
    os.truncate(path, n)


def flip(path, offset, bit):
    """Invert bit BIT (0..7) of the byte at OFFSET of the file PATH."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ (1 << bit)]))


# --- running the programs ---------------------------------------------------------

def _b(x):
    return x if isinstance(x, bytes) else os.fsencode(str(x))


def assert_no_crash(proc, what="program"):
    """Nothing in a journal or a command line may crash our programs."""
    err = proc.stderr if isinstance(proc.stderr, bytes) else b""
    assert proc.returncode >= 0 and proc.returncode < 128, \
        f"{what} died: returncode {proc.returncode}\nstderr: {err[-2000:]!r}"
    assert not any(w in err for w in (b"Sanitizer", b"runtime error:", b"Traceback")), \
        f"{what} reported: {err[-2000:]!r}"


def _run(argv, env=None, timeout=120, crash_ok=False):
    for prog in (JDRIVE, TXREPLAY):
        if argv[0] == prog and not os.access(prog, os.X_OK):
            pytest.fail(f"{prog} is not built (make B=... {prog}); set FTSBX_BUILD")
    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.run([_b(a) for a in argv], capture_output=True, env=full_env,
                          timeout=timeout, cwd="/tmp")
    if not crash_ok:
        assert_no_crash(proc, os.path.basename(argv[0]))
    return proc


def jdrive_argv(session, ops, durable=False):
    """argv for `jdrive SESSION [--durable] OP ARG... [:: OP ARG...]...`."""
    argv = [JDRIVE, session] + (["--durable"] if durable else [])
    for i, op in enumerate(ops):
        if i:
            argv.append("::")
        argv.extend(op)
    return [_b(a) for a in argv]


def run_jdrive(session, ops, rc=0, durable=False, env=None):
    """Run the OPS (a list of [op, arg...]) in one jdrive process; check its
    exit code is RC (None: any that is not a crash)."""
    proc = _run(jdrive_argv(session, ops, durable), env=env)
    if rc is not None:
        assert proc.returncode == rc, \
            f"jdrive {ops!r}: exit {proc.returncode}, expected {rc}\nstderr: {proc.stderr!r}"
    return proc


def txreplay(*args, rc=0, env=None, crash_ok=False):
    """Run txreplay ARGS; check its exit code is RC (None: do not check)."""
    proc = _run([TXREPLAY] + [_b(a) for a in args], env=env, crash_ok=crash_ok)
    if rc is not None:
        assert proc.returncode == rc, \
            f"txreplay {args!r}: exit {proc.returncode}, expected {rc}\n" \
            f"stdout: {proc.stdout[-3000:]!r}\nstderr: {proc.stderr[-3000:]!r}"
    return proc


def parse_json_lines(text):
    return [json.loads(line) for line in text.decode().splitlines() if line.strip()]


def log_records(session, *extra):
    """`txreplay log SESSION --json` as a list of dicts."""
    return parse_json_lines(txreplay("log", session, "--json", *extra).stdout)


def fsb(value):
    """The bytes a JSON string of txreplay stands for (\\udcXX escapes)."""
    return None if value is None else os.fsencode(value)


def begun_txn(proc):
    """The N of the "txn N" line a `begin` printed."""
    for line in proc.stdout.decode().splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "txn" and words[1].isdigit():
            return int(words[1])
    raise AssertionError(f"begin printed no 'txn N': {proc.stdout!r}")


# --- paths of a workspace ----------------------------------------------------------

# Which arguments of each jdrive op are paths (made absolute under the
# workspace by Scratch); symlink's first argument is a target, left as is.
PATH_ARGS = {
    "write": (0,), "put": (0,), "append": (0,), "fill": (0,), "truncate": (0,),
    "mkdir": (0,), "rmdir": (0,), "unlink": (0,), "rename": (0, 1), "link": (0, 1),
    "symlink": (1,), "mkfifo": (0,), "chmod": (0,), "chown": (0,), "utime": (0,),
    "setxattr": (0,), "rmxattr": (0,), "refuse": (2,),
}


class Scratch:
    """A scratch directory: the workspace BASE/ws and the session BASE/j/sess.
    Paths are bytes. Ops name workspace paths relatively."""

    def __init__(self, base):
        self.base = _b(base)
        self.ws = os.path.join(self.base, b"ws")
        self.sess = os.path.join(self.base, b"j", b"sess")
        os.makedirs(self.ws, exist_ok=True)
        os.makedirs(os.path.dirname(self.sess), exist_ok=True)

    def p(self, rel):
        """The absolute path of REL under the workspace."""
        return os.path.join(self.ws, _b(rel)) if rel not in ("", b"") else self.ws

    def absolute(self, op):
        op = [_b(a) for a in op]
        for i in PATH_ARGS.get(op[0].decode(), ()):
            if i + 1 < len(op):
                op[i + 1] = self.p(op[i + 1])
        return op

    def jd(self, *ops, rc=0, durable=False, env=None):
        return run_jdrive(self.sess, [self.absolute(op) for op in ops], rc=rc,
                          durable=durable, env=env)

    def txn(self, *ops, rc=0, status=0, durable=False):
        """Run OPS as one transaction (begin ... end STATUS) in one process;
        returns the transaction's number."""
        proc = self.jd(["begin", "agent", "step"], *ops, ["end", str(status)],
                       rc=rc, durable=durable)
        return begun_txn(proc)

    def tx(self, *args, rc=0, env=None, crash_ok=False):
        return txreplay(*args, rc=rc, env=env, crash_ok=crash_ok)

    def rewind(self, *args, rc=0, env=None, crash_ok=False):
        return txreplay("rewind", self.sess, *args, rc=rc, env=env, crash_ok=crash_ok)

    def log(self, *extra):
        return log_records(self.sess, *extra)

    def snap(self):
        return snapshot(self.ws)


@pytest.fixture
def scratch(tmp_path):
    """An empty workspace and a session path (not yet created)."""
    return Scratch(tmp_path)


@pytest.fixture
def populated(scratch):
    """A scratch whose workspace holds populate()'s rich tree."""
    populate(scratch.ws)
    return scratch


# --- snapshots ---------------------------------------------------------------------

def _kind(mode):
    for test, name in ((stat.S_ISDIR, "dir"), (stat.S_ISREG, "file"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "chardev"), (stat.S_ISBLK, "blockdev")):
        if test(mode):
            return name
    return "unknown"


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _xattrs(path):
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return ()
    return tuple(sorted((n, os.getxattr(path, n, follow_symlinks=False)) for n in names))


def _walk(dfd, rel=b"."):
    """(rel, short path) of every entry under the directory open as DFD,
    depth first in sorted order. The short path goes through the directory's
    descriptor (/proc/self/fd/N/NAME), so that a tree deeper than PATH_MAX
    is read as well."""
    for name in sorted(map(os.fsencode, os.listdir(dfd))):
        sub = name if rel == b"." else os.path.join(rel, name)
        path = b"/proc/self/fd/%d/%s" % (dfd, name)
        yield sub, path
        if stat.S_ISDIR(os.lstat(path).st_mode):
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
            try:
                yield from _walk(fd, sub)
            finally:
                os.close(fd)


def snapshot(root):
    """For every entry under ROOT (ROOT itself is b"."; symlinks not
    followed): type, mode, uid, gid, size (not for directories, which never
    shrink on ext4), mtime_ns, symlink target, sha256 of content, xattrs and
    a hard-link group: entries sharing an inode share a number, numbered by
    first appearance in sorted order (a restored inode may have another
    number); an inode linked once in the tree has None. Keys are relative
    paths (bytes); values are dicts."""
    root = _b(root)
    out, inodes = {}, {}
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for rel, path in itertools.chain([(b".", root)], _walk(top)):
            st = os.lstat(path)
            kind = _kind(st.st_mode)
            e = dict(type=kind, mode=oct(stat.S_IMODE(st.st_mode)), uid=st.st_uid,
                     gid=st.st_gid, mtime_ns=st.st_mtime_ns, xattrs=_xattrs(path))
            if kind != "dir":
                e["size"] = st.st_size
                e["link_group"] = None
                inodes.setdefault((st.st_dev, st.st_ino), []).append(e)
            if kind == "symlink":
                e["target"] = os.readlink(path)
            if kind == "file":
                e["sha256"] = _sha256(path)
            out[rel] = e
    finally:
        os.close(top)
    shared = [names for names in inodes.values() if len(names) > 1]
    for group, names in enumerate(shared):
        for e in names:
            e["link_group"] = group
    return out


def diff_snapshots(before, after):
    """Readable lines saying how AFTER differs from BEFORE."""
    lines = []
    for rel in sorted(set(before) | set(after)):
        a, b = before.get(rel), after.get(rel)
        if a is None:
            lines.append(f"  + {rel!r}: appeared ({b['type']})")
        elif b is None:
            lines.append(f"  - {rel!r}: vanished ({a['type']})")
        elif a != b:
            changes = ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}"
                                for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
            lines.append(f"  ~ {rel!r}: {changes}")
    return lines


def assert_same(before, after, what="tree"):
    lines = diff_snapshots(before, after)
    assert not lines, f"{what} differs from the snapshot:\n" + "\n".join(lines)


def assert_changed(before, after):
    assert diff_snapshots(before, after), "the ops changed nothing in the tree"


# --- a rich tree -------------------------------------------------------------------

ODD_NAMES = [b"with space.txt", b"tab\tname", b"new\nline", b"bad\xffname", b"-dash"]


def populate(root):
    """Build a tree with every kind of entry and property a rewind restores.
    Deterministic: the same bytes, modes and mtimes every time."""
    root = _b(root)
    rnd = random.Random(1234)

    def put(rel, data, mode=0o644):
        path = os.path.join(root, rel)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode)

    for d in (b"src", b"src/deep", b"src/deep/er", b"src/deep/er/est", b"emptydir", b"private"):
        os.mkdir(os.path.join(root, d))
    os.chmod(os.path.join(root, b"private"), 0o700)
    put(b"a.txt", b"hello\n")
    put(b"empty", b"")
    put(b"src/main.c", b"int main(void) { return 0; }\n" * 40)
    put(b"src/deep/er/est/leaf.txt", b"leaf\n")
    put(b"src/mid.bin", rnd.randbytes(70000))
    put(b"big.bin", rnd.randbytes(320 << 10))           # > J_INLINE_MAX: objects/
    put(b"secret", b"key=42\n", 0o600)
    put(b"script.sh", b"#!/bin/sh\necho hi\n", 0o755)
    put(b"suid", b"\x7fELF-ish\n", 0o4755)
    put(b"private/notes", b"mine\n", 0o600)
    for i, name in enumerate(ODD_NAMES):
        put(name, b"odd %d\n" % i)
    put(b"hard1", b"linked content\n")
    os.link(os.path.join(root, b"hard1"), os.path.join(root, b"src/hard2"))
    os.symlink(b"a.txt", os.path.join(root, b"sym"))
    os.symlink(b"does/not/exist", os.path.join(root, b"dangling"))
    os.mkfifo(os.path.join(root, b"fifo"), 0o640)
    with open(os.path.join(root, b"sparse"), "wb") as f:
        f.write(b"head")
        f.seek(512 << 10)
        f.write(b"middle")
        f.truncate(1 << 20)
    put(b"xattr.txt", b"has attributes\n")
    os.setxattr(os.path.join(root, b"xattr.txt"), b"user.comment", b"value\x00with nul")
    os.setxattr(os.path.join(root, b"xattr.txt"), b"user.empty", b"")
    # Odd nanosecond mtimes, children before their directories.
    entries = sorted(snapshot(root), key=lambda r: -r.count(b"/") - (r != b"."))
    for i, rel in enumerate(entries):
        t = 1_600_000_000 + 1000 * i
        os.utime(os.path.join(root, rel), ns=(t * 10**9 + 111_111_111 + i,
                                              t * 10**9 + 123_456_789 + 7 * i),
                 follow_symlinks=False)


def rewrite_file(path, salt, features, edit):
    """Write the session or segment file PATH again as a writer of FEATURES
    would have: the header's features patched, every record's (flags,
    fields) through EDIT(frame), the hash chain and the crcs made again."""
    header, frs = frames(path)
    assert (frs[-1].end if frs else FILE_HDR) == os.path.getsize(path), "not all of it is records"
    h = bytearray(header)
    h[12:16] = struct.pack("<I", features)
    h = header_with(bytes(h))
    link = hashlib.blake2b(salt + h, digest_size=32).digest()
    out = bytearray(h)
    for fr in frs:
        flags, fields = edit(fr)
        body = struct.pack("<BBHIQq", fr.type, flags, len(fields), fr.txn, fr.seq, fr.time)
        body += b"".join(struct.pack("<HI", tag, len(v)) + v for tag, v in fields)
        link = hashlib.blake2b(link + body, digest_size=32).digest()
        frame = struct.pack("<II", 0, len(body) + len(link)) + body + link
        out += struct.pack("<I", frame_crc(salt, frame)) + frame[4:]
    with open(path, "wb") as f:
        f.write(out)
