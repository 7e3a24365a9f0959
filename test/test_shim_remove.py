"""Removals under the shim (issue 5, the rm -rf path): a file about to be
unlinked keeps its inode as objects/D/SEQ.ino (D = SEQ // 100, a directory
made by the first removal that needs it). An unlink of a regular file is made
by the journal itself: its record, then the program's own directory
descriptor and name renamed to the object (one system call, where a hard
link and the program's unlink were two); where that rename fails for a
reason of its own (another mount), the hard link or a copy and the program's
own call decide, so the program sees its unlink's own error. Each test
removes entries through descriptors, directories renamed or reached through
symlinks meanwhile, hard links and xattrs, many files and from many processes
at once, as another user in sticky and read-only directories, across a bind
mount, with the file still open elsewhere, and killed between a record and
its rename, then rewinds and finds the tree exactly as it was. An emptied
directory the program removes is kept as objects/' next subdirectory, in
place of its rmdir, where no process likely stands in it."""
import contextlib
import json
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import Scratch, assert_same, last_seq
from test_shim_lib import PY, SHIM, Shim, in_mount_namespace, q

FANOUT = 100    # journal/format.h, J_OBJ_FANOUT


@pytest.fixture
def shim(populated):
    return Shim(populated)


def py(script):
    return b"%s -c %s" % (PY.encode(), q(script))


def object_dirs(shim):
    """objects/'s subdirectories: {D: [names in it]}. Everything in objects/
    is such a directory (format.h: no flat objects in a new session); a
    session that kept nothing yet has no objects/ (JI_LAZYDIRS)."""
    top = os.path.join(shim.journal, b"objects")
    if not os.path.exists(top):
        return {}
    return {d: os.listdir(os.path.join(top, d)) for d in os.listdir(top)}


def kept_inodes(shim):
    """The seqs of the kept inodes, each checked to be in its own subdirectory."""
    seqs = []
    for d, names in object_dirs(shim).items():
        for n in names:
            assert n.endswith((b".ino", b".gz")), n
            seq = int(n.split(b".")[0])
            assert int(d) == seq // FANOUT, f"objects/{d}/{n} is not in objects/{seq // FANOUT}/"
            if n.endswith(b".ino"):
                seqs.append(seq)
    return sorted(seqs)


def make_files(shim, n, where="many"):
    """N small files under WHERE, in directories of 50, set up without the shim."""
    shim.setup(b"for d in $(seq 0 %d); do mkdir -p %s/d$d; for f in $(seq 0 49); do "
               b"echo \"$d $f\" > %s/d$d/f$f; done; done" % ((n - 1) // 50, where.encode(), where.encode()))


def test_unlinkat_through_a_directory_descriptor(shim):
    """unlinkat(dirfd, name): a file, a hard link, a file with xattrs, a
    symlink, a fifo and a directory, each by its plain name."""
    def check(_):
        for rel in ("src/main.c", "src/hard2", "src/deep/er/est", "xattr.txt", "sym", "fifo", "hard1"):
            assert not shim.exists(rel), rel
        assert len(kept_inodes(shim)) == 5     # main.c, hard2, leaf.txt, xattr.txt, hard1
    shim.roundtrip(py("""
import os
src = os.open("src", os.O_RDONLY | os.O_DIRECTORY)
os.unlink("main.c", dir_fd=src)
os.unlink("hard2", dir_fd=src)
est = os.open("deep/er", os.O_RDONLY | os.O_DIRECTORY, dir_fd=src)
os.unlink("leaf.txt", dir_fd=os.open("est", os.O_RDONLY | os.O_DIRECTORY, dir_fd=est))
os.rmdir("est", dir_fd=est)
top = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
for name in ("xattr.txt", "sym", "fifo", "hard1"):
    os.unlink(name, dir_fd=top)
"""), check)


def test_unlinkat_in_a_directory_renamed_meanwhile(shim):
    """The descriptor's directory was renamed after it was opened: the file
    is recorded under the directory's new name, and the rewind puts it back
    before renaming the directory back."""
    def check(_):
        assert not shim.exists("src") and not shim.exists("moved/main.c") and shim.exists("moved/mid.bin")
    shim.roundtrip(py("""
import os
d = os.open("src", os.O_RDONLY | os.O_DIRECTORY)
os.rename("src", "moved")
os.unlink("main.c", dir_fd=d)
os.unlink("deep/er/est/leaf.txt", dir_fd=d)
"""), check)


def test_unlinkat_after_a_rename_above_several_open_directories(shim):
    """Descriptors of a directory, of one inside it and of one above it are
    open when the middle one is renamed: the descriptors at and below it
    are forgotten (their next use reads the kernel's name), the one above
    is kept, and each file is recorded under its name of the moment."""
    def check(_):
        assert not shim.exists("src/deep") and not shim.exists("moved/er/est/leaf.txt")
        assert not shim.exists("src/main.c") and shim.exists("moved/er")
    shim.roundtrip(py("""
import os
top = os.open("src", os.O_RDONLY | os.O_DIRECTORY)
deep = os.open("src/deep", os.O_RDONLY | os.O_DIRECTORY)
est = os.open("src/deep/er/est", os.O_RDONLY | os.O_DIRECTORY)
os.rename("src/deep", "moved")
os.unlink("leaf.txt", dir_fd=est)
os.rmdir("est", dir_fd=os.open("er", os.O_RDONLY | os.O_DIRECTORY, dir_fd=deep))
os.unlink("main.c", dir_fd=top)
"""), check)


def test_unlinkat_through_a_symlinked_directory(shim):
    """A descriptor opened through a symlink to a directory, and a relative
    path through it: the record names the real directory."""
    shim.setup("ln -s src/deep linkdir")

    def check(_):
        assert not shim.exists("src/deep/er/est/leaf.txt") and not shim.exists("src/main.c")
    shim.roundtrip(py("""
import os
d = os.open("linkdir/er", os.O_RDONLY | os.O_DIRECTORY)
os.unlink("est/leaf.txt", dir_fd=d)
os.unlink("linkdir/../main.c")
"""), check)


def test_rm_of_hard_links_and_xattrs(shim):
    """rm of both names of a hard-linked file and of a file with xattrs: the
    rewind brings back one inode under both names and the exact xattrs."""
    def check(_):
        assert not shim.exists("hard1") and not shim.exists("src/hard2") and not shim.exists("xattr.txt")
    shim.roundtrip(b"rm hard1 src/hard2 xattr.txt", check)


def test_failed_unlink_leaves_nothing_to_undo(shim):
    """unlink of a directory fails (EISDIR) and of a missing name (ENOENT):
    nothing changed, and the rewind of the rest still comes out exact."""
    def check(proc):
        assert proc.stdout == b"21 2\n" and shim.exists("emptydir") and not shim.exists("a.txt")
    shim.roundtrip(py("""
import errno, os
got = []
for name in ("emptydir", "no-such-file"):
    try:
        os.unlink(name)
    except OSError as e:
        got.append(e.errno)
os.unlink("a.txt")
print(*got)
"""), check)


def test_rm_rf_spreads_kept_inodes_over_subdirectories(shim):
    """rm -rf of 600 files: every file's inode is kept, each in the
    subdirectory of its seq, and no subdirectory holds more than 100."""
    make_files(shim, 600)

    def check(_):
        assert not shim.exists("many")
        assert len(kept_inodes(shim)) == 600
        dirs = object_dirs(shim)
        assert len(dirs) >= 6 and max(len(names) for names in dirs.values()) <= FANOUT, \
            {d: len(n) for d, n in dirs.items()}
    shim.roundtrip(b"rm -rf many", check)


def test_first_removal_makes_its_object_subdirectory(shim):
    """A session that has removed nothing has no objects/ (format.h:
    JI_LAZYDIRS); the first removal makes it and the subdirectory its seq
    names, and the rewind uses it."""
    shim.sh(b"true")                   # the session exists, objects/ not yet
    assert not os.path.exists(os.path.join(shim.journal, b"objects"))
    before = shim.snap()

    def check(_):
        (seq,) = kept_inodes(shim)
        assert list(object_dirs(shim)) == [b"%d" % (seq // FANOUT)]
    shim.roundtrip(b"rm src/main.c", check, before=before)


def test_removal_into_subdirectories_another_process_made(shim):
    """The subdirectories of the next seqs exist already, made by another
    writer of the session: the kept inodes go into them as they are."""
    shim.sh(b"true")
    seq = last_seq(shim.journal)
    top = os.path.join(shim.journal, b"objects")
    os.makedirs(top, 0o700, exist_ok=True)
    for d in range(seq // FANOUT, seq // FANOUT + 3):
        os.mkdir(os.path.join(top, b"%d" % d), 0o700)
    before = shim.snap()

    def check(_):
        assert len(kept_inodes(shim)) == 3
    shim.roundtrip(b"rm a.txt src/main.c hard1", check, before=before)


def test_concurrent_removers_share_subdirectories(shim):
    """Eight processes remove 400 files at once, one file per rm, so that
    several of them race to make each new subdirectory: none fails, every
    inode is kept, and the rewind gives the whole tree back."""
    make_files(shim, 400)

    def check(_):
        assert not any(os.listdir(shim.p(b"many/d%d" % d)) for d in range(8))
        assert len(kept_inodes(shim)) == 400
    shim.roundtrip(b"find many -type f -print0 | xargs -0 -n 1 -P 8 rm", check)


def test_xattrs_of_a_kept_inode_changed_through_another_name(shim):
    """The kept inode's xattrs are its own (the record lists none): changed
    through its other hard link after the removal, they are put back by that
    link's own record, and the removed name comes back with them."""
    shim.setup(b"%s -c %s" % (PY.encode(), q("import os; os.setxattr('hard1', 'user.k', b'before')")))

    def check(_):
        assert not shim.exists("hard1")
        assert os.getxattr(shim.p("src/hard2"), "user.k") == b"after"
        assert os.getxattr(shim.p("src/hard2"), "user.new") == b"x"
    shim.roundtrip(py("""
import os
os.unlink("hard1")
os.setxattr("src/hard2", "user.k", b"after")
os.setxattr("src/hard2", "user.new", b"x")
"""), check)


def test_removal_is_refused_when_its_object_subdirectory_cannot_be(shim):
    """Something that is not a directory where the next objects/D/ belongs:
    the inode cannot be kept, so the unlink is refused and nothing changes
    (the journal's ENOTDIR is not the program's own call failing)."""
    shim.sh(b"true")
    seq = last_seq(shim.journal)
    os.makedirs(os.path.join(shim.journal, b"objects"), 0o700, exist_ok=True)
    for d in range(seq // FANOUT, seq // FANOUT + 3):
        with open(os.path.join(shim.journal, b"objects", b"%d" % d), "wb") as f:
            f.write(b"in the way\n")
    before = shim.snap()
    proc = shim.sh(b"rm src/main.c", rc=1, refusals_ok=True)
    assert b"ftsbx: cannot journal a change of" in proc.stderr and b"src/main.c" in proc.stderr, proc.stderr
    assert shim.exists("src/main.c")
    assert not kept_inodes_anywhere(shim)
    shim.rewind()
    assert_same(before, shim.snap())


def kept_inodes_anywhere(shim):
    return [os.path.join(d, n) for d, _, names in os.walk(os.path.join(shim.journal, b"objects"))
            for n in names if n.endswith(b".ino")]


# --- a removed directory kept as a subdirectory of objects/ ---------------------------

def test_rm_rf_keeps_its_removed_directories_as_object_subdirectories(shim):
    """rm -rf of 600 files in 12 directories: each directory, emptied, is
    renamed into objects/ as a subdirectory no seq has needed yet, in place
    of its rmdir (and of a mkdir for the next objects): objects/ holds the
    removed directories' own inodes, holding the kept files, and no more
    than two subdirectories made anew. Read-only directories (root may
    empty them) are kept too, made writable there. The rewind makes each
    directory again, with its mode, times and xattrs."""
    make_files(shim, 600)
    readonly = os.geteuid() == 0
    if readonly:
        shim.setup(b"chmod 555 many/d3 many/d7 && setfattr -n user.k -v v many/d5 && touch -d 2001-01-01 many/d*")
    inodes = {os.stat(shim.p(b"many/d%d" % d)).st_ino for d in range(12)} | {os.stat(shim.p("many")).st_ino}

    def check(_):
        assert not shim.exists("many")
        assert len(kept_inodes(shim)) == 600
        top = os.path.join(shim.journal, b"objects")
        subdirs = {os.stat(os.path.join(top, d)).st_ino: d for d in os.listdir(top)}
        assert inodes <= set(subdirs), "a removed directory was not kept"
        assert len(set(subdirs) - inodes) <= 2, f"{len(set(subdirs) - inodes)} subdirectories made anew"
        for d in subdirs.values():
            assert os.stat(os.path.join(top, d)).st_mode & 0o7777 == 0o700, d
    shim.roundtrip(b"rm -rf many", check)


# Each case runs natively and under the shim in a directory of its own (the
# name printed is relative to it); what it prints must be the same.
KEPT_DIR_CASES = {
    "not empty": b"""mkdir -p d/e; touch d/f; rmdir d 2>&1; rmdir d/e d 2>&1; echo $?; ls d""",
    "dot names": b"""mkdir -p d/e; rmdir d/. d/e/. 2>&1; rmdir d/e/.. 2>&1; rmdir d/e/ && rmdir d/ && echo gone; ls""",
    "a symlink": b"""mkdir d; ln -s d l; rmdir l 2>&1; rmdir l/ 2>&1; ls""",
    # the process itself, then its parent (the shell), stand in the removed directory
    "own cwd": b"""mkdir d; %s -c '
import os
os.chdir("d"); os.rmdir("../d")
for f in (os.getcwd, lambda: os.listdir("."), lambda: open("f", "w")):
    try: print(f())
    except OSError as e: print(e.errno)'; ls""" % PY.encode(),
    "parent's cwd": b"""mkdir d; cd d; rmdir ../d; ls -a; echo $?; touch f 2>&1 | sed 's/.*: //'; mkdir e 2>&1 | sed 's/.*: //'""",
    "nested shells": b"""mkdir d; cd d; sh -c 'rmdir ../d; ls -a; touch f' 2>&1 | sed 's/.*: //'""",
}


@pytest.mark.parametrize("case", sorted(KEPT_DIR_CASES))
def test_rmdir_where_a_kept_directory_would_differ(shim, case):
    """rmdir's own failures (not empty, ".", "..", a symlink) and a process
    standing in the removed directory (itself, its shell): the same output
    natively and under the shim, and the rewind gives the tree back."""
    script = KEPT_DIR_CASES[case]
    shim.setup(b"mkdir native wrapped")
    native = shim.sh(b"cd native && " + script, preload=False, rc=None)
    before = shim.snap()
    wrapped = shim.sh(b"cd wrapped && " + script, rc=None)
    assert (wrapped.returncode, wrapped.stdout) == (native.returncode, native.stdout), wrapped.stderr
    shim.rewind()
    assert_same(before, shim.snap())


CREATOR = """
import os, sys, time
go, back = open("go", "rb", buffering=0), open("back", "wb", buffering=0)
made = []
while go.read(1):
    time.sleep(0.005)
    try:
        os.close(os.open("d/f%d" % len(made), os.O_CREAT | os.O_WRONLY, 0o644))
        made.append("d/f%d" % len(made))
    except FileNotFoundError:
        pass
    back.write(b"x")
open(sys.argv[1], "w").write("\\n".join(made))
"""

REMOVER = """
import os
go, back = open("go", "wb", buffering=0), open("back", "rb", buffering=0)
refused = 0
for i in range(4):      # each takes two of the eight subdirectories the journal takes ahead
    os.mkdir("d")
    go.write(b"x")
    try:
        os.rmdir("d")
    except OSError:
        refused += 1
    back.read(1)
    if os.path.isdir("d"):
        for n in os.listdir("d"):
            os.rename("d/" + n, "kept-" + n)
        os.rmdir("d")
print(refused)
"""


def test_a_directory_filled_while_it_is_removed_loses_nothing(shim):
    """The journal looks at a directory before it takes it, and again once
    it is moved. strace slows each getdents64 of the remover down by 20 ms,
    and a process outside the session (whose creations take no path lock
    of the journal's) makes a file in d 5 ms into each rmdir: the
    directory, empty when looked at first, holds a file once moved, and is
    put back with it (the rmdir fails ENOTEMPTY, as it would have). Every
    file made is still there at the end, none went into the journal."""
    strace = shutil.which("strace")
    if not strace:
        pytest.skip("no strace")
    shim.setup(b"mkfifo go back")
    made = os.path.join(shim.base, b"made")
    proc = shim.sh(b"%s %s & %s -o /dev/null -e trace=getdents64 -e inject=getdents64:delay_exit=20000 "
                   b"env LD_PRELOAD=%s FTSBX_JOURNAL=%s %s; wait" % (
                       py(CREATOR), made, strace.encode(), SHIM.encode(), shim.journal, py(REMOVER)),
                   preload=False)
    with open(made, "rb") as f:
        made = f.read().split()
    assert int(proc.stdout) >= 3 and len(made) == int(proc.stdout), (proc.stdout, made)
    for m in made:
        assert shim.exists(b"kept-" + os.path.basename(m)), m
    assert not [n for d, _, names in os.walk(os.path.join(shim.journal, b"objects"))
                for n in names if not n.endswith((b".ino", b".gz"))]


def test_a_directory_kept_while_the_session_removes_files_holds_only_its_objects(shim):
    """The journal takes a directory under a name of its own first, and
    makes it objects/D only once it is known empty there: strace slows each
    getdents64 of the rmdir by 0.3 s, and another process of the session
    removes 300 files while the moved directory is looked at (their objects
    pass the seq range of the next subdirectories).
    The rmdir succeeds, no object of the journal is ever in the workspace,
    and the rewind gives all back (the journal once took those objects for
    entries made in the directory, and moved them into the workspace)."""
    strace = shutil.which("strace")
    if not strace:
        pytest.skip("no strace")
    make_files(shim, 300)
    shim.setup(b"mkdir e")
    before = shim.snap()
    proc = shim.sh(b"(sleep 0.7; %s) & %s -o /dev/null -f -e trace=getdents64 "
                   b"-e inject=getdents64:delay_enter=300000 env LD_PRELOAD=%s FTSBX_JOURNAL=%s rmdir e; "
                   b"echo rmdir=$?; wait" % (b"rm -rf many", strace.encode(), SHIM.encode(), shim.journal))
    assert proc.stdout == b"rmdir=0\n", proc
    assert not shim.exists("e") and not shim.exists("many")
    assert len(kept_inodes(shim)) == 300
    shim.rewind()
    assert_same(before, shim.snap())


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make another user's directory")
def test_a_directory_of_another_user_or_held_open_is_removed_not_kept(shim):
    """Root removes an empty directory owned by another user (kept, its
    owner could reach the journal from inside it), and a process removes a
    directory it holds open (kept, its descriptor would lead into the
    journal): both are removed as rmdir does, the open one then reads as
    removed through the descriptor, natively and under the shim alike."""
    shim.setup(b"mkdir theirs native wrapped && chown 65534 theirs")
    ino = os.stat(shim.p("theirs")).st_ino
    script = b"""%s -c '
import os
for flags in (os.O_RDONLY | os.O_DIRECTORY, os.O_RDONLY):
    os.mkdir("d"); fd = os.open("d", flags)
    os.rmdir("d")
    print(os.fstat(fd).st_nlink, os.listdir(fd))
    for f in (lambda: os.open("x", os.O_CREAT | os.O_WRONLY, dir_fd=fd), lambda: os.mkdir("s", dir_fd=fd)):
        try: f()
        except OSError as e: print(e.errno)'""" % PY.encode()
    native = shim.sh(b"cd native && " + script, preload=False)
    before = shim.snap()
    wrapped = shim.sh(b"rmdir theirs && cd wrapped && " + script)
    assert wrapped.stdout == native.stdout == b"0 []\n2\n2\n" * 2, (native.stdout, wrapped.stdout)
    top = os.path.join(shim.journal, b"objects")
    assert ino not in {os.stat(os.path.join(top, d)).st_ino for d in object_dirs(shim)}
    shim.rewind()
    assert_same(before, shim.snap())


# --- the unlink made by the journal (a rename into objects/) -------------------------

def test_rm_renames_each_file_into_objects(shim):
    """rm -rf of 150 files: one renameat per file, into objects/, and no
    hard link or unlink of a file (the directories are still rmdir'd)."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    make_files(shim, 150)
    trace = os.path.join(shim.base, b"trace")
    before = shim.snap()
    env = shim.env(preload=False)
    proc = subprocess.run([b"strace", b"-f", b"-qq", b"-o", trace, b"-e", b"trace=linkat,renameat,unlinkat",
                           b"-E", b"LD_PRELOAD=" + SHIM.encode(),
                           b"-E", b"FTSBX_JOURNAL=" + shim.journal, b"rm", b"-rf", b"many"],
                          cwd=shim.ws, env=env, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    with open(trace, "rb") as f:
        calls = [line for line in f.read().splitlines() if b"(" in line]
    renames = [c for c in calls if b"renameat(" in c and b'.ino"' in c and b"= 0" in c]
    assert len(renames) == 150, calls[:20]
    files = [c for c in calls if b'"f' in c]       # the files are f0 ... f49 (the session's own are not)
    assert not [c for c in files if b"linkat(" in c and b"unlinkat(" not in c], files[:20]
    assert not [c for c in files if b"unlinkat(" in c], files[:20]
    assert len(kept_inodes(shim)) == 150
    shim.rewind()
    assert_same(before, shim.snap())
    shim.verify()


ERRNO_SCRIPT = """
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)

def c_call(fn, *args):
    if fn(*args) < 0:
        raise OSError(ctypes.get_errno(), fn.__name__)

out = []
def t(name, f, *a):
    try:
        f(*a)
        out.append(name + ":ok")
    except OSError as e:
        out.append(name + ":" + errno.errorcode[e.errno])

d = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
t("missing", os.unlink, "nope")
t("dir", os.unlink, "dir")
t("dir-at", c_call, libc.unlinkat, d, b"dir", 0)
t("trailing-slash", os.unlink, "file1/")
t("through-a-file", os.unlink, "file1/x")
t("empty", os.unlink, "")
t("dot", os.unlink, ".")
t("bad-flags", c_call, libc.unlinkat, d, b"file1", 0x1000)
t("remove-empty-dir", c_call, libc.remove, b"emptydir")
t("remove-full-dir", c_call, libc.remove, b"dir")
t("remove-file", c_call, libc.remove, b"file2")
t("remove-missing", c_call, libc.remove, b"nope")
t("symlink-to-dir-slash", os.unlink, "dirlink/")
t("symlink-to-dir", os.unlink, "dirlink")
t("fifo", os.unlink, "fifo")
t("file", os.unlink, "file1")
t("file-again", os.unlink, "file1")
t("relative-at", c_call, libc.unlinkat, d, b"dir/inner", 0)
t("dot-dot", os.unlink, "dir/../file3")
t("hard-link", os.unlink, "hard-a")
t("absolute", os.unlink, os.path.abspath("file4"))
print(" ".join(out))
"""

ERRNO_TREE = (b"mkdir -p dir emptydir && echo in > dir/inner && ln -s dir dirlink && mkfifo fifo && "
              b"for f in file1 file2 file3 file4 file5; do echo $f > $f; done && echo h > hard-a && ln hard-a hard-b && "
              b"touch -d 2001-02-03 dir file* hard-a . && chmod 600 file3")


def test_unlink_fails_as_the_real_call_and_rewinds(shim):
    """Every way an unlink, unlinkat or remove() can go, run natively in one
    copy of a tree and under the shim in another: the same result, errno for
    errno, one by one; and the rewind gives the tree back."""
    for where in (b"native", b"wrapped"):
        shim.setup(b"mkdir %s && cd %s && %s" % (where, where, ERRNO_TREE))
    native = shim.sh(b"cd native && %s" % py(ERRNO_SCRIPT), preload=False)
    assert b"file:ok" in native.stdout and b"dir:EISDIR" in native.stdout, native.stdout

    def check(proc):
        assert proc.stdout == native.stdout
        assert not shim.exists("wrapped/file1") and shim.exists("wrapped/hard-b")
    shim.roundtrip(b"cd wrapped && %s" % py(ERRNO_SCRIPT), check)


def test_unlink_of_an_immutable_file_and_in_an_append_only_directory(shim):
    """EPERM for both, natively and under the shim (the rename into objects/
    is refused by the same check as the unlink), and nothing is removed.
    The attributes are cleared before the rewind: a file that stays
    immutable cannot be given its times back (nor could it before)."""
    shim.setup(b"mkdir ro && echo x > ro/f && echo y > frozen && touch -d 2001-02-03 ro")
    if shim.sh(b"chattr +i frozen && chattr +a ro", rc=None, preload=False).returncode:
        pytest.skip("this filesystem has no immutable or append-only attribute")
    try:
        script = py("""
import os
for p in ("frozen", "ro/f"):
    try:
        os.unlink(p)
    except OSError as e:
        print(p, e.errno)
""")
        native = shim.sh(script, preload=False)
        assert native.stdout == b"frozen 1\nro/f 1\n"
        before = shim.snap()
        assert shim.sh(script).stdout == native.stdout
        assert_same(before, shim.snap())
    finally:
        shim.setup(b"chattr -i frozen; chattr -a ro")
    shim.rewind()
    assert_same(before, shim.snap())


@contextlib.contextmanager
def user_scratch():
    """A scratch that the user nobody (65534) can reach, its workspace and
    session directory its own; removed afterwards."""
    base = tempfile.mkdtemp(prefix="ftsbx-user-", dir="/tmp")
    try:
        os.chmod(base, 0o755)
        sc = Scratch(base)
        for d in (sc.ws, os.path.dirname(sc.sess)):
            os.chown(d, 65534, 65534)
        yield Shim(sc)
    finally:
        shutil.rmtree(base)


USER_SCRIPT = """
import os
for p in ("sticky/roots", "sticky/mine", "sticky/dir-mine/roots", "readonly/f", "open/roots", "open/mine"):
    try:
        os.unlink(p)
        print(p, "ok")
    except OSError as e:
        print(p, e.errno)
"""


def test_unlink_as_a_user_in_sticky_and_read_only_directories():
    """As nobody: in a sticky directory only its own files go (EPERM for
    root's, unless the directory is nobody's), none in a directory it cannot
    write (EACCES), root's files in a directory it can write; natively and
    under the shim alike, and the rewind gives everything back."""
    with user_scratch() as shim:
        for where in (b"native", b"wrapped"):
            shim.setup(b"""mkdir -p {w}/sticky/dir-mine {w}/readonly {w}/open && chmod 1777 {w}/sticky && \\
                chmod 777 {w}/open && chown 65534 {w}/sticky/dir-mine && chmod 1777 {w}/sticky/dir-mine && \\
                for f in sticky/roots sticky/mine sticky/dir-mine/roots readonly/f open/roots open/mine; do \\
                    echo $f > {w}/$f; chmod 666 {w}/$f; done && \\
                chown 65534 {w}/sticky/mine {w}/open/mine && touch -d 2001-02-03 {w}/*/""".replace(
                b"{w}", where))
        user = b"setpriv --reuid=65534 --regid=65534 --clear-groups"
        native = shim.sh(b"cd native && %s %s" % (user, py(USER_SCRIPT)), preload=False)
        assert b"sticky/roots 1\n" in native.stdout and b"readonly/f 13\n" in native.stdout, native.stdout
        assert b"sticky/dir-mine/roots ok" in native.stdout and b"open/roots ok" in native.stdout
        before = shim.snap()
        wrapped = shim.sh(b"cd wrapped && %s env LD_PRELOAD=%s FTSBX_JOURNAL=%s %s" % (
            user, SHIM.encode(), shim.journal, py(USER_SCRIPT)), preload=False)
        assert wrapped.stdout == native.stdout, wrapped.stderr
        assert b"ftsbx: " not in wrapped.stderr, wrapped.stderr
        assert os.stat(shim.journal).st_uid == 65534
        shim.rewind()
        assert_same(before, shim.snap())


def bind_mounted(shim, rel):
    """SHIM's programs and txreplay in a mount namespace of their own where
    REL is bind-mounted onto itself: the same filesystem (the same st_dev)
    as the journal, but another mount, which no rename or link crosses."""
    return in_mount_namespace(shim, ["--bind", shim.p(rel), shim.p(rel)], "bind-mount")


def test_unlink_across_a_bind_mount_keeps_a_copy(shim):
    """The workspace's files on another mount of the journal's filesystem:
    the rename into objects/ fails (EXDEV) where the unlink does not, so its
    record is cut off again and the file's bytes are kept instead, one record
    per file; the program's errors are its own, and the rewind is exact."""
    shim.setup(b"mkdir sub && echo a > sub/a && echo b > sub/b && mkdir sub/d")
    before = shim.snap()
    with bind_mounted(shim, "sub"):
        proc = shim.sh(py("""
import os
for p in ("sub/a", "sub/b", "sub/d", "sub/missing"):
    try:
        os.unlink(p)
        print(p, "ok")
    except OSError as e:
        print(p, e.errno)
"""))
        assert proc.stdout == b"sub/a ok\nsub/b ok\nsub/d 21\nsub/missing 2\n"
        log = [json.loads(line) for line in shim.txreplay("log", shim.journal, "--json").stdout.splitlines()]
        removes = [r["path"] for r in log if r["op"] == "remove"]
        assert sorted(removes) == sorted(os.fsdecode(shim.p(p)) for p in ("sub/a", "sub/b", "sub/d")), removes
        assert not kept_inodes_anywhere(shim)
        shim.rewind()
        assert_same(before, shim.snap())
        shim.verify()


def test_a_removed_file_is_still_reached_through_its_descriptors(shim):
    """A file removed while a shell holds it open is read and written through
    /dev/fd/N, /proc/self/fd/N and /dev/stdin, changed through the descriptor
    (ftruncate, fchmod), and cannot be linked again (ENOENT, as natively):
    the descriptor shows its object's name, not 'NAME (deleted)'; the shim
    lets the program do what it could do with an unlinked file, refuses
    nothing, and the rewind gives the file back."""
    script = b"""exec 3<>a.txt 4<a.txt; rm a.txt
cat /dev/fd/3 /proc/self/fd/4 > seen; cat < /dev/stdin <&4 >> seen; echo more >> /dev/fd/3
%s""" % py("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
os.ftruncate(3, 2)
os.fchmod(3, 0o600)
print("link", libc.linkat(3, b"", -100, b"relinked", 0x1000), ctypes.get_errno())
try:
    os.link("/proc/self/fd/3", "relinked")
except OSError as e:
    print("link", e.errno)
""")

    def check(proc):
        assert proc.stdout == plain.stdout
        with open(shim.p("seen"), "rb") as f:
            assert f.read().count(b"\n") == 3 * len(content.splitlines())
        assert not shim.exists("a.txt") and not shim.exists("relinked")
    content = shim.read("a.txt")
    native = os.path.join(shim.base, b"native")
    os.mkdir(native)
    shutil.copy2(shim.p("a.txt"), native)
    plain = subprocess.run([b"/bin/bash", b"-c", script], cwd=native, capture_output=True,
                           env=shim.env(preload=False))
    assert plain.stdout == b"link -1 2\nlink 18\n", plain
    shim.roundtrip(script, check)


@pytest.mark.parametrize("via", ["/proc/self/root%s", "/proc/self/cwd/%s", "/proc/thread-self/root%s"])
def test_a_kept_inode_is_not_read_through_other_proc_paths(shim, via):
    """Only a descriptor's own link (/proc/PID/fd/N, /dev/fd/N) reaches a
    removed file kept in objects/: /proc/self/root, /proc/self/cwd and the
    like spell the whole tree, and the journal stays off limits there."""
    shim.sh(b"rm a.txt")
    [kept] = kept_inodes_anywhere(shim)
    target = kept if via.startswith("/proc/self/cwd") is False else os.path.relpath(kept, shim.ws)
    path = via.encode() % target
    proc = shim.sh(b"cat %s" % q(path), rc=None, refusals_ok=True)
    assert proc.returncode != 0 and b"ftsbx: refused" in proc.stderr, proc
    assert proc.stdout == b""
    shim.rewind()


def test_rm_killed_between_a_record_and_its_rename_rewinds_exactly(shim):
    """rm -rf killed (SIGKILL) at its 40th rename into objects/, which never
    happens: the record of that file is in the journal, its object is not,
    and the file is still where it was; the rewind leaves it exactly so and
    brings back every file removed before it."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    make_files(shim, 150)
    before = shim.snap()
    proc = subprocess.run([b"strace", b"-f", b"-qq", b"-o", b"/dev/null", b"-e", b"trace=renameat",
                           b"-e", b"inject=renameat:error=EIO:signal=KILL:when=40",
                           b"-E", b"LD_PRELOAD=" + SHIM.encode(),
                           b"-E", b"FTSBX_JOURNAL=" + shim.journal, b"rm", b"-rf", b"many"],
                          cwd=shim.ws, env=shim.env(preload=False), capture_output=True)
    assert proc.returncode != 0
    log = [json.loads(line) for line in shim.txreplay("log", shim.journal, "--json").stdout.splitlines()]
    removes = [r for r in log if r["op"] == "remove"]
    kept = kept_inodes(shim)
    left = [r for r in removes if r["seq"] not in kept]
    assert len(left) == 1 and os.path.exists(left[0]["path"]), (left, len(removes), len(kept))
    assert 30 <= len(kept) < 40, len(kept)      # a few renames went to a new objects/D/ twice
    shim.rewind()
    assert_same(before, shim.snap())


def removal_paths(shim):
    """{seq: path} of the session's remove records."""
    out = shim.txreplay("log", "--json", shim.journal).stdout.splitlines()
    return {r["seq"]: os.fsencode(r["path"]) for r in map(json.loads, out) if r["op"] == "remove"}


def object_of(shim, seq):
    return os.path.join(shim.journal, b"objects", b"%d" % (seq // FANOUT), b"%d.ino" % seq)


def test_verify_takes_a_removal_stopped_before_its_rename_for_none(shim):
    """A process stopped between a removal's record and the rename into
    objects/ leaves the record, no object, and the file where it was (the
    same inode): txreplay verify says ok, and the rewind finds nothing to
    undo there (the state is made here by renaming the object back)."""
    before = shim.snap()
    shim.sh(b"rm a.txt src/main.c")
    paths = removal_paths(shim)
    seq = min(paths)
    os.rename(object_of(shim, seq), paths[seq])                 # the rename that never happened
    v = shim.verify()
    assert v.stdout.startswith(b"ok:"), v.stdout
    shim.rewind()
    assert_same(before, shim.snap())


def test_verify_reports_a_lost_object_of_a_removed_file(shim):
    """The object of a file that is gone is the only copy of it: lost, it is
    damage, and verify names it."""
    shim.sh(b"rm a.txt")
    (seq,) = removal_paths(shim)
    os.unlink(object_of(shim, seq))
    v = shim.txreplay("verify", shim.journal, rc=None)
    assert v.returncode != 0 and b"%d.ino" % seq in v.stdout, v.stdout
