"""Real programs under the shim (issue 5): coreutils, tar, find, git,
python3, perl, make with gcc, odd names, FIFOs and sparse files. Each test
runs one behaviour in populate()'s rich tree under libftsbx.so, checks the
program did what it should, rewinds the session and finds the tree exactly
as it was."""
import os
import stat
import shutil

import pytest

from test_shim_lib import PY, Shim, q


@pytest.fixture
def shim(populated):
    """A Shim over a workspace holding populate()'s rich tree."""
    return Shim(populated)


# --- coreutils -------------------------------------------------------------------


def test_rm_rf_tree(shim):
    def check(_):
        for rel in ("src", "private", "with space.txt", "new\nline", b"bad\xffname", "fifo"):
            assert not shim.exists(rel), rel
    shim.roundtrip(b"rm -rf src private 'with space.txt' $'new\\nline' $'bad\\xffname' fifo", check)


def test_mv_over_files(shim):
    def check(_):
        assert shim.read("secret") == b"hello\n" and not shim.exists("a.txt")
        assert shim.read("with space.txt") == b"linked content\n" and not shim.exists("hard1")
        assert shim.read("src/main.c").startswith(b"odd 3")
    shim.roundtrip(b"mv a.txt secret && mv hard1 'with space.txt' && mv -f -- -dash src/main.c "
                   b"&& mv $'bad\\xffname' src/main.c", check)


@pytest.mark.parametrize("how", ["onto_empty_dir", "into_dir", "across_levels"])
def test_mv_directories(shim, how):
    scripts = {
        "onto_empty_dir": (b"mv -T src/deep emptydir", "emptydir/er/est/leaf.txt"),
        "into_dir": (b"mv private src/deep/er", "src/deep/er/private/notes"),
        "across_levels": (b"mv src/deep/er/est top && mv src deep2 && mv top deep2/", "deep2/top/leaf.txt"),
    }
    script, moved = scripts[how]

    def check(_):
        assert shim.exists(moved), moved
    shim.roundtrip(script, check)


@pytest.mark.parametrize("what", ["dir", "symlink", "file"])
def test_mv_then_remove(shim, what):
    """mv build build.old && rm -rf build.old: the removed entry comes back
    first, then the rename is undone."""
    src = {"dir": "src", "symlink": "sym", "file": "a.txt"}[what]

    def check(_):
        assert not shim.exists(src) and not shim.exists("old")
    shim.roundtrip(b"mv %s old && rm -rf old" % src.encode(), check)


def test_cp_r_over_existing_tree(shim):
    shim.setup("cp -r src dst && echo changed > dst/main.c && rm dst/mid.bin && "
               "mkdir dst/extra && echo keep > dst/extra/k")

    def check(_):
        assert shim.read("dst/main.c") == shim.read("src/main.c")
        assert shim.read("dst/mid.bin") == shim.read("src/mid.bin")
        assert shim.read("dst/extra/k") == b"keep\n"
    shim.roundtrip(b"cp -r src/. dst/ && cp -r big.bin sparse private dst/", check)


def test_sed_in_place(shim):
    def check(_):
        assert b"MAIN" in shim.read("src/main.c") and b"main" not in shim.read("src/main.c")
        assert shim.read("with space.txt") == b"ODD 0\n"
    shim.roundtrip(b"sed -i s/main/MAIN/g src/main.c && sed -i -e s/odd/ODD/ 'with space.txt' "
                   b"$'tab\\tname' $'bad\\xffname'", check)


def test_install(shim):
    def check(_):
        assert stat.S_IMODE(os.stat(shim.p("bin/tool")).st_mode) == 0o700
        assert shim.read("secret") == b"hello\n"
        assert stat.S_IMODE(os.stat(shim.p("secret")).st_mode) == 0o755
    shim.roundtrip(b"install -D -m 700 script.sh bin/tool && install -m 755 a.txt secret && "
                   b"install -d -m 750 made/dirs", check)


def test_ln_sf(shim):
    def check(_):
        assert os.readlink(shim.p("sym")) == b"big.bin"
        assert os.readlink(shim.p("a.txt")) == b"src/main.c"
        assert os.readlink(shim.p("dangling")) == b"src"
        assert os.readlink(shim.p("emptydir/x")) == b"../secret"
    shim.roundtrip(b"ln -sf big.bin sym && ln -sf src/main.c a.txt && ln -sfn src dangling && "
                   b"ln -sf ../secret emptydir/x && ln -f hard1 empty", check)


def test_chmod_recursive(shim):
    def check(_):
        assert stat.S_IMODE(os.stat(shim.p("src/main.c")).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(shim.p("src/deep")).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(shim.p("suid")).st_mode) == 0o000
    shim.roundtrip(b"chmod -R go-rwx src && chmod 000 suid && chmod -R u+s,g+w private", check)


def test_chown_other_uid(shim):
    def check(_):
        assert os.stat(shim.p("src/deep/er/est/leaf.txt")).st_uid == 1234
        assert os.stat(shim.p("src")).st_gid == 5678
        assert os.lstat(shim.p("sym")).st_uid == 4321
        assert os.stat(shim.p("a.txt")).st_uid == 0
    shim.roundtrip(b"chown -R 1234:5678 src && chown -h 4321 sym && chown :99 secret suid", check)


def test_touch_date(shim):
    def check(_):
        assert os.stat(shim.p("a.txt")).st_mtime == 981173106
        assert os.lstat(shim.p("sym")).st_mtime == 0
        assert shim.read("newfile") == b""
    shim.roundtrip(b"TZ=UTC touch -d '2001-02-03 04:05:06' a.txt src && touch -h -d @0 sym && "
                   b"touch -m -d @5 big.bin newfile", check)


def test_truncate(shim):
    def check(_):
        assert os.stat(shim.p("big.bin")).st_size == 10
        assert os.stat(shim.p("sparse")).st_size == 2 << 20
        assert os.stat(shim.p("src/mid.bin")).st_size == 0
    shim.roundtrip(b"truncate -s 10 big.bin && truncate -s 2M sparse && truncate -s 0 src/mid.bin "
                   b"&& truncate -s 100 created", check)


def test_hard_links_changed_through_each_name(shim):
    """One inode, two names, changed in turns through each (and a third
    name made on the way): every change is recorded, within one transaction
    (an sh -c) and across several (each command the root bash runs)."""
    def check(_):
        assert shim.read("hard1") == shim.read("src/hard2") == b"l"
    shim.roundtrip(b"sh -c 'truncate -s 5 hard1 && echo x >> src/hard2 && truncate -s 2 hard1' && "
                   b"ln hard1 third && sh -c 'echo y >> third' && truncate -s 1 src/hard2 && "
                   b"sh -c 'chmod 600 third && echo z >> hard1 && truncate -s 1 third'", check)


def test_dd_conv_notrunc(shim):
    before = shim.snap()
    old = shim.read("big.bin")

    def check(_):
        new = shim.read("big.bin")
        assert len(new) == len(old) and new != old and new[:100 << 10] == old[:100 << 10]
    shim.roundtrip(b"dd if=/dev/urandom of=big.bin bs=1k seek=100 count=3 conv=notrunc status=none && "
                   b"dd if=a.txt of=src/mid.bin bs=1 seek=7 conv=notrunc status=none", check, before)


def test_tar_extract_over_tree(shim):
    shim.setup("mkdir ../t && cp -a src ../t/ && echo new > ../t/src/main.c && echo more > ../t/src/added && "
               "chmod 600 ../t/src/deep/er/est/leaf.txt && tar cf ../t.tar -C ../t src && rm -r ../t")

    def check(_):
        assert shim.read("src/main.c") == b"new\n" and shim.read("src/added") == b"more\n"
        assert stat.S_IMODE(os.stat(shim.p("src/deep/er/est/leaf.txt")).st_mode) == 0o600
    shim.roundtrip(b"tar xf ../t.tar", check)


def test_find_delete(shim):
    def check(_):
        assert not shim.exists("a.txt") and not shim.exists("src/deep/er/est/leaf.txt")
        assert not shim.exists("emptydir") and shim.exists("src/main.c")
    shim.roundtrip(b"find . -name '*.txt' -delete && find . -depth -type d -empty -delete", check)


# --- git -------------------------------------------------------------------------

def git_repo(shim):
    """A repository 'repo' in the workspace: main with two commits, a
    branch 'other' and a branch 'feature' that diverged from main."""
    shim.setup("""set -e
        git init -q repo && cd repo
        printf 'line %s\\n' 1 2 3 > f.txt && cp ../src/main.c . && echo '*.o' > .gitignore
        git add -A && git commit -qm one
        git checkout -qb other && echo other > f.txt && echo only > other.txt
        git add -A && git commit -qm other
        git checkout -q main && git checkout -qb feature && echo feat > feat.txt
        git add -A && git commit -qm feat
        echo feat2 >> feat.txt && git commit -qam feat2
        git checkout -q main && echo two >> f.txt && git commit -qam two""")


def test_git_init_commit(shim):
    def check(proc):
        assert proc.stdout.split() == [b"2"]
    shim.roundtrip(b"set -e; git init -q newrepo && cd newrepo && cp -r ../src . && git add -A && "
                   b"git commit -qm first && echo x >> src/main.c && git commit -qam second && "
                   b"git rev-list --count HEAD", check)


def test_git_checkout_branch(shim):
    git_repo(shim)

    def check(_):
        assert shim.read("repo/f.txt") == b"other\n" and shim.read("repo/other.txt") == b"only\n"
    shim.roundtrip(b"cd repo && git checkout -q other", check)


def test_git_rebase(shim):
    git_repo(shim)

    def check(proc):
        assert proc.stdout.split() == [b"feat2", b"feat", b"two", b"one"]
    shim.roundtrip(b"set -e; cd repo && git rebase -q main feature && git log --format=%s", check)


def test_git_gc(shim):
    git_repo(shim)

    def check(_):
        assert os.listdir(shim.p("repo/.git/objects/pack"))
    shim.roundtrip(b"cd repo && git gc -q --aggressive --prune=now", check)


def test_git_clean_fdx(shim):
    git_repo(shim)
    shim.setup("cd repo && echo o > x.o && mkdir -p junk/deep && echo j > junk/deep/j && echo u > untracked")

    def check(_):
        for rel in ("repo/x.o", "repo/junk", "repo/untracked"):
            assert not shim.exists(rel), rel
        assert shim.exists("repo/f.txt")
    shim.roundtrip(b"cd repo && git clean -fdxq", check)


# --- python3 and perl ------------------------------------------------------------

PY_SCRIPTS = {
    "open_write": """
with open("a.txt", "w") as f: f.write("rewritten")
with open("secret", "ab") as f: f.write(b"appended")
with open("new.txt", "x") as f: f.write("fresh")
with open("src/mid.bin", "r+b") as f: f.seek(1000); f.write(b"patch")
""",
    "os_replace": """
import os
with open("tmp.new", "w") as f: f.write("replaced")
os.replace("tmp.new", "a.txt")
os.replace("big.bin", "src/main.c")
os.replace("src/deep", "emptydir")
""",
    "shutil_rmtree": """
import shutil
shutil.rmtree("src")
shutil.rmtree("private")
""",
    "shutil_copytree": """
import shutil
shutil.copytree("src", "src2", symlinks=True)
shutil.copytree("src", "emptydir", dirs_exist_ok=True)
""",
    "tempfile": """
import os, tempfile
fd, name = tempfile.mkstemp(dir=".", prefix="t")
os.write(fd, b"temp"); os.close(fd)
os.replace(name, "a.txt")
d = tempfile.mkdtemp(dir="src")
open(os.path.join(d, "inside"), "w").write("x")
with tempfile.NamedTemporaryFile(dir=".", delete=True) as f: f.write(b"gone")
with tempfile.TemporaryDirectory() as t: open(os.path.join(t, "f"), "w").write("y")
tempfile.NamedTemporaryFile(delete=False, suffix=".kept").write(b"kept")
""",
}


@pytest.mark.parametrize("what", sorted(PY_SCRIPTS))
def test_python(shim, what):
    shim.roundtrip(b"%s -c %s" % (PY.encode(), q(PY_SCRIPTS[what])))


def test_perl_in_place(shim):
    def check(_):
        assert shim.read("a.txt") == b"bye\n" and shim.read("new\nline") == b"ODD 2\n"
    shim.roundtrip(b"perl -pi -e 's/hello/bye/' a.txt && perl -pi.bak -e 's/odd/ODD/' $'new\\nline' "
                   b"'with space.txt'", check)


# --- make with gcc ---------------------------------------------------------------

MAKEFILE = b"""prog: a.o b.o
\tgcc -o $@ a.o b.o
%.o: %.c
\tgcc -c -O1 -o $@ $<
"""


def make_project(shim):
    shim.write("proj/Makefile", MAKEFILE)
    shim.write("proj/a.c", b"int f(void);\nint main(void) { return f(); }\n")
    shim.write("proj/b.c", b"int f(void) { return 7; }\n")


def test_make_build(shim):
    make_project(shim)

    def check(_):
        assert os.access(shim.p("proj/prog"), os.X_OK)
    proc = shim.roundtrip(b"make -s -C proj && proj/prog; echo status $?", check)
    assert proc.stdout.split()[-2:] == [b"status", b"7"]


def test_make_rebuild_after_touch(shim):
    make_project(shim)
    shim.setup("make -s -C proj && touch -d @1000000000 proj/*.c proj/*.o proj/prog")

    def check(proc):
        assert proc.stdout.split() == [b"gcc", b"-c", b"-O1", b"-o", b"b.o", b"b.c",
                                       b"gcc", b"-o", b"prog", b"a.o", b"b.o"]
    shim.roundtrip(b"touch proj/b.c && make --no-print-directory -C proj", check)


# --- odd names, FIFOs, sparse files ----------------------------------------------

ODD = [b"sp ace", b"t\tab", b"new\nline2", b"bad\xfe\xffbytes", b" lead", b"trail "]


@pytest.mark.parametrize("name", ODD, ids=["space", "tab", "newline", "non_utf8", "lead", "trail"])
def test_odd_names(shim, name):
    n, m = q(name), q(name + b".moved")

    def check(_):
        assert shim.read(name + b".moved") == b"data\n" and shim.exists(b"dir " + name + b"/" + name)
    shim.roundtrip(b"echo data > %s && mv %s %s && mkdir 'dir '%s && echo x > 'dir '%s/%s && "
                   b"ln -s %s 'dir '%s/l && rm -f -- *name" % (n, n, m, n, n, n, n, n), check)


def test_fifo_write_and_replace(shim):
    def check(proc):
        assert proc.stdout == b"through the fifo\n"
        assert stat.S_ISFIFO(os.lstat(shim.p("newfifo")).st_mode)
        assert not shim.exists("fifo") and stat.S_ISFIFO(os.lstat(shim.p("src/fifo2")).st_mode)
    shim.roundtrip(b"cat fifo & echo 'through the fifo' > fifo; wait; mkfifo -m 600 newfifo && "
                   b"mv fifo src/fifo2", check, timeout=30)


def test_sparse_file_stays_sparse(shim):
    shim.setup("truncate -s 10M sp10")
    blocks = {rel: os.stat(shim.p(rel)).st_blocks for rel in ("sp10", "sparse")}
    assert blocks["sp10"] == 0

    def check(_):
        data = shim.read("sp10")
        assert len(data) == 10 << 20 and data[5 << 20:(5 << 20) + 6] == b"hello\n"
    shim.roundtrip(b"printf 'hello\\n' | dd of=sp10 bs=1M seek=5 conv=notrunc status=none && "
                   b"printf 'x' | dd of=sparse bs=1 seek=700000 conv=notrunc status=none", check)
    after = {rel: os.stat(shim.p(rel)).st_blocks for rel in blocks}
    assert after == blocks, f"st_blocks before rewind {blocks}, after {after}: not sparse again"


# --- patterns of real programs, one at a time -------------------------------------


def test_create_retried_after_mkdir(shim):
    """git's safe_create_leading_directories: open(O_CREAT) fails for want
    of a directory, mkdir -p, open again."""
    def check(_):
        assert shim.read("logs/refs/heads/main") == b"entry\n"
    shim.roundtrip(b"(echo entry > logs/refs/heads/main) 2>/dev/null; mkdir -p logs/refs/heads && "
                   b"echo entry > logs/refs/heads/main", check)


def test_path_reused_by_another_inode(shim):
    """A path written, removed, linked to another file, written again: the
    second write changes the other file, which the rewind must restore."""
    def check(_):
        assert shim.read("src/hard2") == b"second\n"
    shim.roundtrip(b"echo first > a.txt && rm a.txt && ln hard1 a.txt && echo second > a.txt", check)


def test_write_through_fresh_hard_link(shim):
    """cp -al (the rsync --link-dest and backup-rotation idiom), then an
    edit through a new link: the old inode's bytes must come back."""
    def check(_):
        assert shim.read("src/main.c") == b"edited\n"
    shim.roundtrip(b"cp -al src snap && echo edited > snap/main.c", check)


@pytest.mark.parametrize("rel", ["a.txt", "sym", "emptydir"])
def test_rename_onto_itself_then_remove(shim, rel):
    """rename(p, p) changes nothing (the kernel does nothing); removing p
    afterwards must still rewind."""
    def check(_):
        assert not shim.exists(rel)
    shim.roundtrip(b"%s -c %s" % (PY.encode(), q(f"""
import os
os.rename({rel!r}, {rel!r})
os.rmdir({rel!r}) if os.path.isdir({rel!r}) and not os.path.islink({rel!r}) else os.unlink({rel!r})
""")), check)


def test_failed_rename_then_source_removed(shim):
    """A rename the kernel refuses (a directory over a file: ENOTDIR)
    changes nothing; removing its source afterwards must still rewind."""
    def check(proc):
        assert proc.stdout == b"20\n" and not shim.exists("emptydir")
    shim.roundtrip(b"%s -c %s" % (PY.encode(), q("""
import os
try:
    os.rename("emptydir", "big.bin")
except OSError as e:
    print(e.errno)
os.rmdir("emptydir")
""")), check)


NODE_FS = r"""
const fs = require('fs');
fs.writeFileSync('src/main.c', 'rewritten by node\n');
fs.mkdirSync('made/by/node', {recursive: true});
fs.writeFileSync('made/by/node/f.txt', 'x');
fs.renameSync('a.txt', 'renamed.txt');
fs.copyFileSync('renamed.txt', 'copied.txt');
fs.promises.writeFile('async.txt', 'async')
  .then(() => fs.promises.unlink('copied.txt'))
  .then(() => fs.promises.rm('private', {recursive: true}))
  .then(() => fs.promises.appendFile('with space.txt', 'more\n'))
  .then(() => console.log('done'));
"""


@pytest.mark.skipif(not shutil.which("node"), reason="no node")
@pytest.mark.parametrize("uring", ["0", "1"])
def test_node_fs(shim, uring):
    """node's libuv does file work on its thread pool, or through io_uring
    when UV_USE_IO_URING=1: the shim refuses io_uring (ENOSYS, so libuv falls
    back to plain calls) and journals everything either way."""
    shim.write("t.js", NODE_FS)

    def check(proc):
        assert proc.stdout.strip() == b"done"
        assert shim.read("src/main.c") == b"rewritten by node\n" and not shim.exists("private")
        assert shim.read("async.txt") == b"async" and not shim.exists("copied.txt")
    before = shim.snap()
    shim.roundtrip("node t.js", check, before=before, env=shim.env(UV_USE_IO_URING=uring),
                   refusals_ok=uring == "1")


# --- more real programs -------------------------------------------------------------
# Each: (programs it needs, script, check of what it did). The round trip
# then rewinds and compares the whole tree.

def _has(shim, rel):
    return shim.exists(rel)


MORE = {
    "cp_a_preserving": (["cp"], b"cp -a src src2 && cp -a --remove-destination big.bin secret",
                        lambda sh: _has(sh, "src2/deep/er/est/leaf.txt") and sh.read("secret") == sh.read("big.bin")),
    "zip_unzip_over": (["zip", "unzip"],
                       b"zip -qr ../z.zip src a.txt && echo changed > a.txt && rm -rf src/deep && unzip -qo ../z.zip",
                       lambda sh: _has(sh, "src/deep/er/est/leaf.txt") and sh.read("a.txt") != b"changed\n"),
    "gzip_xz_bzip2": (["gzip", "xz", "bzip2"], b"gzip big.bin && gzip -k secret && xz -k sparse && bzip2 a.txt",
                      lambda sh: _has(sh, "big.bin.gz") and not _has(sh, "big.bin") and _has(sh, "a.txt.bz2")),
    "sqlite3_vacuum": (["sqlite3"], b"sqlite3 db.sqlite 'create table t(x); insert into t values(1),(2);' && "
                       b"sqlite3 db.sqlite 'update t set x=3; vacuum;'",
                       lambda sh: sh.read("db.sqlite").startswith(b"SQLite format 3")),
    "python_sqlite_wal": ([], b"%s -c 'import sqlite3; c = sqlite3.connect(\"d.db\"); c.execute(\"pragma journal_mode=wal\"); "
                          b"c.execute(\"create table t(x)\"); c.executemany(\"insert into t values(?)\", "
                          b"[(i,) for i in range(1000)]); c.commit(); c.close()'" % PY.encode(),
                          lambda sh: _has(sh, "d.db")),
    "split_sort_shred": (["split", "sort", "shred"], b"split -b 1000 big.bin part. && sort -o secret secret && shred -u a.txt",
                         lambda sh: _has(sh, "part.aa") and not _has(sh, "a.txt")),
    "git_stash_worktree": (["git"], b"set -e; git init -q r && cd r && echo a > f && git add f && git commit -qm 1 && "
                           b"echo b > f && echo n > new && git stash -u -q && git stash pop -q && "
                           b"git worktree add -q ../wt && git branch -q x",
                           lambda sh: sh.read("r/f") == b"b\n" and _has(sh, "wt/f")),
    "cmake_ninja": (["cmake", "ninja", "cc"],
                    b"mkdir -p cm && printf 'cmake_minimum_required(VERSION 3.10)\\nproject(p C)\\n"
                    b"add_executable(p m.c)\\n' > cm/CMakeLists.txt && echo 'int main(void){return 0;}' > cm/m.c && "
                    b"cmake -S cm -B cm/build -G Ninja >/dev/null && ninja -C cm/build >/dev/null && cm/build/p",
                    lambda sh: _has(sh, "cm/build/p")),
    "python_mmap_write": ([], b"%s -c 'import mmap; f = open(\"big.bin\", \"r+b\"); m = mmap.mmap(f.fileno(), 0); "
                          b"m[0:5] = b\"HELLO\"; m.flush()'" % PY.encode(),
                          lambda sh: sh.read("big.bin").startswith(b"HELLO")),
    "shell_redirections": ([], b"echo a > n1; echo b >> n1; cat a.txt > secret; : > big.bin; >| sparse; "
                           b"exec 3>>hard1; echo more >&3; exec 4<>src/main.c; echo X >&4",
                           lambda sh: sh.read("n1") == b"a\nb\n" and sh.read("big.bin") == b""),
    # bind() makes a file; multiprocessing's forkserver binds one in a
    # directory of its own that it removes with everything in it
    "unix_sockets_forkserver": ([], b"""cat > mpt.py <<'EOF'
import multiprocessing as mp, os, socket
def w(i):
    open("mp" + str(i), "w").write(str(i))
    return i
if __name__ == "__main__":
    os.mkdir("sockdir")
    for name in ("sockdir/s", "top.sock", "\\0abstract"):
        socket.socket(socket.AF_UNIX).bind(name)
    os.unlink("sockdir/s")
    with mp.get_context("forkserver").Pool(2) as p:
        print(sum(p.map(w, range(4))))
EOF
%s mpt.py""" % PY.encode(),
        lambda sh: stat.S_ISSOCK(os.lstat(sh.p("top.sock")).st_mode) and sh.read("mp3") == b"3"),
    # another process renames the directory a shell (or python) works in;
    # the relative names that follow land in it under its new name
    "cwd_renamed_by_a_child": ([], b"mkdir d && cd d && mv ../d ../e && echo x > f && mkdir g && cd .. && "
                               b"rm -rf e/g && cd src && mv ../src ../src2 && rm main.c && "
                               b"%s -c 'import os; os.system(\"mv ../src2 ../src3\"); open(\"p\", \"w\").write(\"y\")'"
                               % PY.encode(),
                               lambda sh: sh.read("e/f") == b"x\n" and sh.read("src3/p") == b"y"
                               and not _has(sh, "src3/main.c")),
    # ... and a process holding a directory's descriptor, then working
    # through it (the *at calls)
    "dirfd_renamed_by_a_child": ([], b"""cat > fdw.py <<'EOF'
import os
fd = os.open("src", os.O_RDONLY | os.O_DIRECTORY)
os.system("mv src src2")
os.close(os.open("made", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
os.mkdir("dir", dir_fd=fd)
os.unlink("main.c", dir_fd=fd)
os.rename("mid.bin", "mid2.bin", src_dir_fd=fd, dst_dir_fd=fd)
os.chmod("made", 0o640, dir_fd=fd)
EOF
%s fdw.py""" % PY.encode(),
                                 lambda sh: _has(sh, "src2/made") and _has(sh, "src2/dir")
                                 and _has(sh, "src2/mid2.bin") and not _has(sh, "src2/main.c")),
    "directory_swap": ([], b"mv src src.tmp && mkdir src && mv src.tmp src/old && ln -s src/old/main.c link",
                       lambda sh: _has(sh, "src/old/main.c") and os.readlink(sh.p("link")) == b"src/old/main.c"),
}


@pytest.mark.parametrize("name", sorted(MORE))
def test_more_programs(shim, name):
    shim.program_case(name, MORE[name])
