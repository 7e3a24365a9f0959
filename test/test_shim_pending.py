"""An in-place write's pre-image waits for the first write (shim/pending.c).

A file opened O_RDWR (or O_WRONLY without O_TRUNC) and only read costs no
capture at all; every way of writing through such a descriptor takes the
whole pre-image before the first byte changes: the write family, sendfile,
splice, copy_file_range, a shared mapping made writable later, ftruncate,
fallocate, stdio streams made on it, dprintf, POSIX AIO, syscall(), a dup
onto stdout, and the descriptor carried into another program (exec, vfork,
posix_spawn's file actions, SCM_RIGHTS). Each is run under the shim,
checked, rewound and compared with the whole tree (Shim.roundtrip).
"""
import os
import re
import shutil
import subprocess

import pytest

from test_shim_lib import PY, Shim

PYB = PY.encode()


@pytest.fixture
def shim(populated):
    return Shim(populated)


def content_records(sh):
    """The paths of the session's content records (a large file's parts,
    "PATH (bytes A..B)", as PATH)."""
    log = sh.txreplay("log", sh.journal).stdout.splitlines()
    return [re.sub(rb" \(bytes \d+\.\.\d+\)$", b"", line.split(b" content ", 1)[1].split(b"  ")[0])
            for line in log if b" content " in line]


C_WAYS = ["stdio", "_IO_fdopen", "dprintf", "stdout", "dupfd_onto_stdout", "aio", "lio", "mmap", "mmap_closed",
          "mmap_moved", "mremap_copy", "mmap_split", "madvise_remove", "syscall",
          "__write", "__pwrite64", "backtrace", "dup2_self", "failed_dups", "failed_close_range", "fcloseall",
          "syscall_dup", "syscall_fcntl", "__fcntl", "pidfd_getfd", "clone_vm_close", "thread_unshare_close",
          "_IO_popen", "splice_wait"]


@pytest.mark.parametrize("way", C_WAYS)
def test_c_library_ways_take_the_pre_image(shim, way):
    """Ways that write past a write() hook (stdio's internal write, AIO's
    threads, glibc's other names), before one (a mapping made writable by
    mprotect), through another descriptor made of it, or after a call that
    must not lose its mark; a splice that waits on a pipe whose writer
    changes the same directory does not wait forever (test/hostile/fdwrite.c)."""
    exe = shim.gcc("fdwrite", "fdwrite.c", flags=("-pthread",))
    if way == "madvise_remove":
        probe = os.path.join(shim.base, b"probe")
        with open(probe, "wb") as f:
            f.write(b"x" * 65536)
        if subprocess.run([exe, b"madvise_remove", probe]).returncode == 4:
            pytest.skip("this kernel does not punch holes through a read-only shared mapping")
    before = shim.read("big.bin")
    shim.roundtrip(b"timeout 60 %s %s big.bin" % (exe, way.encode()),
                   lambda _: shim.read("big.bin") != before or pytest.fail("not written"))
    assert content_records(shim) == [os.path.join(shim.ws, b"big.bin")]


@pytest.mark.parametrize("way", ["cx-moved", "cx-replaced", "cx-removed"])
def test_a_file_another_program_moved_since_the_open(shim, way):
    """The descriptor (O_CLOEXEC: no program takes it at its start) of a
    file another program renamed is journaled under the new name; one
    another program replaced or removed (its inode kept as the pre-image
    of that removal) is written as natively, its part saved under the
    journal's name for the kept inode (big.bin is a large file:
    test_shim_range.py; a small one's first write is refused, EACCES:
    test_a_small_file_another_program_removed). The rewind is exact
    either way."""
    exe = shim.gcc("fdwrite", "fdwrite.c", flags=("-pthread",))
    before = shim.snap()
    proc = shim.sh(b"%s %s big.bin" % (exe, way.encode()))
    assert b"ftsbx:" not in proc.stderr, proc.stderr
    if way == "cx-moved":
        assert shim.read("big.bin.moved")[:7] == b"PENDING"
        assert content_records(shim) == [os.path.join(shim.ws, b"big.bin.moved")]
    else:
        assert [b"/objects/" in p for p in content_records(shim)] == [True], content_records(shim)
    shim.rewind()
    from conftest import assert_same
    assert_same(before, shim.snap())


@pytest.mark.parametrize("way", ["cx-replaced", "cx-removed"])
def test_a_small_file_another_program_removed(shim, way):
    """A small file's first write saves the whole file: where another
    program removed or replaced it since the open (its inode kept as that
    removal's pre-image), the write is refused (EACCES), not made into
    the journal's copy."""
    exe = shim.gcc("fdwrite", "fdwrite.c", flags=("-pthread",))
    shim.write("small.bin", b"s" * 1000)
    before = shim.snap()
    proc = shim.sh(b"%s %s small.bin" % (exe, way.encode()), rc=3, refusals_ok=True)
    assert b"cannot change" in proc.stderr and b"ftsbx: refused" not in proc.stderr, proc.stderr
    shim.rewind()
    from conftest import assert_same
    assert_same(before, shim.snap())


PY_WAYS = {
    "write": "os.write(fd, W)",
    "pwrite": "os.pwrite(fd, W, 100)",
    "writev": "os.writev(fd, [W, W])",
    "pwritev": "os.pwritev(fd, [W], 5)",
    "pwritev2": "os.pwritev(fd, [W], 5, os.RWF_DSYNC)",
    "ftruncate": "os.ftruncate(fd, 3)",
    "posix_fallocate": "os.posix_fallocate(fd, 0, 400000)",
    "sendfile": "src = os.open('a.txt', os.O_RDONLY); os.sendfile(fd, src, 0, 6)",
    "copy_file_range": "src = os.open('a.txt', os.O_RDONLY); os.copy_file_range(src, fd, 6)",
    "splice": "r, w = os.pipe(); os.write(w, W); os.splice(r, fd, len(W))",
    "mmap": "import mmap; m = mmap.mmap(fd, 0); m[0:7] = W; m.flush(); m.close()",
    "dup": "os.write(os.dup(fd), W)",
    "dup2_high": "os.dup2(fd, 77); os.close(fd); os.write(77, W)",
    "fcntl_dupfd": "import fcntl; os.write(fcntl.fcntl(fd, fcntl.F_DUPFD, 200), W)",
    "syscall": "import ctypes; ctypes.CDLL(None).syscall(1, fd, W, len(W))",
    "threads": "import threading; ts = [threading.Thread(target=os.pwrite, args=(fd, W, i * 8)) for i in range(8)]; "
               "[t.start() for t in ts]; [t.join() for t in ts]",
    # the descriptor leaves this process: a child's table, another program
    "fork": "pid = os.fork()\nif pid == 0: os.write(fd, W); os._exit(0)\nos.waitpid(pid, 0)",
    "subprocess_stdout": "import subprocess; subprocess.run(['echo', 'PENDING'], stdout=fd, check=True)",
    "pass_fds": "import subprocess; subprocess.run(['sh', '-c', 'echo PENDING >&%d' % fd], pass_fds=[fd], check=True)",
    "exec": "pid = os.fork()\nif pid == 0:\n  os.set_inheritable(fd, True); "
            "os.execvp('sh', ['sh', '-c', 'printf PENDING >&%d' % fd])\nos.waitpid(pid, 0)",
    "posix_spawn_dup2": "os.waitpid(os.posix_spawnp('echo', ['echo', 'PENDING'], os.environ, "
                        "file_actions=[(os.POSIX_SPAWN_DUP2, fd, 1)]), 0)",
    "system": "os.set_inheritable(fd, True); os.system('printf PENDING >&%d' % fd)",
    # another process's pending descriptor, copied (it never wrote it)
    "pidfd_getfd_child": "import ctypes, time\nlibc = ctypes.CDLL(None, use_errno=True)\nr, w = os.pipe()\n"
                         "pid = os.fork()\nif pid == 0:\n  g = os.open('big.bin', os.O_RDWR)\n"
                         "  os.write(w, b'%d' % g); time.sleep(30); os._exit(0)\n"
                         "n = int(os.read(r, 10)); g = libc.syscall(438, os.pidfd_open(pid), n, 0)\n"
                         "assert g >= 0, ctypes.get_errno()\nos.write(g, W); os.kill(pid, 9); os.waitpid(pid, 0)",
    "scm_rights": "import socket, subprocess\na, b = socket.socketpair()\n"
                  "p = subprocess.Popen([sys.executable, '-c', 'import os, socket, sys; "
                  "s = socket.socket(fileno=int(sys.argv[1])); m, fds, _, _ = socket.recv_fds(s, 1, 1); "
                  "os.write(fds[0], b\"PENDING\")', str(b.fileno())], pass_fds=[b.fileno()])\n"
                  "socket.send_fds(a, [b'x'], [fd]); p.wait()",
}


@pytest.mark.parametrize("way", sorted(PY_WAYS))
def test_python_ways_take_the_pre_image(shim, way):
    script = "import os, sys\nW = b'PENDING'\nfd = os.open('big.bin', os.O_RDWR)\n%s\n" % PY_WAYS[way]
    with open(os.path.join(shim.base, b"way.py"), "w") as f:
        f.write(script)
    before = shim.read("big.bin")
    shim.roundtrip(b"%s %s/way.py" % (PYB, shim.base), lambda _: shim.read("big.bin") != before
                   or pytest.fail(f"{way}: big.bin not changed"))


SHELL_WAYS = {
    # bash opens <> O_RDWR; its builtins write through stdout's stdio
    "builtin_echo": b"exec 3<>a.txt; echo PENDING >&3",
    "builtin_printf_fd1": b"{ printf PENDING; } 1<>a.txt",
    "cat_into_fd": b"exec 3<>a.txt; printf PENDING | cat >&3",
    "dd_notrunc": b"printf PENDING | dd of=a.txt conv=notrunc status=none",
    "sqlite_update": b"sqlite3 db.sqlite 'update t set x = 2'",
}


@pytest.mark.parametrize("way", sorted(SHELL_WAYS))
def test_shell_ways_take_the_pre_image(shim, way):
    if way.startswith("sqlite") and not shutil.which("sqlite3"):
        pytest.skip("no sqlite3")
    if way.startswith("sqlite"):
        shim.setup(b"sqlite3 db.sqlite 'create table t(x); insert into t values (1)'")
    target = "db.sqlite" if way.startswith("sqlite") else "a.txt"
    before = shim.read(target)
    shim.roundtrip(SHELL_WAYS[way], lambda _: shim.read(target) != before or pytest.fail("not changed"))


READ_ONLY = {
    "fdwrite_read": None,   # the C driver's read way
    "python_rplus": b"%s -c 'f = open(\"big.bin\", \"r+b\"); f.read(); f.seek(0); f.close()'" % PYB,
    # bash's <> opens O_RDWR; builtins read fd 0 (stdin is no stdio writer)
    "bash_readwrite_redirection": b"{ read -N 4 x; } <>big.bin; exec 3<>src/mid.bin; read -N 4 x <&3",
    "sqlite_select": b"sqlite3 db.sqlite 'select count(*) from t' >/dev/null",
    # read-only shared mappings of a read-write descriptor (shim/mapped.c)
    "sqlite_select_mmap": b"sqlite3 db.sqlite 'pragma mmap_size = 1000000; select count(*) from t' >/dev/null",
    "python_mmap_access_read": b"%s -c 'import mmap; f = open(\"big.bin\", \"r+b\"); "
                               b"m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ); m[:10]; f.close(); m.close()'"
                               % PYB,
    "flock": b"flock big.bin true",
}


@pytest.mark.parametrize("way", sorted(READ_ONLY))
def test_opened_to_write_but_only_read_costs_no_capture(shim, way):
    """The whole point: no pre-image (no content record, no object) for a
    file opened to write and never written, and nothing for rewind to do."""
    script = READ_ONLY[way]
    if way == "fdwrite_read":
        script = b"%s read big.bin" % shim.gcc("fdwrite", "fdwrite.c")
    if way.startswith("sqlite"):
        if not shutil.which("sqlite3"):
            pytest.skip("no sqlite3")
        shim.setup(b"sqlite3 db.sqlite 'create table t(x); insert into t values (randomblob(400000))'")
    if way == "flock" and not shutil.which("flock"):
        pytest.skip("no flock")
    before = shim.snap()
    shim.sh(script)
    assert content_records(shim) == []
    objects = os.path.join(shim.journal, b"objects")
    assert not os.path.isdir(objects) or not any(files for _, _, files in os.walk(objects))
    assert shim.snap() == before


def test_written_after_a_rename_and_after_an_unlink(shim):
    """The pre-image is taken under the name the file has at the first
    write (renamed since the open), or kept with its inode (removed)."""
    script = (b"import os\n"
              b"fd = os.open('big.bin', os.O_RDWR); os.rename('big.bin', 'moved.bin'); os.write(fd, b'PENDING')\n"
              b"g = os.open('src/mid.bin', os.O_RDWR); os.unlink('src/mid.bin'); os.write(g, b'GONE')\n"
              b"h = os.open('a.txt', os.O_RDWR); os.rename('a.txt', 'b.txt'); os.rename('src/main.c', 'a.txt'); "
              b"os.write(h, b'OLD A'); os.write(os.open('a.txt', os.O_RDWR), b'OLD MAIN')\n")
    with open(os.path.join(shim.base, b"rn.py"), "wb") as f:
        f.write(script)

    def check(_):
        assert shim.read("moved.bin")[:7] == b"PENDING" and not shim.exists("src/mid.bin")
        assert shim.read("b.txt") == b"OLD A\n" and shim.read("a.txt")[:8] == b"OLD MAIN"
    shim.roundtrip(b"%s %s/rn.py" % (PYB, shim.base), check)


def test_many_descriptors_and_the_closed_ones(shim):
    """Numbers above the table are taken at the open; a closed pending
    number reused for a pipe writes to the pipe with nothing to take; dup2
    over a pending number forgets it."""
    script = (b"import os, resource\n"
              b"resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))\n"
              b"fds = [os.open('src/mid.bin', os.O_RDWR) for _ in range(1100)]\n"
              b"os.pwrite(fds[-1], b'HIGH', 0); os.closerange(fds[1], fds[-1] + 1)\n"
              b"fd = os.open('big.bin', os.O_RDWR); os.close(fd); r, w = os.pipe(); os.write(w, b'pipe')\n"
              b"fd = os.open('a.txt', os.O_RDWR); os.dup2(os.open('/dev/null', os.O_WRONLY), fd); os.write(fd, b'null')\n"
              b"fd = os.open('secret', os.O_RDWR); os.closerange(fd, fd + 1); os.close(fds[0])\n"
              b"os.write(os.open('empty', os.O_RDWR), b'now')\n")
    with open(os.path.join(shim.base, b"many.py"), "wb") as f:
        f.write(script)

    def check(_):
        assert shim.read("src/mid.bin")[:4] == b"HIGH" and shim.read("empty") == b"now"
        assert shim.read("a.txt") == b"hello\n" and shim.read("secret") == b"key=42\n"
    shim.roundtrip(b"%s %s/many.py" % (PYB, shim.base), check)
    assert sorted(content_records(shim)) == sorted(os.path.join(shim.ws, r) for r in (b"empty", b"src/mid.bin"))


# The journal cannot be written when the first write comes (its log/ went
# away, as in test_badinput.py: the root's refusal made it, a forked child
# has no segment yet): the write is refused (EIO), the file stays as it
# was, and the descriptor stays pending: the next write is refused too, not
# let through. A program that would inherit it is not started.
JOURNAL_GONE = """
fd = os.open("big.bin", os.O_RDWR)
""" + Shim.LOG_MADE_THEN_WAIT + """
pid = os.fork()
if pid == 0:
    for write in (lambda: os.write(fd, b"PENDING"), lambda: os.pwrite(fd, b"AGAIN", 9)):
        try:
            write()
            print("written", flush=True)
        except OSError as e:
            print(e.errno, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
try:
    subprocess.run(["sh", "-c", "printf X >&%d" % fd], pass_fds=[fd])
    print("started", flush=True)
except OSError as e:
    print(e.errno, flush=True)
"""


def test_first_write_refused_when_the_journal_cannot_be_written(shim):
    from conftest import assert_same
    before = shim.snap()
    _, out, err = shim.run_with_log_removed("import os\n" + JOURNAL_GONE)
    assert out.split() == [b"5", b"5", b"5"], (out, err)
    assert b"cannot journal" in err, err
    assert_same(before, shim.snap())


# The first write takes the pre-image while the program holds POSIX record
# locks on the file (fcntl, lockf): a close of any descriptor of the file
# drops them all, so the capture reads through the program's own
# descriptor (or, for a write-only one, a reader kept open until it is
# closed), never an open and close of the path. Another process checks the
# lock after each way of writing.
LOCKED = """
import fcntl, os, subprocess, sys
probe = "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR)\\n" \\
        "try: fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('lost')\\n" \\
        "except OSError: print('held')"
def held(path):
    return subprocess.run([sys.executable, "-c", probe, path], capture_output=True, text=True).stdout.strip()
out = []
f = open("big.bin", "r+b"); fcntl.lockf(f, fcntl.LOCK_EX); f.write(b"LOCKED"); f.flush()
out.append(held("big.bin"))
fd = os.open("src/mid.bin", os.O_WRONLY); fcntl.lockf(fd, fcntl.LOCK_EX); os.ftruncate(fd, 0); os.write(fd, b"4242\\n")
out.append(held("src/mid.bin"))
g = os.open("a.txt", os.O_RDWR); fcntl.lockf(g, fcntl.LOCK_EX)
import mmap; m = mmap.mmap(g, 0); m[0:2] = b"HI"; m.flush()
out.append(held("a.txt"))
print(" ".join(out))
os.close(fd)
"""


def test_the_first_write_keeps_the_programs_record_locks(shim):
    with open(os.path.join(shim.base, b"locked.py"), "w") as f:
        f.write(LOCKED)
    proc = shim.roundtrip(b"%s %s/locked.py" % (PYB, shim.base))
    assert proc.stdout.split() == [b"held", b"held", b"held"], proc.stdout


def test_sqlite_writers_in_two_processes_lose_nothing(shim):
    """sqlite's locks are fcntl locks on the database (and the -shm file in
    WAL mode): two writers of one database, each inserting 60 rows, end
    with 120 rows and no error, in both journal modes."""
    if not shutil.which("sqlite3"):
        pytest.skip("no sqlite3")
    for mode in ("wal", "delete"):
        shim.setup(b"rm -f db-%s.sqlite* && sqlite3 db-%s.sqlite 'pragma journal_mode=%s; create table t(v)' "
                   b">/dev/null" % (mode.encode(), mode.encode(), mode.encode()))
    script = b"""for mode in wal delete; do
  for k in 1 2; do (for i in $(seq 60); do sqlite3 -cmd '.timeout 20000' db-$mode.sqlite "insert into t values($i)" || echo "failed $?"; done) & done
  wait
done
sqlite3 db-wal.sqlite 'select count(*) from t'; sqlite3 db-delete.sqlite 'select count(*) from t'"""
    proc = shim.roundtrip(script, timeout=300)
    assert proc.stdout.split() == [b"120", b"120"], (proc.stdout, proc.stderr[-2000:])
