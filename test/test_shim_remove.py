"""Removals under the shim (issue 5, the rm -rf path): a file about to be
unlinked keeps its inode as objects/SEQ.ino through a hard link made from
the program's own directory descriptor and name, then the program's own call
removes the name. Each test removes entries through descriptors, directories
renamed or reached through symlinks meanwhile, hard links and xattrs, then
rewinds and finds the tree exactly as it was."""
import os

import pytest

from test_shim_lib import PY, Shim, q


@pytest.fixture
def shim(populated):
    return Shim(populated)


def py(script):
    return b"%s -c %s" % (PY.encode(), q(script))


def kept_inodes(shim):
    return sorted(n for n in os.listdir(os.path.join(shim.journal, b"objects")) if n.endswith(b".ino"))


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
