"""A write into a large file saves only the part it changes (shim/pending.c,
jcap_range: a J_CONTENT with JR_RANGE and its offset).

sqlite's UPDATE of one row of a 30 MB database, dd conv=notrunc into an
image, a program that patches a header of a big file: each saved the whole
file at its first write. Now a file above 256 KiB saves the pages a write is
about to change, once per process and transaction, and the rewind writes
them back in decreasing seq, then cuts the file to the size it had. Every
test compares the whole tree after the rewind (Shim.roundtrip), with
random writes of every kind (write, pwrite, writev, pwritev, O_APPEND,
ftruncate, a writable mapping, other processes and threads, several
transactions) and with real programs.
"""
import json
import os
import random
import shutil
import struct
import subprocess

import pytest

from conftest import BUILD, LONG, assert_same, rewrite_file, salt_of
from test_shim_lib import PY, Shim, q

MB = 1 << 20
JI_RANGES = 0x40    # journal/format.h


@pytest.fixture
def shim(scratch):
    return Shim(scratch)


def records(sh, txn=None):
    """The session's records as txreplay log --json has them."""
    args = ["log", sh.journal, "--json"] + (["--txn", str(txn)] if txn else [])
    return [json.loads(line) for line in sh.txreplay(*args).stdout.splitlines()]


def parts(sh, name):
    """The content records of the workspace file NAME: (offset, bytes) of
    each part, None for a whole file."""
    path = os.fsdecode(sh.p(name))
    return [(r["range_offset"], r["range_bytes"]) if r["range_offset"] is not None else None
            for r in records(sh) if r["op"] == "content" and r["path"] == path]


def big(sh, name, size, seed=1):
    """A file of SIZE bytes that compress a little, as a database's do."""
    rnd = random.Random(seed)
    words = [bytes(rnd.choice(b"abcdefghij") for _ in range(rnd.randint(1, 12))) for _ in range(500)]
    data = bytearray()
    while len(data) < size:
        data += rnd.choice(words) + bytes([rnd.randrange(256)])
    sh.write(name, bytes(data[:size]))


# The driver: random writes through a descriptor opened O_RDWR, replayed
# from a seed, so that a native run in another directory gives the state a
# transaction left. Some steps are a child process's or a thread's.
DRIVER = r'''
import mmap, os, random, sys, threading
path, seed, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed)
fd = os.open(path, os.O_RDWR)

def blob(n):
    return bytes(rnd.randrange(256) for _ in range(min(n, 64))) * (n // 64 + 1)

def step(fd, k):
    size = os.fstat(fd).st_size
    off = rnd.randrange(0, size + 9000)
    n = rnd.choice([1, 100, 4096, 5000, 20000, 70000])
    if k == 0:
        os.pwrite(fd, blob(n)[:n], off)
    elif k == 1:
        os.lseek(fd, off, 0)
        os.write(fd, blob(n)[:n])
    elif k == 2:
        os.pwritev(fd, [blob(n)[:n], b"-" * rnd.randrange(1, 3000)], off)
    elif k == 3:
        os.lseek(fd, off, 0)
        os.writev(fd, [b"+" * rnd.randrange(1, 9000), blob(n)[:n]])
    elif k == 4:
        a = os.open(path, os.O_RDWR | os.O_APPEND)
        os.write(a, blob(n)[:n])
        os.pwrite(a, b"appended anyway", 0)     # O_APPEND: at the end
        os.close(a)
    elif k == 5:
        os.ftruncate(fd, rnd.randrange(300000, size + 50000))
    elif k == 6:
        for i in range(rnd.randrange(2, 40)):   # a sequential writer
            os.pwrite(fd, blob(512)[:512], off + 512 * i)
    elif k == 7:
        if size >= 8192:
            with mmap.mmap(fd, 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as m:
                m[100:110] = b"mapped!!!!"
    elif k == 8:
        os.fchmod(fd, rnd.choice([0o600, 0o640, 0o644]))

def some(fd, n):
    for _ in range(n):
        step(fd, rnd.choice([0, 0, 1, 2, 3, 4, 5, 6, 6, 7, 8]))

step(fd, 0)      # a part first: the rest may save the whole file
for i in range(steps):
    kind = rnd.randrange(10)
    if kind == 0:
        pid = os.fork()
        if pid == 0:
            some(fd, 3)
            os._exit(0)
        os.waitpid(pid, 0)
        rnd.random()
    elif kind == 1:
        t = threading.Thread(target=some, args=(fd, 2))
        t.start()
        t.join()
    else:
        some(fd, 1)
os.close(fd)
'''


def drive(name, seed, steps):
    """The driver's bash line: STEPS random steps on NAME from SEED."""
    return b"%s -c %s %s %d %d" % (PY.encode(), q(DRIVER), name.encode(), seed, steps)


@pytest.mark.parametrize("seed", range(200 if LONG else 12))
def test_random_writes_into_a_large_file_rewind_exactly(shim, seed):
    """Random writes of every kind, from the process, a child and a thread,
    in several transactions (the programs the shell runs; the last one is
    the session's root, which bash execs, and its children tool calls of
    their own): the rewind of the whole session gives back the tree."""
    big(shim, "db.bin", 1 * MB + 12345, seed)
    big(shim, "other.bin", 400000, seed + 100)
    script = b"; ".join(drive(n, seed * 7 + i, 25) for i, n in enumerate(["db.bin", "other.bin", "db.bin"]))
    shim.roundtrip(script)
    ps = parts(shim, "db.bin")
    assert any(p is not None for p in ps), ps


def test_each_transaction_rewinds_to_the_state_it_started_from(shim, scratch):
    """Two transactions write overlapping parts of one file; rewinding the
    second alone gives the state the first left (the same driver run without
    the shim), and then the first gives the start."""
    big(shim, "db.bin", 2 * MB, 5)
    start = shim.read("db.bin")
    before = shim.snap()
    shim.sh(drive("db.bin", 11, 30) + b"; " + drive("db.bin", 12, 30) + b"; true")   # bash execs no driver
    txns = sorted({r["txn"] for r in records(shim) if r["op"] == "content"})
    assert len(txns) == 2, txns
    shim.txreplay("rewind", shim.journal, "--txn", str(txns[1]))
    native = os.path.join(scratch.base, b"native")
    os.makedirs(native)
    with open(os.path.join(native, b"db.bin"), "wb") as f:
        f.write(start)
    shim.sh(b"cd %s && %s" % (native, drive("db.bin", 11, 30)), preload=False)
    with open(os.path.join(native, b"db.bin"), "rb") as f:
        assert shim.read("db.bin") == f.read()
    shim.txreplay("rewind", shim.journal, "--txn", str(txns[0]))
    assert_same(before, shim.snap())


def sqlite_db(sh, name, mode):
    """A 3 MB sqlite database in journal mode MODE, made without the shim."""
    if not shutil.which("sqlite3"):
        pytest.skip("no sqlite3")
    sh.setup(b"sqlite3 %s 'pragma journal_mode=%s; create table t(k integer primary key, v); "
             b"insert into t select value, randomblob(3000) from generate_series(1, 1000);' >/dev/null"
             % (name.encode(), mode.encode()))


@pytest.mark.parametrize("mode", ["delete", "wal", "truncate", "persist"])
def test_sqlite_update_saves_the_pages_it_writes(shim, mode):
    """An UPDATE of a few rows of a 3 MB database (each journal mode sqlite
    has on disk) saves the pages sqlite writes, not the database: the
    journal holds a small part of it, and the rewind gives back every
    byte."""
    sqlite_db(shim, "app.db", mode)
    size = os.path.getsize(shim.p("app.db"))
    shim.roundtrip(b"sqlite3 app.db 'update t set v = randomblob(3000) where k in (7, 500); "
                   b"insert into t(v) values (zeroblob(100)); pragma wal_checkpoint;' >/dev/null")
    ps = parts(shim, "app.db")
    if mode == "wal":       # the checkpoint writes the database; the WAL is new
        assert ps, "the checkpoint wrote no part"
    assert ps and None not in ps, ps
    saved = sum(n for _, n in ps)
    assert saved < size / 10, (saved, size, ps)


def test_a_sequential_writer_saves_growing_runs(shim):
    """600 writes of 512 bytes one after another over the middle and past
    the end of a 2 MB image (as dd conv=notrunc does; dd itself writes its
    output as its stdout, which is saved whole: stdio writes past the
    hooks), then 100 of 4 KiB elsewhere: the parts grow as the writer goes
    on (not a record per write), and nothing of what lies past the old end
    is saved."""
    big(shim, "disk.img", 2 * MB, 3)
    shim.roundtrip(b"%s -c %s" % (PY.encode(), q(
        'import os\nfd = os.open("disk.img", os.O_WRONLY)\nos.lseek(fd, 2 * 1048576 - 100 * 512, 0)\n'
        'for i in range(600):\n    os.write(fd, os.urandom(512))\n'
        'for i in range(100):\n    os.pwrite(fd, bytes(4096), (100 + i) * 4096)\n')))
    ps = parts(shim, "disk.img")
    assert ps and None not in ps, ps
    assert len(ps) < 30, ps
    assert sum(n for _, n in ps) <= 100 * 512 + 100 * 4096 + 2 * RUN, ps


RUN = 1 << 20       # pending.c's RANGE_RUN: how far a sequential writer's part grows


def test_a_write_of_most_of_the_file_saves_it_whole(shim):
    """A write that changes half the file or more, and a small file, save
    the whole file once; later writes in the same transaction save
    nothing more."""
    big(shim, "a.bin", 600000, 1)
    big(shim, "small.bin", 200000, 2)
    shim.roundtrip(b"%s -c 'import os\nfd = os.open(\"a.bin\", os.O_RDWR)\nos.pwrite(fd, b\"x\" * 400000, 0)\n"
                   b"os.pwrite(fd, b\"y\" * 10, 500000)\nfd = os.open(\"small.bin\", os.O_RDWR)\n"
                   b"os.pwrite(fd, b\"z\", 5)\n'" % PY.encode())
    assert parts(shim, "a.bin") == [None] and parts(shim, "small.bin") == [None]


def test_a_hard_linked_large_file_saves_each_part(shim):
    """A file with a second name records each change (no dedup by path):
    its parts are saved at every write, and the rewind is exact through
    either name."""
    big(shim, "a.bin", MB, 4)
    os.link(shim.p("a.bin"), shim.p("b.bin"))
    shim.roundtrip(b"%s -c 'import os\nfd = os.open(\"a.bin\", os.O_RDWR)\nos.pwrite(fd, b\"x\" * 10, 4000)\n"
                   b"g = os.open(\"b.bin\", os.O_RDWR)\nos.pwrite(g, b\"y\" * 10, 800000)\n"
                   b"os.pwrite(fd, b\"z\" * 10, 4001)\n'" % PY.encode())
    assert parts(shim, "a.bin") and None not in parts(shim, "a.bin") + parts(shim, "b.bin")


def test_a_session_without_parts_saves_whole_files(shim):
    """A session made by an ftsbx that knew no parts (no JI_RANGES in its
    header) gets whole files, which its readers know."""
    big(shim, "a.bin", MB, 6)
    shim.sh(b"true")
    sess = os.path.join(shim.journal, b"session")
    with open(sess, "rb") as f:
        incompat = struct.unpack_from("<I", f.read(32), 12)[0]
    assert incompat & JI_RANGES, hex(incompat)
    rewrite_file(sess, salt_of(shim.journal), incompat & ~JI_RANGES, lambda fr: (fr.flags, fr.fields))
    assert not os.path.exists(os.path.join(shim.journal, b"log"))
    shim.roundtrip(b"%s -c 'import os\nfd = os.open(\"a.bin\", os.O_RDWR)\nos.pwrite(fd, b\"x\" * 10, 4000)\n'"
                   % PY.encode())
    assert parts(shim, "a.bin") == [None]


def test_a_part_the_journal_cannot_save_refuses_the_write(shim):
    """The journal's log/ removed under a running program: a child's first
    write into a large file (the child needs a segment of its own) is
    refused (EIO), as is the next, and the file is unchanged."""
    big(shim, "a.bin", MB, 7)
    before = shim.read("a.bin")
    proc, out, err = shim.run_with_log_removed(
        'import os\nfd = os.open("a.bin", os.O_RDWR)\n' + Shim.LOG_MADE_THEN_WAIT +
        'if os.fork() == 0:\n'
        '    for off in (5000, 900000):\n'
        '        try:\n            os.pwrite(fd, b"x" * 10, off)\n            print("written", flush=True)\n'
        '        except OSError as e:\n            print("refused", e.errno, flush=True)\n'
        '    os._exit(0)\n'
        'os.wait()\n')
    assert out.splitlines() == [b"refused 5", b"refused 5"], (out, err)
    assert b"cannot journal" in err, err
    assert shim.read("a.bin") == before


@pytest.mark.parametrize("how,tail", [("rm", b"; true"), ("replaced", b"; true"), ("replaced", b"")])
def test_a_file_another_program_removed_while_this_one_writes(shim, how, tail):
    """Another program removes the file, or replaces it (cp and mv, as an
    editor or git checkout does), while this one holds it open and goes on
    writing, as it may natively: a part it saved before goes on as it
    would; a new part (and with the writer as the session's root, whose
    transaction the other program's start cut, every part) is saved under
    the name the journal keeps the removed inode by (objects/D/S.ino),
    whose undo comes first and puts the bytes back into the kept inode
    before the removal's undo brings it back."""
    big(shim, "a.bin", MB, 8)
    other = {"rm": '["rm", "a.bin"]', "replaced": '["sh", "-c", "cp a.bin new && mv new a.bin"]'}[how]
    script = ('import os, subprocess\nfd = os.open("a.bin", os.O_RDWR | os.O_CLOEXEC)\n'
              'os.pwrite(fd, b"x" * 10, 5000)\n'
              'subprocess.run(%s, check=True)\n'
              'os.pwrite(fd, b"y" * 10, 5010)\n'
              'os.pwrite(fd, b"z" * 10, 700000)\n'
              'print(os.pread(fd, 10, 700000).decode())\n' % other)
    proc = shim.roundtrip(b"%s -c %s%s" % (PY.encode(), q(script), tail))
    assert proc.stdout == b"zzzzzzzzzz\n", proc
    kept = [r for r in records(shim) if r["op"] == "content" and "/objects/" in r["path"]]
    assert kept and all(r["range_offset"] is not None for r in kept), kept


def test_the_log_shows_the_part(shim):
    """txreplay log names the bytes a part holds, show its offset, and
    verify checks its content."""
    big(shim, "a.bin", MB, 9)
    shim.sh(b"%s -c 'import os\nfd = os.open(\"a.bin\", os.O_RDWR)\nos.pwrite(fd, b\"x\" * 10, 5000)\n'"
            % PY.encode())
    log = shim.txreplay("log", shim.journal).stdout
    assert b"a.bin (bytes 4096..8192)" in log, log
    seq = next(r["seq"] for r in records(shim) if r["op"] == "content")
    show = shim.txreplay("show", shim.journal, str(seq)).stdout
    assert b"offset: 4096" in show and b"a part of the file" in show, show
    content = shim.txreplay("show", shim.journal, str(seq), "--content").stdout
    assert len(content) == 4096
    assert b"4 pre-images checked" in shim.verify().stdout or b"pre-images checked" in shim.verify().stdout


def test_a_large_part_is_kept_as_an_object(shim):
    """A part above 256 KiB goes to objects/ as a gzip file, as a large
    whole file does; the rewind reads it back from there."""
    big(shim, "a.bin", 2 * MB, 10)
    shim.roundtrip(b"%s -c 'import os\nfd = os.open(\"a.bin\", os.O_RDWR)\nos.pwrite(fd, os.urandom(300000), 70000)\n'"
                   % PY.encode())
    assert parts(shim, "a.bin") == [(69632, 303104)]     # the pages 17..90 it writes into
    objs = [n for _, _, names in os.walk(os.path.join(shim.journal, b"objects")) for n in names]
    assert len(objs) == 1 and objs[0].endswith(b".gz"), objs


DIRECT = """
import mmap, os, sys
buf = mmap.mmap(-1, 8192)
buf.write(b"D" * 8192)
for name, off in (("small.bin", 0), ("a.bin", 8192)):
    fd = os.open(name, os.O_RDWR | os.O_DIRECT)
    print(os.pwrite(fd, buf, off))
"""


def test_o_direct_writes_are_saved(shim):
    """A descriptor opened O_DIRECT reads only in the device's blocks, which
    a file's last bytes are not: the pre-image, whole or a part, is read
    through a reader of its own (the small file's capture failed, EINVAL,
    and refused the write)."""
    shim.write("small.bin", os.urandom(5000))
    big(shim, "a.bin", MB, 11)
    try:
        os.close(os.open(shim.p("small.bin"), os.O_RDWR | os.O_DIRECT))
    except OSError:
        pytest.skip("no O_DIRECT on this filesystem")
    proc = shim.roundtrip(b"%s -c %s" % (PY.encode(), q(DIRECT)))
    assert proc.stdout == b"8192\n8192\n", proc
    assert parts(shim, "small.bin") == [None] and parts(shim, "a.bin") == [(8192, 8192)]


SHARED_OFFSET = """
import os, sys, threading
fd = os.open("big.bin", os.O_RDWR)
def run(k):
    for i in range(48):
        os.write(fd, bytes([65 + k]) * 4096)
ts = [threading.Thread(target=run, args=(k,)) for k in range(12)]
for t in ts: t.start()
for t in ts: t.join()
if os.fork() == 0:
    for i in range(40):
        os.write(fd, b"c" * 3000)
    os._exit(0)
for i in range(40):
    os.write(fd, b"p" * 3000)
os.wait()
"""


def test_writers_sharing_one_offset(shim):
    """Threads, and a child, write() through one descriptor: each write's
    offset is read under the file's lock, so no other writer moves it
    between the read and the write (the page saved was not the page
    written)."""
    big(shim, "big.bin", 8 * MB, 12)
    shim.roundtrip(b"%s -c %s" % (PY.encode(), q(SHARED_OFFSET)))
    assert None not in parts(shim, "big.bin")


def test_more_large_files_than_the_table_holds(shim):
    """Nine and more large files written in turn: a file that takes over
    another's slot starts with no parts saved (it took the other's)."""
    big(shim, "f0.bin", 2000000, 0)
    for i in range(1, 10):
        big(shim, f"f{i}.bin", 300000 + 1000 * i, i)
    shim.roundtrip(b"%s -c %s" % (PY.encode(), q(
        'import os\nfds = [os.open("f%d.bin" % i, os.O_RDWR) for i in range(10)]\n'
        'for r in range(3):\n    for i in range(10):\n        os.pwrite(fds[i], b"x" * 10, 50000 * r + 7)\n'
        'os.pwrite(fds[0], b"y" * 10, 1000000)\n')))


BAD_IOVEC = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name in ("a.bin", "small.bin"):
    fd = os.open(name, os.O_RDWR)
    for v, n in ((0x1000, 1), (0x1000, 100000000), (None, 2)):
        r = libc.writev(fd, ctypes.c_void_p(v), n)
        print(name, r, ctypes.get_errno())
"""


def test_a_bad_iovec_fails_the_call_not_the_program(shim):
    """writev with an iovec array the kernel cannot read (EFAULT) or too
    many of them (EINVAL): the call fails as it does natively, and the
    shim, which reads the array to know which bytes change, does not
    crash."""
    big(shim, "a.bin", MB, 13)
    shim.write("small.bin", b"s" * 100)
    native = shim.sh(b"%s -c %s" % (PY.encode(), q(BAD_IOVEC)), preload=False).stdout
    assert native.split(b"\n")[0] == b"a.bin -1 14", native
    assert shim.sh(b"%s -c %s" % (PY.encode(), q(BAD_IOVEC))).stdout == native



def test_a_cut_that_races_a_growing_write(shim):
    """ftruncate to a length past the end while another thread writes past
    it (test/hostile/growcut.c, 24 files, the cut a little later each
    time): whether the file grows or is cut is decided on the size the
    record saves, under the file's lock (an fstat before the lock saw a
    shorter file, the record saved a longer one's size, the cut went below
    it, and the rewind failed)."""
    exe = shim.gcc("growcut", "growcut.c", flags=("-pthread",))
    for i in range(24):
        big(shim, f"g{i}.bin", MB, 20 + i)
    shim.roundtrip(b"%s 24" % exe)


def content_bytes(sh, name):
    """The bytes the content records of NAME hold (parts, or whole files
    as their size)."""
    path = os.fsdecode(sh.p(name))
    return sum(r["range_bytes"] if r["range_offset"] is not None else r["size"]
               for r in records(sh) if r["op"] == "content" and r["path"] == path)


@pytest.mark.parametrize("how", [b"shred -n1 -u big.bin",
                                 b"%s -c 'import os\nfd = os.open(\"big.bin\", os.O_RDWR)\n"
                                 b"for o in range(0, 4 << 20, 65536):\n    os.write(fd, os.urandom(65536))\n"
                                 b"os.ftruncate(fd, 3 << 20)\nos.ftruncate(fd, 5 << 20)\n'" % PY.encode()])
def test_a_file_overwritten_then_cut_is_saved_once(shim, how):
    """shred overwrites a file from start to end, then cuts it to nothing
    (and removes it): the parts its writes saved hold every byte the cut
    takes, so the cut saves nothing again (it saved the whole file a second
    time: twice the journal and the time); a cut and a growth after the
    parts alike."""
    if how.startswith(b"shred") and not shutil.which("shred"):
        pytest.skip("no shred")
    big(shim, "big.bin", 4 * MB, 30)
    shim.roundtrip(how)
    assert content_bytes(shim, "big.bin") <= 4 * MB, records(shim)


MMAP_SQLITE = (b"sqlite3 app.db 'pragma mmap_size=268435456; update t set v = randomblob(3000) where k = 9; "
               b"insert into t(v) select randomblob(3000) from generate_series(1, 300);' >/dev/null")


def test_sqlite_with_mmap_grows_its_file_and_saves_parts(shim):
    """sqlite with mmap_size grows the database with ftruncate (a hole at
    its end) before it writes the new pages: the growth saves the old
    size, the pages written into the hole need nothing more, and the pages
    written before the end are parts, not the whole (holed) file."""
    sqlite_db(shim, "app.db", "delete")
    size = os.path.getsize(shim.p("app.db"))
    shim.roundtrip(MMAP_SQLITE)
    assert None not in parts(shim, "app.db"), parts(shim, "app.db")
    assert content_bytes(shim, "app.db") < size / 4


def holes(path):
    """The data runs of PATH, as SEEK_DATA and SEEK_HOLE give them."""
    runs, fd = [], os.open(path, os.O_RDONLY)
    try:
        end, off = os.fstat(fd).st_size, 0
        while off < end:
            try:
                off = os.lseek(fd, off, os.SEEK_DATA)
            except OSError:
                break
            hole = os.lseek(fd, off, os.SEEK_HOLE)
            runs.append((off, hole))
            off = hole
    finally:
        os.close(fd)
    return runs


def test_a_sparse_file_keeps_its_holes(shim):
    """A file with a hole: a write into its data saves a part (no hole in
    it), one into the hole saves the whole file (a part written back would
    fill the hole); the rewind gives back the same runs of data."""
    path = shim.p("sparse.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(512 << 10))
        f.seek(3 << 20)
        f.write(os.urandom(512 << 10))
    before = holes(path)
    if len(before) != 2:
        pytest.skip("this filesystem keeps no holes")
    shim.roundtrip(b"%s -c %s" % (PY.encode(), q(
        'import os\nfd = os.open("sparse.bin", os.O_RDWR)\nos.pwrite(fd, b"d" * 100, 8192)\n'
        'os.pwrite(fd, b"h" * 100, 2 << 20)\n')))
    assert parts(shim, "sparse.bin") == [(8192, 4096), None]
    assert holes(path) == before


def test_ftsbx_run_counts_a_file_written_in_parts_once(shim):
    """ftsbx run's summary counts changes: a file written in place in many
    parts by one tool call is one of them, not one per part."""
    big(shim, "a.bin", 4 * MB, 40)
    env = shim.env(preload=False)
    proc = subprocess.run([os.path.join(BUILD, "ftsbx"), "run", "--journal", shim.journal, "--", PY, "-c",
                           "import os\nfd = os.open('a.bin', os.O_RDWR)\n"
                           "for o in range(0, 3 << 20, 300000):\n    os.pwrite(fd, b'x', o)\n"],
                          cwd=shim.ws, env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(parts(shim, "a.bin")) == 11
    assert b"; 1 change in " in proc.stderr, proc.stderr


def test_a_cut_after_a_larger_size_was_recorded(shim):
    """Parts, a growth by ftruncate (its size noted), a growth by
    truncate() (a J_APPEND of the larger size), then a cut below that
    size but within what the parts hold: the cut writes an empty part (the
    size under the lock), so that the J_APPEND's undo finds the file as
    long as it saved (with nothing recorded it failed: shorter than
    before)."""
    big(shim, "big.bin", MB, 41)
    shim.roundtrip(b"%s -c %s" % (PY.encode(), q(
        'import os\nfd = os.open("big.bin", os.O_RDWR)\nos.pwrite(fd, b"A" * 100, 0)\n'
        'os.ftruncate(fd, 1248576)\nos.truncate("big.bin", 1348576)\nos.ftruncate(fd, 1148576)\n'
        'os.write(os.open("big.bin", os.O_WRONLY | os.O_APPEND), b"end")\nos.ftruncate(fd, 1100000)\n')))


WRITER_AND_REMOVER = (b"%s -c 'import os, time\nfd = os.open(\"big.bin\", os.O_RDWR)\nos.pwrite(fd, b\"A\" * 100, 4096)\n"
                      b"time.sleep(1)\nos.pwrite(fd, b\"B\" * 100, 600000)\n' & sleep 0.4; rm big.bin; wait" % PY.encode())


def test_a_removal_the_writer_wrote_after_rewinds_only_with_it(shim):
    """A writer (one transaction) writes a part, another transaction
    removes the file, the writer goes on into the kept inode (its part saved
    under the object's name): rewinding the removal alone is refused, since
    the writer's record needs the inode where the removal keeps it; with
    --cascade both go, and the tree is back."""
    big(shim, "big.bin", MB, 42)
    before = shim.snap()
    shim.sh(WRITER_AND_REMOVER)
    rm_txn = next(r["txn"] for r in records(shim) if r["op"] == "remove")
    proc = shim.txreplay("rewind", shim.journal, "--txn", str(rm_txn), rc=1)
    assert b"later transactions" in proc.stderr, proc.stderr
    shim.txreplay("rewind", shim.journal, "--txn", str(rm_txn), "--cascade")
    assert_same(before, shim.snap())


def test_a_kept_inode_far_back_in_objects(shim):
    """The file a process writes on was replaced before 4000 other
    removals: its kept inode is found in an old subdirectory of objects/
    all the same, and its part is saved there."""
    big(shim, "big.bin", MB, 43)
    shim.write("other.bin", b"other")
    os.mkdir(shim.p("d"))
    for i in range(4000):
        shim.write(f"d/f{i}", b"")
    script = (b"%s -c 'import os, time\nfd = os.open(\"big.bin\", os.O_RDWR)\ntime.sleep(0.5)\n"
              b"while os.path.isdir(\"d\"):\n    time.sleep(0.05)\nos.pwrite(fd, b\"B\" * 100, 600000)\n' & "
              b"sleep 0.2; mv other.bin big.bin; rm -r d; wait" % PY.encode())
    shim.roundtrip(script, timeout=300)
    kept = [r for r in records(shim) if r["op"] == "content" and "/objects/" in r["path"]]
    assert len(kept) == 1, kept


@pytest.mark.parametrize("op", ["os.ftruncate(fd, 100000)", "os.ftruncate(fd, 2000000)",
                                "os.posix_fallocate(fd, 0, 3000000)"])
@pytest.mark.parametrize("how", ["rm big.bin", "mv other.bin big.bin"])
def test_a_cut_through_a_descriptor_of_a_removed_file(shim, op, how):
    """ftruncate or fallocate through a pending descriptor of a file
    another process removed or replaced since: journaled under the name the
    kernel has for it now, never the cached one (which another file has,
    or nobody): refused (EACCES, the journal keeps that inode), and the
    rewind is exact."""
    big(shim, "big.bin", MB, 44)
    shim.write("other.bin", b"other")
    before = shim.snap()
    proc = shim.sh(b"%s -c %s & sleep 0.4; %s; wait" % (PY.encode(), q(
        'import os, time\nfd = os.open("big.bin", os.O_RDWR)\ntime.sleep(1)\n'
        'try:\n    %s\n    print("done")\nexcept OSError as e:\n    print(e.errno)\n' % op), how.encode()),
        refusals_ok=True)
    assert proc.stdout == b"13\n", proc
    shim.rewind()
    assert_same(before, shim.snap())


MOVING_OFFSET = """
import os, random, threading
fd = os.open("big.bin", os.O_RDWR)
stop = False
def mover():
    r = random.Random(1)
    while not stop:
        os.lseek(fd, r.randrange(0, 64 << 20, 4096), 0)
t = threading.Thread(target=mover)
t.start()
for i in range(400):
    os.write(fd, b"Z" * 16)
stop = True
t.join()
"""


def test_a_write_while_another_thread_moves_the_offset(shim):
    """One thread moves the descriptor's offset (lseek, which takes no
    lock of ours) while another write()s at it: each write is made at the
    offset its part was saved of (pwrite there, then the offset moved past
    it), so no byte changes that no record saved (the page saved and the
    page written differed)."""
    with open(shim.p("big.bin"), "wb") as f:
        f.truncate(64 << 20)
        for off in range(0, 64 << 20, 1 << 20):
            f.seek(off)
            f.write(os.urandom(1 << 20))
    shim.roundtrip(b"%s -c %s" % (PY.encode(), q(MOVING_OFFSET)))
