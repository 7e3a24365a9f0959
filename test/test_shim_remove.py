"""Removals under the shim (issue 5, the rm -rf path): a file about to be
unlinked keeps its inode as objects/D/SEQ.ino (D = SEQ // 100, a directory
made by the first removal that needs it) through a hard link made from the
program's own directory descriptor and name, then the program's own call
removes the name. Each test removes entries through descriptors, directories
renamed or reached through symlinks meanwhile, hard links and xattrs, many
files and from many processes at once, then rewinds and finds the tree
exactly as it was."""
import os

import pytest

from conftest import assert_same, last_seq
from test_shim_lib import PY, Shim, q

FANOUT = 100    # journal/format.h, J_OBJ_FANOUT


@pytest.fixture
def shim(populated):
    return Shim(populated)


def py(script):
    return b"%s -c %s" % (PY.encode(), q(script))


def object_dirs(shim):
    """objects/'s subdirectories: {D: [names in it]}. Everything in objects/
    is such a directory (format.h: no flat objects in a new session)."""
    top = os.path.join(shim.journal, b"objects")
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
    """A session that has removed nothing has no subdirectory in objects/;
    the first removal makes the one its seq names, and the rewind uses it."""
    shim.sh(b"true")                   # the session exists, objects/ is empty
    assert object_dirs(shim) == {}
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
