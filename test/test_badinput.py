"""Bad input gets a clear one-line message and the right exit code, never a
traceback or a signal: no journal, not a journal, a journal from a newer
ftsbx, bad command lines. And a journal that cannot be written stops the
change: a read-only journal directory, a full disk."""
import os
import subprocess

import pytest

from conftest import (JDRIVE, TXREPLAY, assert_no_crash, assert_same, frame_crc, frames,
                      header_with, jdrive_argv, salt_of, segments, snapshot, txreplay)


def make_missing(s):
    return os.path.join(s.base, b"nope")


def make_empty(s):
    os.mkdir(os.path.join(s.base, b"empty"))
    return os.path.join(s.base, b"empty")


def make_regular_file(s):
    path = os.path.join(s.base, b"file")
    with open(path, "wb") as f:
        f.write(b"FTSBXJNL but not really\n")
    return path


def make_garbage(s):
    d = os.path.join(s.base, b"garbage")
    for sub in (b"", b"log", b"objects"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    with open(os.path.join(d, b"session"), "wb") as f:
        f.write(os.urandom(300))
    return d


def patched_session(s, patch):
    """A real session whose session file header went through PATCH."""
    s.jd(["exec", "true"])
    path = os.path.join(s.sess, b"session")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(patch(data[:32]) + data[32:])
    return s.sess


def make_newer_version(s):
    return patched_session(s, lambda h: header_with(h, version=2))


def make_unknown_incompat_feature(s):
    return patched_session(s, lambda h: header_with(h[:12] + b"\x01\0\0\0" + h[16:]))


def make_short_session_file(s):
    s.jd(["exec", "true"])
    os.truncate(os.path.join(s.sess, b"session"), 20)
    return s.sess


BAD = {
    "missing-dir": make_missing,
    "empty-dir": make_empty,
    "regular-file": make_regular_file,
    "garbage-session": make_garbage,
    "newer-version": make_newer_version,
    "unknown-incompat-feature": make_unknown_incompat_feature,
    "short-session-file": make_short_session_file,
}

COMMANDS = [["list"], ["list", "--json"], ["log"], ["log", "--json"], ["verify"],
            ["rewind"], ["rewind", "--dry-run"], ["show", "1"]]


@pytest.mark.parametrize("make", BAD.values(), ids=BAD.keys())
def test_bad_journal_gives_one_clear_line_and_exit_1(scratch, make):
    s = scratch
    journal = make(s)
    before = snapshot(s.base)
    for cmd in COMMANDS:
        proc = txreplay(cmd[0], journal, *cmd[1:], rc=1)
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(b"txreplay: "), \
            f"{cmd}: stderr {proc.stderr!r}"
        assert journal in lines[0], f"{cmd}: the message does not name the journal: {lines[0]!r}"
        assert not proc.stdout.strip(), f"{cmd}: stdout {proc.stdout!r}"
    assert_same(before, snapshot(s.base), "the scratch dir")


@pytest.mark.parametrize("make", [make_newer_version, make_unknown_incompat_feature],
                         ids=["version", "incompat"])
def test_newer_journal_says_it_is_newer(scratch, make):
    proc = txreplay("verify", make(scratch), rc=1)
    assert b"newer" in proc.stderr or b"version" in proc.stderr, proc.stderr


def test_jdrive_refuses_a_newer_session(scratch):
    s = scratch
    make_newer_version(s)
    before = snapshot(s.base)
    s.jd(["put", "x", "y"], rc=1)
    assert_same(before, snapshot(s.base))


def test_newer_segment_is_reported(scratch):
    s = scratch
    s.txn(["put", "x", "y"])
    (seg,) = segments(s.sess)
    with open(seg, "r+b") as f:
        f.write(header_with(f.read(32), version=2))
    proc = s.tx("verify", s.sess, rc=1)
    assert os.path.basename(seg) in proc.stdout + proc.stderr


def test_unknown_mandatory_record_type_is_refused(scratch):
    """Types below 128 must be understood: one from the future is refused."""
    s = scratch
    s.txn(["put", "x", "y"])
    (seg,) = segments(s.sess)
    _, fr = frames(seg)
    with open(seg, "rb") as f:
        data = bytearray(f.read())
    last = fr[-1]
    data[last.offset + 8] = 100
    data[last.offset:last.offset + 4] = frame_crc(salt_of(s.sess), bytes(data[last.offset:last.end])) \
        .to_bytes(4, "little")
    with open(seg, "wb") as f:
        f.write(data)
    proc = s.tx("verify", s.sess, rc=1)
    assert b"newer" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


USAGE = [
    [], ["frob"], ["log"], ["list", "J", "extra"], ["list", "J", "--bogus"],
    ["rewind", "J", "--txn"], ["rewind", "J", "--txn", "x"], ["rewind", "J", "--to", "-1"],
    ["rewind", "J", "--content"], ["show", "J"], ["show", "J", "notanumber"],
    ["log", "J", "--txn", "99999999999999"], ["verify", "J", "--json", "--txn"],
]


@pytest.mark.parametrize("argv", USAGE, ids=[" ".join(a) or "nothing" for a in USAGE])
def test_txreplay_usage_error_exits_2(scratch, argv):
    s = scratch
    s.txn(["put", "x", "y"])
    before = snapshot(s.base)
    proc = txreplay(*[s.sess if a == "J" else a for a in argv], rc=2)
    assert proc.stderr.startswith(b"txreplay: ") and b"usage" in proc.stderr
    assert_same(before, snapshot(s.base))


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_txreplay_help(flag):
    proc = txreplay(flag)
    assert b"usage" in proc.stdout and b"rewind" in proc.stdout


def test_txreplay_version():
    proc = txreplay("--version")
    assert proc.stdout.startswith(b"txreplay") and proc.stdout.count(b"\n") == 1


JDRIVE_USAGE = [["S"], ["S", "frob"], ["S", "put", "x"], ["S", "chmod", "x", "9z"],
                ["S", "write", "x", "ten", "data"], ["S", "rename", "a", "b", "sideways"],
                ["S", "begin", "::", "::", "end"], ["S", "put", "x", "y", "::", "chmod", "x", "9z"]]


@pytest.mark.parametrize("argv", JDRIVE_USAGE, ids=[" ".join(a) for a in JDRIVE_USAGE])
def test_jdrive_usage_error_exits_2_and_changes_nothing(scratch, argv):
    s = scratch
    before = snapshot(s.base)
    argv = [s.sess if a == "S" else os.path.join(s.ws, a.encode()) if a in ("x", "a", "b") else a
            for a in argv]
    proc = subprocess.run([JDRIVE, *argv], capture_output=True)
    assert_no_crash(proc, "jdrive")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(b"jdrive: ")
    assert_same(before, snapshot(s.base), "the scratch dir")


def test_jdrive_failed_call_exits_1(scratch):
    s = scratch
    s.jd(["unlink", "absent"], rc=1)
    s.jd(["rmdir", "absent"], rc=1)
    s.jd(["put", "no/such/dir/file", "x"], rc=1)


# --- journals that cannot be written ---------------------------------------------

def unshare_works():
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


needs_unshare = pytest.mark.skipif(not unshare_works(), reason="unshare -m is not permitted here")

RO_SCRIPT = ('mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" || exit 99; '
             'exec "$@"')


@needs_unshare
@pytest.mark.parametrize("op", [["put", "a.txt", "x"], ["put", "new", "x"], ["unlink", "a.txt"],
                                ["mkdir", "nd"], ["rename", "a.txt", "b"],
                                ["chmod", "a.txt", "600"], ["write", "big.bin", "9", "x"]],
                         ids=lambda op: op[0] + "-" + op[1])
def test_unwritable_journal_stops_the_change(populated, op):
    s = populated
    s.jd(["exec", "true"])                      # the session exists
    before = s.snap()
    journal = snapshot(s.sess)
    parent = os.path.dirname(s.sess)
    argv = jdrive_argv(s.sess, [["begin"], s.absolute(op), ["end"]])
    proc = subprocess.run(["unshare", "-m", "sh", "-c", RO_SCRIPT, parent, *argv],
                          capture_output=True)
    assert proc.returncode != 99, f"the read-only bind mount failed: {proc.stderr!r}"
    assert_no_crash(proc, "jdrive")
    assert proc.returncode == 3, f"jdrive exit {proc.returncode}: {proc.stderr!r}"
    assert proc.stderr.startswith(b"jdrive: ")
    assert_same(before, s.snap())
    assert_same(journal, snapshot(s.sess), "the journal")


class Namespace:
    """A mount namespace kept alive by a sleeping process, with a small
    tmpfs mounted on DIR; commands run in it through nsenter."""

    def __init__(self, d, size="256k"):
        self.holder = subprocess.Popen(
            ["unshare", "-m", "sh", "-c",
             'mount -t tmpfs -o size=%s tmpfs "$0" && echo ready && exec sleep 600' % size, d],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = self.holder.stdout.readline()
        if line != b"ready\n":
            self.close()
            pytest.fail(f"cannot mount a tmpfs: {self.holder.stderr.read()!r}")

    def run(self, argv, env=None):
        proc = subprocess.run(["nsenter", "-t", str(self.holder.pid), "-m", "--", *argv],
                              capture_output=True, env=env)
        assert_no_crash(proc, os.path.basename(argv[0]))
        return proc

    def close(self):
        self.holder.kill()
        self.holder.wait()


def fill_until_full(s, ns, nfiles, one_process):
    """Journal `fill` over r0, r1, ... (in one process, or one process
    each) until jdrive fails; returns its last result and how many files
    were changed before it."""
    proc = ns.run(jdrive_argv(s.sess, [["begin", "fill"]]))
    assert proc.returncode == 0, proc.stderr
    n = proc.stdout.split()[1]
    fills = [s.absolute(["fill", f"r{i}", "5000"]) for i in range(nfiles)]
    if one_process:
        proc = ns.run(jdrive_argv(s.sess, [["txn", n]] + fills))
    else:
        for fill in fills:
            proc = ns.run(jdrive_argv(s.sess, [["txn", n], fill]))
            if proc.returncode:
                break
    changed = [i for i in range(nfiles) if os.path.getsize(s.p(f"r{i}")) == 5000]
    return proc, len(changed)


@needs_unshare
@pytest.mark.parametrize("one_process", [True, False], ids=["one-writer", "writer-per-change"])
@pytest.mark.parametrize("kib,nfiles,tmpfs", [(40, 12, "256k"), (300, 4, "512k")],
                         ids=["inline-pre-images", "pre-images-in-objects"])
def test_full_disk_stops_the_change_and_the_journal_stays_whole(populated, one_process,
                                                                kib, nfiles, tmpfs):
    s = populated
    for i in range(nfiles):
        with open(s.p(f"r{i}"), "wb") as f:
            f.write(os.urandom(kib << 10))
    before = s.snap()
    ns = Namespace(os.path.dirname(s.sess), size=tmpfs)
    try:
        proc, k = fill_until_full(s, ns, nfiles, one_process)
        assert 0 < k < nfiles, f"{k} of {nfiles} changes made: {proc.stderr!r}"
        assert proc.returncode != 0, "the disk never filled"
        now = s.snap()
        for i in range(k, nfiles):
            assert now[b"r%d" % i] == before[b"r%d" % i], f"r{i} changed without its record"
        v = ns.run([TXREPLAY, "verify", s.sess])
        assert v.returncode == 0, v.stdout + v.stderr
        r = ns.run([TXREPLAY, "rewind", s.sess])
        assert r.returncode == 0, r.stdout + r.stderr
        assert_same(before, s.snap())
        assert proc.returncode == 3, f"jdrive exit {proc.returncode}: {proc.stderr!r}"
    finally:
        ns.close()


# A journal whose log/ went away while the session ran (removed from outside):
# a process that opens its first segment then cannot journal, and its change
# is refused (EIO), not let through as if the path itself were missing, nor
# journaled into a log/ made anew (the shared page says log/ was made). The
# root first writes a record that changes nothing (a refusal), which makes
# log/; then a forked child (log/'s descriptor inherited) and a new program
# (log/ looked up afresh) each try a change.
LOG_GONE_AGENT = """
pid = os.fork()
if pid == 0:
    try:
        open("new.txt", "w").write("x")
        os._exit(0)
    except OSError as e:
        print(e.errno, flush=True)
        os._exit(3)
_, st = os.waitpid(pid, 0)
r = subprocess.run([sys.executable, "-c", "open('new2.txt', 'w')"], stderr=subprocess.PIPE)
print(r.returncode, r.stderr.decode().count("Errno 5"), flush=True)
sys.exit(os.waitstatus_to_exitcode(st))
"""


def test_a_journal_without_its_log_refuses_the_change(populated):
    from test_shim_lib import Shim
    sh = Shim(populated)
    before = sh.snap()
    proc, out, err = sh.run_with_log_removed(sh.LOG_MADE_THEN_WAIT + LOG_GONE_AGENT)
    assert proc.returncode == 3, (proc.returncode, out, err)
    assert out.split() == [b"5", b"1", b"1"], (out, err)      # EIO, twice
    assert b"cannot journal" in err, err
    assert not os.path.exists(sh.p("new.txt"))
    assert not os.path.exists(sh.p("new2.txt"))
    assert not os.path.exists(os.path.join(sh.journal, b"log"))
    assert_same(before, sh.snap())
