"""What a wrapped program cannot get around (issue 5): the journal
directory is off limits, the environment is sticky (a program that drops
LD_PRELOAD or empties its environment still runs journaled), and hostile
hosts (test/hostile/*.c: closing or dup2()ing over the shim's descriptors,
writing from constructors, vfork) still leave a journal that rewinds
exactly."""
import json
import os
import shutil
import stat
import subprocess
import time

import pytest

from conftest import assert_same
from test_shim_lib import PY, SHIM, Shim


@pytest.fixture
def shim(populated):
    """A Shim over a workspace holding populate()'s rich tree."""
    return Shim(populated)


# --- the journal directory is off limits -------------------------------------------


def journal_state(journal):
    """rel -> (type, mode, content or size) for every entry of the journal;
    dedup3, shared (seq and locks in older sessions: tables changed in place)
    by size only."""
    out = {}
    for top, dirs, files in os.walk(journal):
        for name in dirs + files:
            path = os.path.join(top, name)
            rel = os.path.relpath(path, journal)
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or rel in (b"dedup", b"dedup2", b"dedup3", b"shared", b"seq", b"locks"):
                out[rel] = (stat.S_IFMT(st.st_mode), st.st_mode, st.st_size)
            else:
                with open(path, "rb") as f:
                    out[rel] = (stat.S_IFMT(st.st_mode), st.st_mode, f.read())
    return out


def assert_journal_intact(before, after):
    """Nothing of BEFORE changed, but for records appended to segments, new
    segments in log/ and a new run's compiled policy."""
    for rel, (kind, mode, data) in before.items():
        assert rel in after, f"journal entry {rel!r} vanished"
        k2, m2, d2 = after[rel]
        assert (k2, m2) == (kind, mode), f"journal entry {rel!r}: mode {mode:o} -> {m2:o}"
        if rel.startswith(b"log/") and rel.endswith(b".ftj"):
            assert d2.startswith(data), f"journal segment {rel!r} was rewritten, not appended to"
        else:
            assert d2 == data, f"journal entry {rel!r} changed"
    # a new run's root leaves its compiled policy (policy-PID); nothing else is new
    new = [rel for rel in after if rel not in before and not rel.startswith((b"log/", b"policy-"))]
    assert not new, f"new entries in the journal: {new!r}"


J = b'"$FTSBX_JOURNAL"'
ATTACKS = {
    "cat_into": b"cat > %s/x <<< evil" % J,
    "rm_rf": b"rm -rf %s" % J,
    "truncate_session": b": > %s/session" % J,
    "append_segment": b"for f in %s/log/*; do echo evil >> \"$f\"; done" % J,
    "rename_out": b"mv %s/session stolen" % J,
    "chmod": b"chmod -R 777 %s" % J,
    "touch": b"touch -d @0 %s/session" % J,
    "relative_path": b"cd %s/.. && echo evil > \"$(basename %s)/session\"" % (J, J),
    "symlink_to_file": b"ln -s %s/session jl && echo evil >> jl" % J,
    "symlink_to_dir": b"ln -s %s jd && echo evil > jd/session" % J,
    "symlink_to_dir_new_file": b"ln -s %s jd && echo evil > jd/x" % J,
    "hard_link": b"ln %s/session stolen && echo evil >> stolen" % J,
    "python_os_open": b"%s -c 'import os; os.open(os.environ[\"FTSBX_JOURNAL\"] + \"/shared\", os.O_RDWR)'"
                      % PY.encode(),
    # a process's thread judges d/sub outside the journal and remembers it;
    # then another process's directory renames alone put a symlink into the
    # journal at d/sub
    "directory_swapped_in": b"%s -c 'import os\nos.makedirs(\"d/sub\"); os.mkdir(\"e\")\n"
                            b"os.symlink(os.environ[\"FTSBX_JOURNAL\"], \"e/sub\")\n"
                            b"open(\"d/sub/x\", \"w\").write(\"ok\")\n"
                            b"os.system(\"mv d d_old && mv e d\")\n"
                            b"open(\"d/sub/x\", \"w\").write(\"evil\")'" % PY.encode(),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_journal_directory_refused(shim, attack):
    before = shim.snap()
    shim.sh(b"echo changed > a.txt && rm big.bin && mkdir newdir")
    jbefore = journal_state(shim.journal)
    proc = shim.sh(ATTACKS[attack], rc=None, refusals_ok=True)
    assert proc.returncode != 0, f"{attack}: exit 0\nstderr: {proc.stderr!r}"
    assert b"ftsbx: " in proc.stderr, f"{attack}: no ftsbx: line\nstderr: {proc.stderr!r}"
    assert_journal_intact(jbefore, journal_state(shim.journal))
    shim.verify()
    shim.rewind()
    assert_same(before, shim.snap())
    shim.verify()


# --- environment stickiness ----------------------------------------------------------

ESCAPES = {
    "env_i": b"env -i /bin/sh -c 'rm a.txt'",
    "env_u_ld_preload": b"env -u LD_PRELOAD /bin/sh -c 'rm a.txt'",
    "env_u_ftsbx": b"env -u FTSBX_JOURNAL -u FTSBX_TXN rm a.txt",
    "empty_ld_preload": b"LD_PRELOAD= rm a.txt",
    "other_ld_preload": b"LD_PRELOAD=libc.so.6 /bin/sh -c 'unset LD_PRELOAD; rm a.txt'",
    "python_execve_empty": b"%s -c 'import os; os.execve(\"/bin/rm\", [\"rm\", \"a.txt\"], {})'"
                           % PY.encode(),
    "python_subprocess_empty": b"%s -c 'import subprocess; subprocess.run([\"/bin/rm\", \"a.txt\"], env={}, "
                               b"check=True)'" % PY.encode(),
    "perl_clears_env": b"perl -e '%ENV = (); exec \"/bin/rm\", \"a.txt\" or die'",
}


@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_environment_sticky(shim, escape):
    def check(_):
        assert not shim.exists("a.txt")
    shim.roundtrip(ESCAPES[escape], check)


def test_environment_sticky_with_long_library_and_journal_paths(shim):
    """Every process keeps the library's path and the session's in short
    buffers on the data page the loader writes anyway, and longer ones in
    buffers of their own (state.c): env -i gets both back all the same."""
    long = os.path.join(shim.base, b"l" * 150, b"m" * 150)
    os.makedirs(long)
    lib = os.path.join(long, b"libftsbx.so")
    shutil.copyfile(SHIM, lib)
    shim.journal = os.path.join(long, b"s" * 100)

    def check(_):
        assert not shim.exists("a.txt")
    shim.roundtrip(ESCAPES["env_i"], check, env=shim.env(LD_PRELOAD=os.fsdecode(lib)))


# --- hostile hosts ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["close_range", "closefrom", "loop", "syscall"])
def test_host_closes_every_fd(shim, how):
    exe = shim.gcc("closefds", "closefds.c")

    def check(_):
        assert shim.read("a.txt") == shim.read("src/main.c") == b"after the close\n"
        assert shim.read("new.before") == b"before the close\n" and not shim.exists("secret")
    shim.roundtrip(b"ulimit -n 4096 && %s %s new a.txt src/main.c secret-" % (exe, how.encode()), check)


def test_host_dup2_onto_high_fds(shim):
    exe = shim.gcc("highfds", "highfds.c")

    def check(_):
        for rel in ("a.txt", "newfile"):
            assert shim.read(rel).count(b"\n") == 325
    shim.roundtrip(b"ulimit -n 4096 && %s a.txt newfile" % exe, check)


@pytest.mark.parametrize("mode", ["enforce", "audit"])
def test_host_reuses_directory_numbers_closed_inside_libc(shim, mode):
    """closedir and fclose close inside libc, where no hook sees it; the
    numbers come back for other directories and files (through dup, fopen,
    opendir and a plain open after pclose, __close, endmntent, mq_close,
    syscall(SYS_close) ..., which no hook sees), and what is made, changed
    and removed through them is journaled under the right paths; so is
    what is removed through a number a thread with a table of its own, or a
    clone child sharing the table, put another directory on. In audit mode opendir's and fopen's
    own opens are all that opens (no judging probe takes the number first
    and drops it on its close)."""
    exe = shim.gcc("fdreuse", "fdreuse.c")
    for rel, data in (("b/gone", b"g"), ("b/kept", b"k"), ("b/other", b"other"), ("c/x", b"x"),
                      ("c/victim1", b"v1"), ("c/victim2", b"v2"), ("c/victim3", b"v3"), ("a/stays", b"a"),
                      ("a/victim3", b"a3")):
        shim.write(rel, data)
    for i in range(4, 19):
        shim.write(f"c/victim{i}", f"c{i}".encode())
        shim.write(f"a/victim{i}", f"a{i}".encode())

    def check(_):
        assert shim.read("b/made-in-b") == b"b\n" and shim.exists("b/dir-in-b")
        assert not shim.exists("b/gone") and shim.read("b/from-c") == b"x"
        assert os.readlink(shim.p("c/link-in-c")) == b"kept" and shim.exists("started")
        assert shim.read("b/other") == b"o" and os.stat(shim.p("b/other")).st_mode & 0o777 == 0o604
        assert not shim.exists("c/victim1") and not shim.exists("c/victim2") and shim.read("a/stays") == b"a"
        assert not shim.exists("c/victim3") and shim.read("a/victim3") == b"a3"
        for i in range(4, 13):      # closed or replaced by each other way
            assert not shim.exists(f"c/victim{i}") and shim.read(f"a/victim{i}") == f"a{i}".encode()
        # a thread's own table or cwd (13, 15, 18), a vfork child's (17): the main thread's A;
        # a clone child sharing the table (14, 16): C
        for i, gone in ((13, "a"), (14, "c"), (15, "a"), (16, "c"), (17, "a"), (18, "a")):
            kept = "c" if gone == "a" else "a"
            assert not shim.exists(f"{gone}/victim{i}") and shim.read(f"{kept}/victim{i}") == f"{kept}{i}".encode()
    policy = os.path.join(shim.base, b"mode.ini")
    with open(policy, "w") as f:
        f.write(f"[policy]\nbase = default\nmode = {mode}\n")
    shim.roundtrip(b"%s a b c" % exe, check, env=dict(shim.env(True), FTSBX_POLICY=policy))


def test_host_constructor_writes_before_main(shim):
    bindir = os.path.join(shim.base, b"bin")
    shim.gcc("libctor.so", "ctorlib.c", flags=["-shared", "-fPIC"])
    exe = shim.gcc("ctormain", "ctormain.c", flags=[b"-L" + bindir, "-lctor", b"-Wl,-rpath," + bindir])
    shim.write("lib-ctor.victim", "to be removed by a constructor\n")

    def check(_):
        assert shim.read("lib-ctor.out") == b"written before main\n"
        assert shim.read("lib-dtor.gcda") == b"written after main\n"
        assert shim.read("main-ctor.renamed") == b"main's constructor\n"
        assert shim.read("main.out") == b"main\n" and not shim.exists("lib-ctor.victim")
    shim.roundtrip(exe, check)


@pytest.mark.parametrize("env", ["inherited", "empty"])
def test_host_vfork_exec_deletes(shim, env):
    exe = shim.gcc("vforkexec", "vforkexec.c")
    flag = b" -e" if env == "empty" else b""

    def check(_):
        assert not shim.exists("a.txt") and not shim.exists("src")
    shim.roundtrip(b"%s%s /bin/rm a.txt && %s%s /bin/rm -r src" % (exe, flag, exe, flag), check)


def test_refusal_message_format(shim):
    """One stderr line per refusal, in the project's message form."""
    proc = shim.sh(b"echo evil > \"$FTSBX_JOURNAL/x\"", rc=1, refusals_ok=True)
    lines = [line for line in proc.stderr.splitlines() if line.startswith(b"ftsbx: ")]
    want = b"ftsbx: refused '%s/x': Permission denied (the journal directory is off limits)" % shim.journal
    assert lines == [want], f"stderr: {proc.stderr!r}"


def test_writing_a_character_device_opens_no_session(shim):
    """`> /dev/null` changes no file: a process whose only writes go to a
    character device never opens the session (maps no shared table for
    writing); one that writes a file does, and that change is journaled."""
    maps = b"import sys; open('/dev/null', 'w').write('x'); %s; " \
           b"print(sum('rw-s' in l and '/shared' in l for l in open('/proc/self/maps')))"
    # "; true": bash forks for python (a python it exec'd would be the root)
    proc = shim.sh(b"%s -c \"%s\"; true" % (PY.encode(), maps % b"pass"))
    assert proc.stdout.split() == [b"0"], proc.stdout
    proc = shim.sh(b"%s -c \"%s\"; true" % (PY.encode(), maps % b"open('written.txt', 'w').write('y')"))
    assert proc.stdout.split() == [b"1"], proc.stdout
    log = [json.loads(line) for line in shim.txreplay("log", "--json", shim.journal).stdout.splitlines()]
    assert any((r.get("path") or "").endswith("/written.txt") for r in log), "the file's creation was not journaled"


def test_own_proc_files_through_self_are_writable(shim):
    """/proc/self and /proc/thread-self are symlinks the shim resolves; the
    policy still sees a process's own files by those names (default.ini
    leaves them untracked: the JVM writes /proc/self/coredump_filter at its
    start). Another process's files under /proc stay outside the roots."""
    other = subprocess.Popen(["sleep", "60"])
    comm = f"/proc/{other.pid}/comm"
    try:
        for _ in range(500):            # until the child has exec'd sleep
            with open(comm, "rb") as f:
                if f.read() == b"sleep\n":
                    break
            time.sleep(0.01)
        script = b"import os, threading; " \
                 b"open('/proc/self/coredump_filter', 'w').write(open('/proc/self/coredump_filter').read()); " \
                 b"open('/proc/thread-self/comm', 'w').write('own'); " \
                 b"t = threading.Thread(target=lambda: open('/proc/thread-self/comm', 'w').write('thread')); " \
                 b"t.start(); t.join(); print(open('/proc/self/comm').read().strip()); " \
                 b"open('/proc/%d/comm', 'w').write('theirs')" % other.pid
        proc = shim.sh(b"%s -c \"%s\"; true" % (PY.encode(), script), refusals_ok=True)
        assert proc.stdout.split() == [b"own"], proc
        lines = [line for line in proc.stderr.splitlines() if line.startswith(b"ftsbx: ")]
        assert lines == [b"ftsbx: refused '/proc/%d/comm': Permission denied (outside the writable roots)"
                         % other.pid], proc.stderr
        with open(comm, "rb") as f:
            assert f.read() == b"sleep\n"
    finally:
        other.kill()
        other.wait()


def test_only_the_harmless_devices_are_writable_and_no_device_node_is_made(shim):
    """Character devices stay usable where they are harmless (the bit
    buckets, randomness, terminals: a pty python opens); any other (here
    /dev/kmsg, opened but never written) is refused, and so is making a
    device node in the workspace (mknod c 1 1 would be /dev/mem under another
    name), by mknod(1) and by python's os.mknod alike; FIFOs are made as
    usual. The tree then rewinds exactly."""
    script = (b"for d in /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/ptmx; do "
              b"true > $d && echo ok:$d; done; "
              b"%s -c 'import os; m, s = os.openpty(); os.write(s, b\"x\"); print(\"pty\", os.read(m, 1))'; "
              b"true > /dev/kmsg; echo kmsg=$?; "
              b"mknod ./mem c 1 1; echo mknod=$?; "
              b"%s -c 'import os; os.mknod(\"blk\", 0o600 | 0o60000, os.makedev(7, 0))'; echo py=$?; "
              b"mkfifo new_fifo && mknod new_fifo2 p && echo fifos" % (PY.encode(), PY.encode()))
    before = shim.snap()
    proc = shim.sh(script, refusals_ok=True)
    out = proc.stdout.decode().split()
    assert out == [f"ok:/dev/{d}" for d in ("null", "zero", "full", "random", "urandom", "ptmx")] + \
        ["pty", "b'x'", "kmsg=1", "mknod=1", "py=1", "fifos"], proc
    lines = [line for line in proc.stderr.splitlines() if line.startswith(b"ftsbx: ")]
    assert lines == [b"ftsbx: refused '/dev/kmsg': Permission denied "
                     b"(a device that is not a terminal, null, zero, random or an accelerator)",
                     b"ftsbx: refused '%s': Operation not permitted (making a device node)" % shim.p("mem"),
                     b"ftsbx: refused '%s': Operation not permitted (making a device node)" % shim.p("blk")], \
        proc.stderr
    assert not shim.exists("mem") and not shim.exists("blk")
    assert stat.S_ISFIFO(os.lstat(shim.p("new_fifo")).st_mode) and stat.S_ISFIFO(os.lstat(shim.p("new_fifo2")).st_mode)
    shim.rewind()
    assert_same(before, shim.snap())


def test_a_device_node_made_before_the_session_is_removed_and_rewound(shim):
    """The session makes no device node, but one that was there (made here
    before the snapshot, as a chroot's dev/null would be) is an ordinary
    file to remove: rm -rf takes it and the rewind makes it again, with its
    device number, mode and times."""
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    shim.setup(b"mkdir -p chroot/dev && mknod -m 666 chroot/dev/null c 1 3 && mknod chroot/dev/zero c 1 5")
    before = shim.snap()
    shim.sh(b"rm -rf chroot")
    assert not shim.exists("chroot")
    shim.rewind()
    assert_same(before, shim.snap())
    assert os.lstat(shim.p("chroot/dev/null")).st_rdev == os.makedev(1, 3)


def test_every_way_to_send_a_signal_is_judged(shim):
    """kill, tgkill (glibc's function) and the raw tkill, tgkill,
    rt_sigqueueinfo and rt_tgsigqueueinfo system calls through syscall():
    each aimed at a process outside the session (a scratch sleep this test
    started) is refused and the process lives; tgkill of the session's own
    child is let through."""
    outside = subprocess.Popen(["sleep", "60"])
    try:
        script = b"""
import ctypes, errno, os, signal, subprocess
libc = ctypes.CDLL(None, use_errno=True)
info = ctypes.create_string_buffer(128)
pid = %d
tries = [("kill", lambda: libc.kill(pid, 15)),
         ("tgkill", lambda: libc.tgkill(pid, pid, 15)),
         ("tkill", lambda: libc.syscall(200, pid, 15)),
         ("sys_tgkill", lambda: libc.syscall(234, pid, pid, 15)),
         ("rt_sigqueueinfo", lambda: libc.syscall(129, pid, 15, info)),
         ("rt_tgsigqueueinfo", lambda: libc.syscall(297, pid, pid, 15, info))]
for name, call in tries:
    ctypes.set_errno(0)
    print(name, call(), errno.errorcode.get(ctypes.get_errno(), 0))
own = subprocess.Popen(["sleep", "60"])
print("own", libc.tgkill(own.pid, own.pid, signal.SIGKILL), own.wait())
""" % outside.pid
        shim.write("signals.py", script)
        proc = shim.sh(b"%s signals.py; true" % PY.encode(), refusals_ok=True)
        assert proc.stdout.decode().splitlines() == [
            "kill -1 EPERM", "tgkill -1 EPERM", "tkill -1 EPERM", "sys_tgkill -1 EPERM",
            "rt_sigqueueinfo -1 EPERM", "rt_tgsigqueueinfo -1 EPERM", "own 0 -9"], proc
        assert proc.stderr.count(b"ftsbx: refused") == 6, proc.stderr
        assert outside.poll() is None, "the process outside the session was signalled"
    finally:
        outside.kill()
        outside.wait()


def test_raw_metadata_calls_through_syscall_are_journaled(shim):
    """chmod, chown, lchown, utime, utimes, fchmod, fchown, fchmodat2 and
    the xattr calls (setxattrat and removexattrat too) made raw through
    syscall() (ctypes): each one runs and is journaled (the shim once read
    chmod's mode as an attribute's name, and crashed), and the rewind gives
    back every mode, time and attribute."""
    script = b"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("a.txt", os.O_RDONLY)
d = os.open("src", os.O_RDONLY)
uid, gid = os.getuid(), os.getgid()
class XattrArgs(ctypes.Structure):
    _fields_ = [("value", ctypes.c_uint64), ("size", ctypes.c_uint32), ("flags", ctypes.c_uint32)]
value = ctypes.create_string_buffer(b"z")
xa = XattrArgs(ctypes.addressof(value), 1, 0)
calls = [("fchmodat2", 452, -100, b"a.txt", 0o640, 0), ("setxattrat", 463, -100, b"src", 0, b"user.at",
         ctypes.byref(xa), ctypes.c_long(16)), ("removexattrat", 466, -100, b"src", 0, b"user.at"),
         ("setxattrat", 463, -100, b"a.txt", 0, b"user.at2", ctypes.byref(xa), ctypes.c_long(16)),
         ("chmod", 90, b"a.txt", 0o600), ("chown", 92, b"a.txt", uid, gid), ("lchown", 94, b"a.txt", uid, gid),
         ("utime", 132, b"a.txt", None), ("utimes", 235, b"src", None), ("fchmod", 91, d, 0o700),
         ("fchown", 93, fd, uid, gid), ("setxattr", 188, b"a.txt", b"user.t", b"v", 1, 0),
         ("fsetxattr", 190, fd, b"user.u", b"w", 1, 0), ("removexattr", 197, b"a.txt", b"user.t"),
         ("fremovexattr", 199, fd, b"user.u"), ("setxattr", 188, b"src", b"user.k", b"x", 1, 0)]
for name, nr, *args in calls:
    ctypes.set_errno(0)
    print(name, libc.syscall(nr, *args), ctypes.get_errno())
"""
    shim.write("rawmeta.py", script)

    def check(proc):
        got = [ln.split() for ln in proc.stdout.decode().split("\n") if ln]
        newer = ("fchmodat2", "setxattrat", "removexattrat")    # ENOSYS on an older kernel
        assert len(got) == 16 and all(g[1:] == ["0", "0"] or (g[0] in newer and g[1:] == ["-1", "38"])
                                      for g in got), proc
        assert stat.S_IMODE(os.stat(shim.p("a.txt")).st_mode) == 0o600
        assert os.getxattr(shim.p("src"), "user.k") == b"x"
    shim.roundtrip(b"%s rawmeta.py" % PY.encode(), check)


def test_raw_removals_through_syscall_return_what_the_kernel_would(shim):
    """unlink, unlinkat, rmdir and unlinkat(AT_REMOVEDIR) made raw through
    syscall() (ctypes), where the journal makes the removal itself (a file
    renamed into objects/, an empty directory kept there): each returns 0
    with errno untouched (it returned -1 with errno -1, the removal made),
    a failing one its own errno; the rewind gives everything back."""
    shim.setup(b"mkdir -p e1 e2 full/sub && echo x > f1 && echo y > f2")
    script = b"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, *args in (("unlink", 87, b"f1"), ("unlinkat", 263, -100, b"f2", 0), ("rmdir", 84, b"e1"),
                        ("unlinkat-dir", 263, -100, b"e2", 0x200), ("rmdir-full", 84, b"full"),
                        ("unlink-gone", 87, b"f1")):
    ctypes.set_errno(0)
    print(name, libc.syscall(nr, *args), ctypes.get_errno())
"""
    shim.write("rawrm.py", script)

    def check(proc):
        assert proc.stdout.decode().split("\n") == ["unlink 0 0", "unlinkat 0 0", "rmdir 0 0", "unlinkat-dir 0 0",
                                                     "rmdir-full -1 39", "unlink-gone -1 2", ""], proc
        assert not any(shim.exists(n) for n in ("f1", "f2", "e1", "e2")) and shim.exists("full/sub")
    shim.roundtrip(b"%s rawrm.py" % PY.encode(), check)


IOCTL_FLAGS = b"""
import array, ctypes, errno, fcntl, os, sys
GET, SET = 0x80086601, 0x40086602
libc = ctypes.CDLL(None, use_errno=True)
def flags(fd):
    a = array.array("l", [0])
    fcntl.ioctl(fd, GET, a, True)
    return a[0]
def report(name, r):
    print(name, r, errno.errorcode.get(ctypes.get_errno(), 0) if r else 0)
for path, add, how in ((b"a.txt", 0, "py"), (b"a.txt", 0x40, "py"), (b"a.txt", 0x10, "py"), (b"a.txt", 0x20, "raw"),
                       (b"src", 0x10, "raw"), (b"a.txt", 0x10, "high")):
    fd = os.open(path, os.O_RDONLY)
    value = flags(fd) | add
    ctypes.set_errno(0)
    if how == "py":
        try:
            fcntl.ioctl(fd, SET, array.array("l", [value]), True)
            r = 0
        except OSError as e:
            r = -1
            ctypes.set_errno(e.errno)
    elif how == "raw":
        r = libc.syscall(16, fd, ctypes.c_ulong(SET), (ctypes.c_long * 1)(value))
    else:                       # the kernel takes the request as 32 bits
        libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
        r = libc.ioctl(fd, (1 << 32) | SET, (ctypes.c_long * 1)(value))
    report("%s %s %s" % (path.decode(), hex(add), how), r)
    os.close(fd)
class FileAttr(ctypes.Structure):
    _fields_ = [("xflags", ctypes.c_uint64), ("extsize", ctypes.c_uint32), ("nextents", ctypes.c_uint32),
                ("projid", ctypes.c_uint32), ("cowextsize", ctypes.c_uint32)]
fd = os.open(b"a.txt", os.O_RDONLY)
fsx = bytearray(28)
fcntl.ioctl(fd, 0x801c581f, fsx, True)           # FS_IOC_FSGETXATTR
fsx[12:16] = (1234).to_bytes(4, "little")        # the same flags, another project id
try:
    fcntl.ioctl(fd, 0x401c5820, bytes(fsx))
    print("fssetxattr 0 0")
except OSError as e:
    print("fssetxattr -1", errno.errorcode[e.errno])
os.close(fd)
attr = FileAttr(0x8)            # FS_XFLAG_IMMUTABLE
ctypes.set_errno(0)
report("file_setattr", libc.syscall(469, -100, b"a.txt", ctypes.byref(attr), ctypes.c_long(24), 0))
"""


def test_inode_flags_are_not_changed(shim):
    """chattr's ioctl (FS_IOC_SETFLAGS), from python's fcntl.ioctl, raw
    through syscall(), with high bits in the request (the kernel takes 32),
    and the file_setattr system call (Linux 6.17): a change of a file's
    inode flags is refused with EPERM (no journal keeps them; immutable or
    append-only would keep a rewind from writing the file back), on files
    and directories alike; setting the flags a file has goes through."""
    shim.write("flags.py", IOCTL_FLAGS)
    try:
        proc = shim.sh(b"%s flags.py" % PY.encode(), refusals_ok=True)
    finally:                    # never leave a file the test's cleanup cannot remove
        for rel in ("a.txt", "src"):
            subprocess.run(["chattr", "-i", "-a", "-d", shim.p(rel)], capture_output=True)
    got = proc.stdout.decode().split("\n")
    assert got[:6] == ["a.txt 0x0 py 0 0", "a.txt 0x40 py -1 EPERM", "a.txt 0x10 py -1 EPERM",
                       "a.txt 0x20 raw -1 EPERM", "src 0x10 raw -1 EPERM", "a.txt 0x10 high -1 EPERM"], proc
    assert got[6] == "fssetxattr -1 EPERM", proc
    assert got[7] in ("file_setattr -1 EPERM", "file_setattr -1 ENOSYS"), proc
    assert proc.stderr.count(b"no journal keeps a file's inode flags") == 6 + (got[7].endswith("EPERM")), \
        proc.stderr
    lsattr = subprocess.run(["lsattr", "-d", shim.p("a.txt"), shim.p("src")], capture_output=True, text=True)
    assert [sum(ln.split()[0].count(c) for c in "iad") for ln in lsattr.stdout.splitlines()] == [0, 0], \
        lsattr.stdout


def test_a_signal_to_a_process_already_gone_is_not_refused(shim):
    """A pid whose process has exited and been reaped belongs to no one:
    kill, a process-group kill and pidfd_send_signal on a descriptor of a
    reaped child fail with ESRCH as they do without the shim, with no
    refusal; a live process outside the session is still refused."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    outside = subprocess.Popen(["sleep", "60"])
    try:
        script = b"""
import ctypes, errno, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
def call(name, f):
    ctypes.set_errno(0)
    print(name, f(), errno.errorcode.get(ctypes.get_errno(), 0))
call("gone", lambda: libc.kill(%d, 15))
call("gonegroup", lambda: libc.kill(-%d, 15))
child = subprocess.Popen(["true"])
pfd = os.pidfd_open(child.pid)
child.wait()
call("reaped", lambda: libc.kill(child.pid, 15))
call("pidfd", lambda: libc.syscall(424, pfd, 15, None, 0))
call("outside", lambda: libc.kill(%d, 15))
""" % (gone.pid, gone.pid, outside.pid)
        shim.write("gone.py", script)
        proc = shim.sh(b"%s gone.py; kill %d; echo status $?" % (PY.encode(), gone.pid), refusals_ok=True)
        assert proc.stdout.decode().splitlines() == [
            "gone -1 ESRCH", "gonegroup -1 ESRCH", "reaped -1 ESRCH", "pidfd -1 ESRCH",
            "outside -1 EPERM", "status 1"], proc
        assert proc.stderr.count(b"ftsbx: refused") == 1, proc.stderr
        assert b"No such process" in proc.stderr, proc.stderr
        assert outside.poll() is None
    finally:
        outside.kill()
        outside.wait()


def test_every_way_to_exec_judges_the_program_that_runs(shim):
    """The program an exec runs, whatever argv[0] says: execve of a name
    with no slash (the kernel runs ./reboot, no PATH search), fexecve of a
    descriptor, execveat under a directory descriptor, and the raw execve
    and execveat system calls through syscall(). Each runs a stand-in
    `reboot` that leaves a marker: every one is refused. A raw execve with
    an empty environment of an allowed program still runs under the shim."""
    shim.write("reboot", b"#!/bin/sh\necho ran >> %s\n" % shim.p("marker"), mode=0o755)
    script = b"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
argv = (ctypes.c_char_p * 2)(b"ls", None)
env = (ctypes.c_char_p * 1)(None)
def child(name, run):
    pid = os.fork()
    if pid == 0:
        try:
            r = run()
            print(name, r, ctypes.get_errno(), flush=True)
        except OSError as e:
            print(name, -1, e.errno, flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
def fd():
    f = os.open("reboot", os.O_RDONLY)
    os.set_inheritable(f, True)
    return f
child("execve", lambda: os.execve("reboot", ["ls"], {}))
child("fexecve", lambda: os.execve(fd(), ["ls"], {}))
child("execveat", lambda: libc.execveat(os.open(".", os.O_RDONLY), b"reboot", argv, env, 0))
child("sys_execve", lambda: libc.syscall(59, b"./reboot", argv, env))
child("sys_execveat", lambda: libc.syscall(322, os.open(".", os.O_RDONLY), b"reboot", argv, env, 0))
sh = (ctypes.c_char_p * 4)(b"sh", b"-c", b"echo preload=${LD_PRELOAD##*/}", None)
child("sys_execve_sh", lambda: libc.syscall(59, b"/bin/sh", sh, env))
"""
    shim.write("execs.py", script)
    proc = shim.sh(b"%s execs.py; true" % PY.encode(), refusals_ok=True)
    assert proc.stdout.decode().splitlines() == [
        "execve -1 1", "fexecve -1 1", "execveat -1 1", "sys_execve -1 1", "sys_execveat -1 1",
        "preload=libftsbx.so"], proc
    assert proc.stderr.count(b"ftsbx: refused") == 5, proc.stderr
    assert proc.stderr.count(b"[commands] power") == 5, proc.stderr
    assert not shim.exists("marker")


# --- signals: the session's own processes, orphans included ------------------------


def test_an_orphan_the_root_forked_is_still_the_sessions_own(shim):
    """`(loop &)`: a fork of the root (bash, the session's root here) that
    never execs is orphaned at once; its environment is the root's own, which
    never named the root. It is still a process of the session: the kill is
    allowed; a process outside the session (a scratch sleep this test started)
    stays refused."""
    import signal
    import subprocess
    outside = subprocess.Popen(["sleep", "60"])
    try:
        proc = shim.sh(b"( (while :; do sleep 0.1; done) >/dev/null 2>&1 & echo $! > orphan.pid ); "
                       b"pid=$(cat orphan.pid); "
                       b"while [ \"$(ps -o ppid= -p $pid | tr -d ' ')\" = $$ ]; do sleep 0.05; done; "
                       b"kill $pid && echo killed; kill -TERM %d; echo refused=$?" % outside.pid,
                       refusals_ok=True)
        out = proc.stdout.decode()
        assert "killed" in out and "refused=1" in out, out + proc.stderr.decode()
        assert proc.stderr.count(b"ftsbx: refused") == 1, proc.stderr
        assert outside.poll() is None, "the process outside the session was signalled"
    finally:
        outside.kill()
        outside.wait()
        try:
            with open(shim.p("orphan.pid")) as f:
                os.kill(int(f.read()), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def test_another_processs_environment_is_out_of_reach(shim):
    """/proc/PID/environ and /proc/PID/mem of a process outside the session
    (a scratch sleep holding a token in its environment) fail EACCES, as
    another user's would, recorded once per process, said nowhere (ps reads every
    process's environment: `ps aux` runs clean); the session's own (this
    shell's, a child's, the root's through a Python child) stay readable;
    with signals = any, the outside one is readable too."""
    import subprocess
    outside = subprocess.Popen(["sleep", "60"], env=dict(os.environ, SECRET_TOKEN="tok-4711"))
    script = (b"cat /proc/%d/environ > leak 2> err; echo environ=$?; head -c1 /proc/%d/mem > /dev/null 2>&1; "
              b"echo mem=$?; grep -c 'Permission denied' err; grep -q FTSBX_ /proc/self/environ; echo self=$?; "
              # looked at again a few times: in the middle of its exec the kernel shows an empty one
              b"sleep 5 & for t in 1 2 3 4 5; do grep -q FTSBX_ /proc/$!/environ && break; sleep 0.1; done; "
              b"echo child=$?; kill $!; "
              b"python3 -c 'import os; print(b\"FTSBX_\" in open(\"/proc/%%d/environ\" %% os.getppid(), \"rb\").read())'; "
              b"ps aux > /dev/null; echo ps=$?") % (outside.pid, outside.pid)
    try:
        proc = shim.sh(script)
        out = proc.stdout.decode().split()
        assert out == ["environ=1", "mem=1", "1", "self=0", "child=0", "True", "ps=0"], (out, proc.stderr)
        assert b"tok-4711" not in open(shim.p("leak"), "rb").read()
        log = shim.txreplay("log", shim.journal).stdout
        refusals = [line for line in log.split(b"\n") if b" refuse " in line]
        # one record per process that met any: cat's, head's, ps's first
        assert len(refusals) == 3 and len({r.split()[3] for r in refusals}) == 3, log
        assert b"read /proc/%d/environ" % outside.pid in refusals[0], log
        assert b"read /proc/%d/mem" % outside.pid in refusals[1], log
        policy = os.path.join(shim.base, b"any.ini")
        with open(policy, "w") as f:
            f.write("[policy]\nbase = default\nsignals = any\n")
        proc = shim.sh(b"cat /proc/%d/environ" % outside.pid, env=dict(shim.env(True), FTSBX_POLICY=policy))
        assert b"tok-4711" in proc.stdout
    finally:
        outside.kill()
        outside.wait()


def test_another_processs_unnamed_descriptors_are_out_of_reach(shim):
    """/proc/PID/fd/N of a process outside the session where N names no
    path (a memfd holding a secret, a pipe) fails EACCES, with Landlock off
    too; listing its descriptors works, and the session's own child's
    descriptors stay readable."""
    import subprocess
    outside = subprocess.Popen([PY, "-c", "import os, sys, time\n"
                                "fd = os.memfd_create('sec'); os.write(fd, b'secret-4711')\n"
                                "print(fd, flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    fd = int(outside.stdout.readline())
    policy = os.path.join(shim.base, b"nolandlock.ini")
    with open(policy, "w") as f:
        f.write("[policy]\nbase = default\nlandlock = off\n")
    try:
        for env in (shim.env(True), dict(shim.env(True), FTSBX_POLICY=policy)):
            proc = shim.sh(b"cat /proc/%d/fd/%d > got 2>/dev/null; echo memfd=$?; ls /proc/%d/fd > /dev/null; "
                           b"echo list=$?; %s -c 'import os, time; fd = os.memfd_create(\"m\"); "
                           b"os.write(fd, b\"mine\"); time.sleep(5)' & sleep 1; "
                           b"cat /proc/$!/fd/3; echo; kill $!" % (outside.pid, fd, outside.pid, PY.encode()),
                           env=env)
            assert proc.stdout.decode().split() == ["memfd=1", "list=0", "mine"], proc.stdout + proc.stderr
            assert b"secret" not in open(shim.p("got"), "rb").read()
    finally:
        outside.kill()
        outside.wait()


PROCESS_REACH = r"""
import ctypes, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
outside = int(sys.argv[1])
mine = subprocess.Popen(["sleep", "30"])
SYS_ptrace, SYS_process_vm_readv, SYS_pidfd_open, SYS_pidfd_getfd = 101, 310, 434, 438

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

def res(r):
    return "ok" if r >= 0 else os.strerror(ctypes.get_errno())

def sys_(*a):    # every argument a long, as the kernel reads them
    return libc.syscall(*(ctypes.c_long(x) if isinstance(x, int) else x for x in a))

def attach(pid, raw=False):
    r = sys_(SYS_ptrace, 16, pid, 0, 0) if raw else libc.ptrace(16, pid, None, None)
    if r == 0:
        os.waitpid(pid, 0)
        libc.ptrace(17, pid, None, None)
    return res(r)

def readv(pid, raw=False):
    buf = ctypes.create_string_buffer(8)
    local, remote = iovec(ctypes.addressof(buf), 8), iovec(0x1000, 8)
    if raw:
        r = sys_(SYS_process_vm_readv, pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    else:
        r = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    e = ctypes.get_errno()
    return "ok" if r >= 0 or e == 14 else os.strerror(e)     # EFAULT: reached, no page there

def getfd(pid, raw=False):
    pfd = sys_(SYS_pidfd_open, pid, 0)
    r = sys_(SYS_pidfd_getfd, pfd, 0, 0) if raw else libc.pidfd_getfd(pfd, 0, 0)
    return res(r)

for name, fn in (("attach", attach), ("readv", readv), ("getfd", getfd)):
    print(name, fn(outside), fn(outside, True), fn(mine.pid), fn(mine.pid, True))
mine.kill()
"""


def test_another_process_is_not_traced_read_or_robbed(shim):
    """ptrace attach, process_vm_readv and pidfd_getfd to a process outside
    the session are refused EPERM, through glibc and through syscall(), with
    Landlock off too (whose domain refuses a ptrace of its own); the
    session's own child stays reachable (a debugger, py-spy)."""
    import subprocess
    outside = subprocess.Popen(["sleep", "60"])
    policy = os.path.join(shim.base, b"nolandlock.ini")
    with open(policy, "w") as f:
        f.write("[policy]\nbase = default\nlandlock = off\n")
    with open(shim.p("reach.py"), "w") as f:
        f.write(PROCESS_REACH)
    try:
        for env in (shim.env(True), dict(shim.env(True), FTSBX_POLICY=policy)):
            proc = shim.sh(b"python3 reach.py %d" % outside.pid, env=env, refusals_ok=True)
            denied = os.strerror(1)
            assert proc.stdout.decode().splitlines() == [
                f"{name} {denied} {denied} ok ok" for name in ("attach", "readv", "getfd")], proc.stdout + proc.stderr
        assert outside.poll() is None
    finally:
        outside.kill()
        outside.wait()


ATTEMPT = """def attempt(what, fn):
    try:
        fn()
        print(what, "done")
    except OSError as e:
        print(what, e.errno)
"""


# --- paths deeper than PATH_MAX ---------------------------------------------------------

def test_cwd_deeper_than_path_max_fails_closed(shim):
    """With a cwd deeper than PATH_MAX no absolute path names what is under
    it: every change through a relative path there is refused (ENAMETOOLONG,
    a "cannot journal" line), every read too (no rule can judge it, .env
    could be hidden); the tree is unchanged, the journal verifies, a rewind
    changes nothing; the same calls from a shallow cwd go through."""
    deep = "/".join(["d" * 200 + str(i % 10) for i in range(25)])
    fd = os.open(shim.ws, os.O_RDONLY | os.O_DIRECTORY)
    for part in deep.split("/"):
        os.mkdir(part, dir_fd=fd)
        fd, old = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
        os.close(old)
    for name, data in (("leaf", b"orig\n"), ("rm_me", b"x\n")):
        f = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(f, data)
        os.close(f)
    os.close(fd)
    before = shim.snap()
    script = f"""{PY} - <<'PY'
import os
for part in {deep!r}.split("/"):
    os.chdir(part)
{ATTEMPT}attempt("write", lambda: open("leaf", "w").write("CHANGED\\n"))
attempt("unlink", lambda: os.unlink("rm_me"))
attempt("create", lambda: open("new", "x").close())
attempt("chmod", lambda: os.chmod(".", 0o700))
attempt("mkdir", lambda: os.mkdir("sub"))
attempt("read", lambda: open("leaf").read())
PY"""
    proc = shim.sh(script, refusals_ok=True)
    lines = proc.stdout.decode().split("\n")
    for what in ("write", "unlink", "create", "chmod", "mkdir", "read"):
        assert f"{what} 36" in lines, f"{what} not refused with ENAMETOOLONG: {proc.stdout!r}"
    assert b"cannot journal a change of" in proc.stderr and b"longer than PATH_MAX" in proc.stderr
    assert_same(before, shim.snap())
    shim.verify()
    shim.rewind()
    assert_same(before, shim.snap())


def test_library_handle_lookups_get_the_hooks(shim):
    """dlsym through a handle of the C library itself (ctypes.CDLL("libc.so.6"))
    gets the shim's hook for an interposed function, libc's own otherwise;
    RTLD_NEXT and RTLD_DEFAULT stay the caller's lookups (the executable's
    next object is the preloaded shim); glibc's other names of hooked
    functions (__close, __clone ...) get the hooks too; dlerror() is the
    program's own; and
    an unlink through that handle is journaled and rewinds."""
    exe = shim.gcc("dlsymlibc", "dlsymlibc.c", flags=["-ldl"])

    def check(proc):
        assert proc.stdout.decode().split("\n") == [
            "handle unlink libftsbx.so", "handle strlen libc.so.6", "next unlink libftsbx.so",
            "default unlink libftsbx.so", "missing none error set", "after a hit, error clear",
            "handle __close libftsbx.so", "handle __dup2 libftsbx.so", "handle _IO_fclose libftsbx.so",
            "handle __clone libftsbx.so", "handle __vfork libftsbx.so", "handle pclose libftsbx.so",
            ""], proc.stdout
        assert not shim.exists("a.txt")
    shim.roundtrip(b"%s a.txt" % exe, check)


def test_a_removed_file_kept_in_the_journal_is_not_changed_through_an_open_descriptor(shim):
    """rm of a file another descriptor holds open keeps its inode in the
    journal as its pre-image: a change through a descriptor opened to read
    or to append (a reopen of /dev/fd/N, ftruncate, fsetxattr, fchmod) would
    change the pre-image, whose whole bytes no record holds, so it is
    refused (one opened to write in place journaled them: test_shim_remove);
    the rewind puts back every file as it was."""
    for rel in ("f", "g", "h", "i"):
        shim.write(rel, f"original-{rel}\n")
    before = shim.snap()
    script = f"""exec 3<f 4<g; rm f g
: > /dev/fd/3 && echo truncated-f
echo more >> /dev/fd/4 && echo appended-g
{PY} - <<'PY'
import os
{ATTEMPT}h = os.open("h", os.O_WRONLY | os.O_APPEND)
os.unlink("h")
attempt("ftruncate", lambda: os.ftruncate(h, 3))
i = os.open("i", os.O_RDONLY)
os.unlink("i")
attempt("fsetxattr", lambda: os.setxattr(i, "user.added", b"x"))
attempt("fchmod", lambda: os.chmod(i, 0o600))
PY"""
    proc = shim.sh(script, rc=None, refusals_ok=True)
    out = proc.stdout.decode().split("\n")
    assert "truncated-f" not in out and "appended-g" not in out, proc.stdout
    assert {"ftruncate 13", "fsetxattr 13", "fchmod 13"} <= set(out), proc.stdout
    assert proc.stderr.count(b"a removed file whose pre-image the journal keeps") == 5, proc.stderr
    shim.verify()
    shim.rewind()
    assert_same(before, shim.snap())
