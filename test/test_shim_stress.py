"""The shim under stress (issue 5): a workload killed with SIGKILL at many
points, 8 processes of 4 threads changing the same files, and a journal on
a full disk. Each time the rewind gives back the exact tree.

FTSBX_LONG=1 kills the workload at 100 points instead of 24."""
import os
import random
import signal
import subprocess
import time

import pytest

from conftest import LONG, Scratch, assert_same, populate
from test_shim_lib import PY, Shim, in_mount_namespace, q


@pytest.fixture
def shim(populated):
    """A Shim over a workspace holding populate()'s rich tree."""
    return Shim(populated)


# --- kill -9 at many points ---------------------------------------------------------

# Writes, appends, truncations, renames (over files too), hard links and
# unlinks over the 60 files of the directory argv[1], as fast as it can, in
# a loop that never ends by itself. (No two processes of the workload touch
# the same path: racing processes are test_concurrent_processes_and_threads'
# business.)
CHURN = """
import os, random, sys
r = random.Random(sys.argv[1])
d = sys.argv[1]
names = [d + "/f%d" % i for i in range(40)] + [d + "/sub/g%d" % i for i in range(20)]
while True:
    n, m = r.choice(names), r.choice(names)
    op = r.randrange(6)
    try:
        if op == 0:
            with open(n, "wb") as f: f.write(r.randbytes(r.choice([0, 10, 5000, 70000])))
        elif op == 1:
            with open(n, "ab") as f: f.write(b"x" * 100)
        elif op == 2:
            os.replace(n, m)
        elif op == 3:
            os.unlink(n)
        elif op == 4:
            os.truncate(n, r.randrange(3000))
        else:
            os.link(n, m + ".l")
    except OSError:
        pass
"""


def churn_tree(ws):
    """populate()'s tree, 60 files for each CHURN (w1, w2) and for cp and
    sed (w3), and a tree of 150 files to rm."""
    os.makedirs(ws)
    populate(ws)
    rnd = random.Random(99)
    for w in (b"w1", b"w2", b"w3"):
        os.makedirs(os.path.join(ws, w, b"sub"))
        for i in range(60):
            rel = b"%s/f%d" % (w, i) if i < 40 else b"%s/sub/g%d" % (w, i - 40)
            with open(os.path.join(ws, rel), "wb") as f:
                f.write(rnd.randbytes(rnd.choice([1, 300, 9000])))
    for i in range(10):
        d = os.path.join(ws, b"tree", b"d%d" % i)
        os.makedirs(d)
        for k in range(15):
            with open(os.path.join(d, b"f%d" % k), "wb") as f:
                f.write(b"%d %d\n" % (i, k) * k)


KILL_SCRIPT = b"""%s -c %s w1 & %s -c %s w2 & rm -rf tree & mv src src.moved &
(cd w3 && for i in 1 2 3 4 5 6 7 8; do cp -r sub copy$i; sed -i s/a/b/ f$i 2>/dev/null; done) & wait""" % (
    PY.encode(), q(CHURN), PY.encode(), q(CHURN))


def kill_after(sh, delay):
    """Run KILL_SCRIPT under the shim in its own process group and SIGKILL
    the whole group after DELAY seconds."""
    proc = subprocess.Popen([b"/bin/bash", b"-c", KILL_SCRIPT], cwd=sh.ws, env=sh.env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    time.sleep(delay)
    os.killpg(proc.pid, signal.SIGKILL)
    _, err = proc.communicate()
    assert b"ftsbx: " not in err, f"the shim refused something: {err[-2000:]!r}"


def test_kill_9_at_many_points(tmp_path):
    seed = int(os.environ.get("FTSBX_SEED") or time.time())
    rnd = random.Random(seed)
    n = 100 if LONG else 24
    # Early deaths (the shim starting up, the first records) and later ones.
    delays = [0.0, 0.001, 0.003, 0.01] + [rnd.uniform(0.02, 0.25) for _ in range(n - 4)]
    template = os.fsencode(tmp_path / "template")
    churn_tree(template)
    for i, delay in enumerate(delays):
        sh = Shim(Scratch(tmp_path / f"k{i}"))
        os.rmdir(sh.ws)
        subprocess.run(["cp", "-a", template, os.fsdecode(sh.ws)], check=True)
        before = sh.snap()
        kill_after(sh, delay)
        what = f"seed {seed} (FTSBX_SEED), kill {i} after {delay:.4f}s"
        if os.path.exists(sh.journal):
            proc = sh.txreplay("rewind", sh.journal, rc=None)
            assert proc.returncode == 0 and proc.stdout.rstrip().endswith(b" 0 drift, 0 failed"), \
                f"{what}: rewind exit {proc.returncode}\nstdout: {proc.stdout[-2000:]!r}\n" \
                f"stderr: {proc.stderr[-2000:]!r}"
        try:
            assert_same(before, sh.snap(), what)
        finally:
            subprocess.run(["rm", "-rf", "--one-file-system", os.fsdecode(sh.base)], check=True)


# --- concurrency --------------------------------------------------------------------

# One process of the concurrency test: 4 threads, each changing 16 shared
# files (which every thread of every process changes too) and its own.
WORKER = """
import os, random, sys, threading
proc = int(sys.argv[1])
shared = ["shared/s%d" % i for i in range(16)]
def work(t):
    r = random.Random(proc * 10 + t)
    mine = ["priv/p%d_%d_%d" % (proc, t, i) for i in range(6)]
    for k in range(150):
        n = r.choice(shared + mine)
        m = r.choice(shared + mine)
        op = r.randrange(7)
        try:
            if op == 0:
                with open(n, "wb") as f: f.write(b"%d.%d.%d\\n" % (proc, t, k) * r.randrange(1, 500))
            elif op == 1:
                with open(n, "ab") as f: f.write(b"+%d.%d\\n" % (proc, t))
            elif op == 2:
                os.rename(n, m)
            elif op == 3:
                os.unlink(n)
            elif op == 4:
                tmp = "%s.tmp%d%d" % (n, proc, t)
                with open(tmp, "wb") as f: f.write(b"atomic %d %d\\n" % (proc, t))
                os.replace(tmp, n)
            elif op == 5:
                os.chmod(n, r.choice([0o600, 0o644, 0o755]))
            else:
                os.truncate(n, r.randrange(100))
        except OSError:
            pass
threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
for th in threads: th.start()
for th in threads: th.join()
"""


def test_concurrent_processes_and_threads(shim):
    for d in ("shared", "priv"):
        os.mkdir(shim.p(d))
    for i in range(16):
        shim.write(f"shared/s{i}", b"shared %d\n" % i * (i * 50 + 1))
    for p in range(8):
        for t in range(4):
            for i in range(0, 6, 2):
                shim.write(f"priv/p{p}_{t}_{i}", b"private\n")

    def check(_):
        assert sorted(os.listdir(shim.p("shared"))) != sorted(b"s%d" % i for i in range(16)) or \
            any(shim.read(f"shared/s{i}") != b"shared %d\n" % i * (i * 50 + 1) for i in range(16))
    shim.roundtrip(b"for i in 0 1 2 3 4 5 6 7; do %s -c %s $i & done; wait" % (PY.encode(), q(WORKER)),
                   check, timeout=300)


# --- a full disk ------------------------------------------------------------------------

@pytest.fixture
def small_journal_fs(shim):
    """SHIM with its journal directory on a 1 MiB tmpfs mounted in a mount
    namespace of its own (a sleeping process holds it; its programs and
    txreplay run in it through nsenter)."""
    with in_mount_namespace(shim, ["-t", "tmpfs", "-o", "size=1m,mode=700", "ftsbx-full",
                                   os.path.dirname(shim.journal)], "mount a tmpfs") as s:
        yield s


def filler(shim):
    return os.path.join(os.path.dirname(shim.journal), b"filler")


def fill_journal_fs(sh):
    """Journal small changes, have a big one refused for want of room, then
    fill the journal's filesystem to the last block (not under the shim)
    and try more: each is refused, or made and journaled. Returns the
    snapshot from before it all."""
    with open(sh.p("rand.bin"), "wb") as f:
        f.write(os.urandom(2 << 20))
    before = sh.snap()
    # Fits: small pre-images, a hard link for the removal.
    sh.sh(b"echo changed > a.txt && rm secret && mkdir newdir && mv src/main.c newdir/")
    # Does not fit: a 2 MiB incompressible pre-image on a 1 MiB filesystem.
    mid = sh.snap()
    proc = sh.sh(b"dd if=/dev/zero of=rand.bin bs=64k count=1 conv=notrunc status=none", rc=None,
                 refusals_ok=True)
    assert proc.returncode != 0 and b"ftsbx: " in proc.stderr, f"not refused: {proc!r}"
    assert_same(mid, sh.snap(), "the tree after a refused change")
    sh.sh(b"dd if=/dev/zero of=%s bs=4k status=none 2>/dev/null; sync" % q(filler(sh)), rc=None,
          preload=False)
    refused = 0
    for cmd in (b"echo x > a.txt", b"touch newfile", b"rm src/mid.bin", b"mkdir d2", b"chmod 600 hard1",
                b"mv big.bin big2"):
        mid = sh.snap()
        proc = sh.sh(cmd, rc=None, refusals_ok=True)
        if proc.returncode:
            assert b"ftsbx: " in proc.stderr, f"{cmd!r} failed without a refusal: {proc.stderr!r}"
            assert_same(mid, sh.snap(), f"the tree after the refused {cmd!r}")
            refused += 1
    assert refused, "a full journal filesystem refused nothing"
    return before


def test_full_disk_refuses_then_rewinds(small_journal_fs):
    sh = small_journal_fs
    before = fill_journal_fs(sh)
    sh.sh(b"rm %s" % q(filler(sh)), preload=False)      # a person makes room
    sh.rewind()
    assert_same(before, sh.snap())
    sh.verify()


def test_full_disk_rewinds_without_room(small_journal_fs):
    sh = small_journal_fs
    before = fill_journal_fs(sh)
    sh.rewind()
    assert_same(before, sh.snap())
    sh.verify()
