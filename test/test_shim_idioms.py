"""Idioms of real tools beyond test_shim_programs.py, each run under the
shim, checked for what it did, rewound and compared with the whole tree as
it was (Shim.roundtrip): space management (fallocate's modes), ACLs and
xattrs, editors' save dances, perl's and python's and node's and java's file
APIs, patch, archives with symlinked directories, async subprocesses, mv
across filesystems."""
import os

import pytest

from test_shim_lib import PY, Shim

PYB = PY.encode()


@pytest.fixture
def shim(populated):
    return Shim(populated)


def size(sh, rel):
    return os.lstat(sh.p(rel)).st_size


SPAWN_ACTIONS = b"""
import os
for argv, actions in ((["true"], [(os.POSIX_SPAWN_OPEN, 1, "a.txt", os.O_WRONLY | os.O_TRUNC, 0)]),
                      (["echo", "x"], [(os.POSIX_SPAWN_OPEN, 1, "new.txt", os.O_WRONLY | os.O_CREAT, 0o600)]),
                      (["echo", "y"], [(os.POSIX_SPAWN_OPEN, 1, "secret", os.O_WRONLY | os.O_APPEND, 0)])):
    os.waitpid(os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions), 0)
"""

# An O_APPEND descriptor that writes in place after all: its flag cleared,
# RWF_NOAPPEND, a shared mapping of a+ (fopen's append-and-read).
APPEND_IN_PLACE = b"""
import fcntl, mmap, os
fd = os.open("a.txt", os.O_WRONLY | os.O_APPEND)
fcntl.fcntl(fd, fcntl.F_SETFL, 0)
os.pwrite(fd, b"XX", 0)
os.close(fd)
fd = os.open("src/main.c", os.O_WRONLY | os.O_APPEND)
os.pwritev(fd, [b"YY"], 0, 0x20)  # RWF_NOAPPEND
os.close(fd)
f = open("big.bin", "a+b")
m = mmap.mmap(f.fileno(), 0)
m[0:2] = b"ZZ"
m.close()
f.write(b"tail")
f.close()
"""

# libc's temporary-file makers (the shim's own, tmpfile.c), from four
# forked processes at once into one directory: every name is new (each
# process goes on from its parent's random state), templates and suffixes
# kept, O_CLOEXEC given where asked
MKSTEMP = b"""
import ctypes, fcntl, os, re
libc = ctypes.CDLL(None, use_errno=True)
libc.mkdtemp.restype = ctypes.c_char_p
os.mkdir("tmpd")
b = ctypes.create_string_buffer(b"tmpd/pXXXXXX")    # the parent first: each child goes on from its sequence
os.close(libc.mkstemp(b))
os.unlink(b.value)
kids = []
for k in range(4):
    pid = os.fork()
    if pid == 0:
        for i in range(100):
            for t, call in ((b"a", lambda b: libc.mkstemp(b)), (b"c", lambda b: libc.mkostemp(b, os.O_CLOEXEC)),
                            (b"s", lambda b: libc.mkstemps(b, 2))):
                b = ctypes.create_string_buffer(b"tmpd/" + t + b"XXXXXX" + (b".c" if t == b"s" else b""))
                fd = call(b)
                assert fd >= 0, ctypes.get_errno()
                assert bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC) == (t == b"c")
                os.write(fd, b.value)
                os.close(fd)
            assert libc.mkdtemp(ctypes.create_string_buffer(b"tmpd/dXXXXXX"))
        os._exit(0)
    kids.append(pid)
assert all(os.waitpid(p, 0)[1] == 0 for p in kids)
names = os.listdir("tmpd")
ok = [n for n in names if re.fullmatch(r"[acd][A-Za-z0-9]{6}|s[A-Za-z0-9]{6}[.]c", n)]
assert all(open("tmpd/" + n).read() == "tmpd/" + n for n in ok if n[0] != "d")
open("made", "w").write("%d %d" % (len(names), len(ok)))
"""

IDIOMS = {
    "fallocate_modes": (["fallocate"],
                        b"fallocate -p -o 4096 -l 8192 big.bin && fallocate -z -o 0 -l 100 src/mid.bin && "
                        b"fallocate -c -o 0 -l 4096 sparse && fallocate -i -o 0 -l 4096 src/main.c && "
                        b"fallocate -l 1M newf",
                        lambda sh: size(sh, "newf") == 1 << 20 and sh.read("src/mid.bin")[:100] == bytes(100)),
    "sed_perl_backups": (["perl"], b"sed -i.bak 's/hello/bye/' a.txt && perl -i.orig -pe 's/leaf/LEAF/' "
                         b"src/deep/er/est/leaf.txt",
                         lambda sh: sh.read("a.txt.bak") == b"hello\n" and sh.exists("src/deep/er/est/leaf.txt.orig")),
    "cp_mv_backups": ([], b"cp --backup=numbered a.txt secret && cp --backup=numbered a.txt secret && "
                      b"mv -b script.sh suid",
                      lambda sh: sh.exists("secret.~2~") and sh.exists("suid~") and not sh.exists("script.sh")),
    "acl_and_xattrs": (["setfacl", "setfattr"],
                       b"setfacl -m u:1000:rw a.txt && setfattr -n user.k -v v secret && "
                       b"setfattr -x user.comment xattr.txt && setfacl -m d:u:1000:r src && setfacl -b empty",
                       lambda sh: os.getxattr(sh.p("secret"), "user.k") == b"v"),
    "editor_swap_save": ([], b"cp a.txt .a.txt.swp && echo edit >> .a.txt.swp && mv a.txt a.txt~ && "
                         b"mv .a.txt.swp a.txt && rm a.txt~ && ln -s a.txt b.lnk && "
                         b"sed -i --follow-symlinks s/edit/E/ b.lnk",
                         lambda sh: sh.read("a.txt") == b"hello\nE\n" and os.path.islink(sh.p("b.lnk"))),
    "perl_file_api": (["perl"], b"perl -e 'use File::Path qw(remove_tree make_path); use File::Copy; "
                      b"remove_tree(\"src\"); make_path(\"a/b\"); copy(\"secret\", \"a/b/s\"); move(\"a.txt\", \"a/m\"); "
                      b"unlink \"empty\"; rename \"sym\", \"sym2\"; chmod 0600, \"script.sh\"; utime 1, 2, \"suid\"; "
                      b"truncate \"big.bin\", 3'",
                      lambda sh: not sh.exists("src") and sh.read("a/m") == b"hello\n" and size(sh, "big.bin") == 3),
    "python_archives_and_moves": ([], b"%s -c 'import tarfile, zipfile, os, shutil; t = tarfile.open(\"t.tgz\", \"w:gz\"); "
                                  b"t.add(\"src\"); t.close(); z = zipfile.ZipFile(\"z.zip\", \"w\"); z.write(\"a.txt\"); "
                                  b"z.close(); os.remove(\"a.txt\"); shutil.rmtree(\"src\"); tarfile.open(\"t.tgz\").extractall(); "
                                  b"zipfile.ZipFile(\"z.zip\").extractall(); shutil.move(\"src\", \"moved\"); "
                                  b"shutil.copy2(\"secret\", \"moved/s2\")'" % PYB,
                                  lambda sh: sh.exists("moved/deep/er/est/leaf.txt") and sh.read("a.txt") == b"hello\n"),
    "python_asyncio_subprocesses": ([], b"%s -c 'import asyncio\nasync def m():\n"
                                    b"  p = await asyncio.create_subprocess_shell(\"rm -rf src && echo x > a.txt\"); await p.wait()\n"
                                    b"  p = await asyncio.create_subprocess_exec(\"mv\", \"secret\", \"s2\"); await p.wait()\n"
                                    b"asyncio.run(m())'" % PYB,
                                    lambda sh: not sh.exists("src") and sh.exists("s2")),
    "node_fs_api": (["node"], b"node -e 'const fs=require(\"fs\"); fs.rmSync(\"src\", {recursive:true}); "
                    b"fs.cpSync(\"private\", \"p2\", {recursive:true}); fs.writeFileSync(\"a.txt\", \"node\"); "
                    b"fs.appendFileSync(\"secret\", \"x\"); fs.renameSync(\"empty\", \"e2\"); fs.symlinkSync(\"a.txt\", \"nl\"); "
                    b"fs.chmodSync(\"script.sh\", 0o600); fs.mkdirSync(\"n/m\", {recursive:true}); fs.truncateSync(\"big.bin\", 10)'",
                    lambda sh: sh.read("a.txt") == b"node" and sh.exists("p2/notes") and size(sh, "big.bin") == 10),
    "java_nio": (["javac", "java"],
                 b"mkdir -p j && printf 'import java.nio.file.*; public class H { public static void main(String[] a) "
                 b"throws Exception { Files.writeString(Path.of(\"jo.txt\"), \"hi\"); Files.delete(Path.of(\"secret\")); "
                 b"Files.move(Path.of(\"a.txt\"), Path.of(\"j/a\")); } }' > j/H.java && cd j && javac -d . H.java && "
                 b"cd .. && java -cp j H",
                 lambda sh: sh.read("jo.txt") == b"hi" and not sh.exists("secret") and sh.exists("j/a")),
    # the JDK sets a copy's times with futimesat(fd, NULL, times)
    "java_copy_attributes": (["javac", "java"],
                             b"mkdir -p j && printf 'import java.nio.file.*; public class C { public static void main("
                             b"String[] a) throws Exception { Files.copy(Path.of(\"secret\"), Path.of(\"c2\"), "
                             b"StandardCopyOption.COPY_ATTRIBUTES); Files.copy(Path.of(\"a.txt\"), Path.of(\"secret\"), "
                             b"StandardCopyOption.COPY_ATTRIBUTES, StandardCopyOption.REPLACE_EXISTING); } }' > j/C.java && "
                             b"cd j && javac -d . C.java && cd .. && java -cp j C",
                             lambda sh: sh.read("c2") == b"key=42\n" and sh.read("secret") == b"hello\n"
                             and os.lstat(sh.p("secret")).st_mtime_ns // 1000 == os.lstat(sh.p("a.txt")).st_mtime_ns // 1000),
    # posix_spawn's file actions open inside glibc, in the child
    "posix_spawn_file_actions": ([], b"%s -c '%s'" % (PYB, SPAWN_ACTIONS),
                                 lambda sh: sh.read("a.txt") == b"" and sh.read("new.txt") == b"x\n"
                                 and sh.read("secret").endswith(b"y\n")),
    "patch_forward_back": (["patch", "diff"],
                           b"cp a.txt a.new && echo more >> a.new && (diff -u a.txt a.new > p.diff || true) && "
                           b"patch -s a.txt < p.diff && patch -s -R a.txt < p.diff && patch -s -b a.txt < p.diff",
                           lambda sh: sh.read("a.txt") == b"hello\nmore\n" and sh.read("a.txt.orig") == b"hello\n"),
    "tar_symlinked_directories": (["tar"], b"mkdir -p t/real && ln -s real t/link && echo x > t/real/f && "
                                  b"tar cf ../ts.tar t && rm -rf t && tar xf ../ts.tar && rm t/link && mv t/real t/link",
                                  lambda sh: sh.read("t/link/f") == b"x\n"),
    # mv across filesystems: the rename fails with EXDEV (not journaled as
    # one), then mv copies and removes; mkdir -p walks ancestors outside
    # the writable roots (/dev) that exist already: no refusal
    "mv_across_filesystems": ([], b"d=/dev/shm/ftsbx-test-$$ && mkdir -p $d/a/b && echo s > $d/a/b/f && "
                              b"mv $d/a/b/f moved && mv src $d/src && mv $d/src src2 && mv a.txt $d/a.txt && "
                              b"mv $d/a.txt a2.txt && rm -rf $d",
                              lambda sh: sh.read("moved") == b"s\n" and sh.exists("src2/main.c")
                              and sh.read("a2.txt") == b"hello\n" and not sh.exists("src")),
    "special_files_removed": ([], b"mkdir -p sd && mkfifo sd/ff && mknod sd/ff2 p && "
                              b"%s -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sd/sk\")' && rm -rf sd && "
                              b"rm fifo" % PYB,
                              lambda sh: not sh.exists("sd") and not sh.exists("fifo")),
    "libc_mkstemp_family": ([], b"%s -c '%s'" % (PYB, MKSTEMP), lambda sh: sh.read("made") == b"1600 1600"),
    # an O_APPEND descriptor that writes in place after all: its flag
    # cleared, RWF_NOAPPEND, a shared mapping of a+ (fopen's append-and-read)
    "append_descriptor_writes_in_place": ([], b"%s -c '%s'" % (PYB, APPEND_IN_PLACE),
                                          lambda sh: sh.read("a.txt")[:2] == b"XX"
                                          and sh.read("src/main.c")[:2] == b"YY" and sh.read("big.bin")[:2] == b"ZZ"),
}


@pytest.mark.parametrize("name", sorted(IDIOMS))
def test_idiom(shim, name):
    shim.program_case(name, IDIOMS[name])
