"""A differential test of the shim (issue 5, Hypothesis): a random sequence
of file operations, written out as a python3 program, runs under the shim
in populate()'s rich tree; rewinding the session must give back the tree
it started from. Operations that fail are skipped by the program (the shim
must still leave nothing unrewindable behind).

FTSBX_LONG=1 runs 500 examples instead of 25."""
import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from conftest import LONG, Scratch, assert_same, populate
from test_shim_lib import PY, Shim, q

EXISTING = [b"a.txt", b"empty", b"secret", b"hard1", b"src/hard2", b"sym", b"dangling", b"fifo",
            b"sparse", b"big.bin", b"src/main.c", b"src/mid.bin", b"xattr.txt", b"suid", b"src",
            b"src/deep", b"src/deep/er/est/leaf.txt", b"emptydir", b"private", b"private/notes",
            b"with space.txt", b"tab\tname", b"new\nline", b"bad\xffname", b"-dash"]
DEEP = b"src/deep/er/est/" + b"/".join([b"d%d" % i for i in range(12)])
NEW = [b"n1", b"src/n2", b"d1", b"d1/x", b"d1/d2", b"d1/d2/d3", b"emptydir/in", b"sp ace",
       b"new\nl", b"\xff\xfe", b"x" * 255, DEEP, DEEP + b"/f", b"src/deep/er/est/" + b"y" * 200]
# (bytes, repeat): the program text must fit on a command line.
DATA = st.sampled_from([(b"", 1), (b"x", 1), (b"hello\n", 1), (b"\x00\xff", 3000), (b"z", 300000)])
TIMES = st.tuples(st.integers(0, 2 ** 33), st.integers(0, 2 ** 33)).map(
    lambda t: (t[0] * 10 ** 9 + 123, t[1] * 10 ** 9 + 456789))


def op_strategy(paths):
    """One operation on PATHS (a strategy of paths)."""
    return st.one_of(
        st.tuples(st.just("write"), paths, st.sampled_from(["trunc", "append", "plain"]), DATA,
                  st.sampled_from([0, 1, 4095, 700000])),
        st.tuples(st.just("rename"), paths, paths),
        st.tuples(st.just("exchange"), paths, paths),
        st.tuples(st.just("unlink"), paths),
        st.tuples(st.just("mkdir"), paths),
        st.tuples(st.just("rmdir"), paths),
        st.tuples(st.just("link"), paths, paths),
        st.tuples(st.just("symlink"), st.sampled_from([b"a.txt", b"../x", b"nowhere", b"\xff", b"src"]),
                  paths),
        st.tuples(st.just("chmod"), paths, st.sampled_from([0o600, 0o644, 0o755, 0o4755, 0o000, 0o1777])),
        st.tuples(st.just("utime"), paths, TIMES),
        st.tuples(st.just("truncate"), paths, st.sampled_from([0, 1, 5000, 3 << 20])),
        st.tuples(st.just("setxattr"), paths, st.sampled_from([b"user.comment", b"user.new"]),
                  st.sampled_from([b"", b"v", b"\x00" * 100])),
        st.tuples(st.just("removexattr"), paths, st.sampled_from([b"user.comment", b"user.empty"])),
    )


@st.composite
def programs(draw):
    """A list of operations over a few paths (so that they meet: the same
    path written, removed, renamed over and reused in one example)."""
    pool = draw(st.lists(st.sampled_from(EXISTING + NEW), min_size=2, max_size=7, unique=True))
    return draw(st.lists(op_strategy(st.sampled_from(pool)), min_size=1, max_size=25))


PROGRAM = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def exchange(a, b):
    if libc.renameat2(-100, a, -100, b, 2):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
HOW = {"trunc": os.O_TRUNC, "append": os.O_APPEND, "plain": 0}
def write(p, how, data, off):
    data = data[0] * data[1]
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | HOW[how], 0o644)
    try:
        os.lseek(fd, off, 0)
        os.write(fd, data)
    finally:
        os.close(fd)
F = dict(write=write, rename=os.rename, exchange=exchange, unlink=os.unlink, mkdir=os.mkdir,
         rmdir=os.rmdir, link=os.link, symlink=os.symlink, chmod=os.chmod,
         utime=lambda p, t: os.utime(p, ns=t), truncate=os.truncate, setxattr=os.setxattr,
         removexattr=os.removexattr)
for op in %r:
    try:
        F[op[0]](*op[1:])
    except OSError:
        pass
"""


@settings(max_examples=500 if LONG else 25, deadline=None, database=None, derandomize=not LONG,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_operations_rewind_exactly(ops):
    base = tempfile.mkdtemp(prefix="ftsbx-shimhyp-")
    try:
        sh = Shim(Scratch(base))
        populate(sh.ws)
        sh.setup(b"mkdir -p %s" % q(os.path.dirname(DEEP)))
        program = PROGRAM % (ops,)
        note(program)
        before = sh.snap()
        sh.sh(b"%s -c %s" % (PY.encode(), q(program)))
        if os.path.exists(sh.journal):
            sh.rewind()
            sh.verify()
        assert_same(before, sh.snap())
    finally:
        shutil.rmtree(base)
