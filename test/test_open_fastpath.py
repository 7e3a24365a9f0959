"""The read-only open's fast path (shim/open.c, shim/path.c, policy/decide.c)
refuses what the slow path refused: every spelling of a hidden path (".",
"..", "//", a relative path from the cwd or a directory descriptor, paths of
every length around the 16-byte chunks the scans take), every symlink that
leads to one (a file, a directory, a chain, one swapped in after a first
open), a path the shim cannot spell in PATH_MAX bytes, and an open that
reads but also creates or truncates is journaled as before. Each wrapped
program prints one JSON object: what each open gave ("ok:CONTENT" or the
errno's name)."""
import json
import os
import subprocess

import pytest

from test_shim_lib import PY, Shim

SECRET = b"SECRET"
PLAIN = b"plain"

# Run inside the wrapped python: try(path, flags, dir_fd) -> "ok:..." or "EACCES"...
HELPERS = r"""
import errno, json, os, sys
out = {}
def attempt(path, flags=os.O_RDONLY, dir_fd=None):
    try:
        fd = os.open(path, flags, 0o644, dir_fd=dir_fd)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    try:
        data = os.read(fd, 64) if not flags & os.O_DIRECTORY else b"dir"
    except OSError as e:
        data = errno.errorcode.get(e.errno, str(e.errno)).encode()
    os.close(fd)
    return "ok:" + data.decode(errors="replace")
def done():
    print(json.dumps(out))
"""


@pytest.fixture
def shim(scratch):
    """A workspace with a readable file and a hidden .env, a home whose
    ~/.ssh holds a secret, and symlinks from the workspace to both."""
    s = Shim(scratch)
    ssh = os.path.join(s.home, b".ssh")
    os.makedirs(os.path.join(ssh, b"sub"))
    os.makedirs(os.path.join(s.home, b"x"))
    for path, data in ((os.path.join(ssh, b"id_x"), SECRET), (os.path.join(ssh, b"sub", b"k"), SECRET),
                       (os.path.join(ssh, b"f"), SECRET)):
        with open(path, "wb") as f:
            f.write(data)
    s.write("readable", PLAIN)
    s.write("d/f", PLAIN)
    s.write("a/f", PLAIN)
    s.write(".env", SECRET)
    for n in range(1, 21):
        with open(os.path.join(ssh, b"k" * n), "wb") as f:
            f.write(SECRET)
        for name, data in ((".env", SECRET), (".env.x.local", SECRET), ("id_rsa", SECRET), ("plain", PLAIN),
                           (".envy", PLAIN), ("i", PLAIN)):
            s.write(f"{'q' * n}/{name}", data)
    os.symlink(os.path.join(ssh, b"id_x"), s.p("lfile"))
    os.symlink(ssh, s.p("ldir"))
    os.symlink(b"chain2", s.p("chain1"))
    os.symlink(os.path.join(ssh, b"id_x"), s.p("chain2"))
    os.symlink(os.path.relpath(ssh, s.ws), s.p("rel"))
    os.symlink(b"readable", s.p("okl"))
    os.symlink(b"d", s.p("okdir"))
    return s


def run_py(shim, code, *args, **kw):
    """Run HELPERS + CODE in a wrapped python (cwd: the workspace); its JSON."""
    proc = shim.sh(b"exec %s -c %s %s" % (PY.encode(), _q(HELPERS + code), b" ".join(_q(a) for a in args)),
                   refusals_ok=True, **kw)
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def _q(x):
    x = x if isinstance(x, bytes) else os.fsencode(str(x))
    return b"'" + x.replace(b"'", b"'\\''") + b"'"


def spellings(full, ws):
    """Ways to name FULL: absolute, with "//", "/./", "d/../d", and relative
    to the workspace WS (the cwd) plainly and with "./"."""
    d, name = os.path.split(full)
    up, last = os.path.split(d)
    rel = os.path.relpath(full, ws)
    return [full, d + "//" + name, d + "/./" + name, up + "/./" + last + "/" + name, up + "//" + last + "/" + name,
            up + "//" + last + "/../" + last + "/" + name, rel, "./" + rel, "./" + rel.replace("/", "//")]


def test_hidden_paths_refused_by_every_spelling(shim):
    """Targets of every length from 1 to 20 bytes more than the shortest,
    so that the paths' ends fall everywhere in the scans' 16-byte chunks."""
    home, ws = os.fsdecode(shim.home), os.fsdecode(shim.ws)
    cases = {}
    for n in range(1, 21):
        for full, want in ((f"{home}/.ssh/{'k' * n}", "EACCES"), (f"{ws}/{'q' * n}/.env", "EACCES"),
                           (f"{ws}/{'q' * n}/.env.x.local", "EACCES"), (f"{ws}/{'q' * n}/id_rsa", "EACCES"),
                           (f"{ws}/{'q' * n}/plain", "ok:plain"), (f"{ws}/{'q' * n}/.envy", "ok:plain"),
                           (f"{ws}/{'q' * n}/i", "ok:plain")):
            for p in spellings(full, ws):
                cases[p] = want
    got = run_py(shim, "for p in sys.argv[1:]:\n    out[p] = attempt(p)\ndone()\n", *cases)
    wrong = {p: (got.get(p), want) for p, want in cases.items() if got.get(p) != want}
    assert not wrong, f"{len(wrong)} of {len(cases)} wrong (got, wanted): {wrong}"
    assert sum(w == "EACCES" for w in cases.values()) > 300


@pytest.mark.parametrize("link", ["lfile", "ldir/id_x", "chain1", "rel/id_x", "rel/sub/k", "ldir/sub/../id_x",
                                  "okdir/../lfile"])
def test_symlink_to_a_hidden_path_refused(shim, link):
    got = run_py(shim, "out['rel'] = attempt(sys.argv[1])\nout['abs'] = attempt(os.path.abspath(sys.argv[1]))\n"
                       "out['nofollow'] = attempt(sys.argv[1], os.O_RDONLY | os.O_NOFOLLOW)\ndone()\n", link)
    assert got["rel"] == "EACCES" and got["abs"] == "EACCES", got
    # O_NOFOLLOW: the kernel's own answer for a final symlink (ELOOP), or the refusal; never the secret
    assert got["nofollow"] in ("ELOOP", "EACCES"), got


def test_symlink_to_an_allowed_path_reads(shim):
    got = run_py(shim, "out['f'] = attempt('okl')\nout['d'] = attempt('okdir/f')\n"
                       "out['nofollow'] = attempt('okl', os.O_RDONLY | os.O_NOFOLLOW)\ndone()\n")
    assert got == {"f": "ok:plain", "d": "ok:plain", "nofollow": "ELOOP"}


SWAP = r"""
first = attempt(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
out["first"], out["again"] = first, attempt(sys.argv[1])
out["again_rel"] = attempt(os.path.relpath(sys.argv[1]))
done()
"""


def run_with_swap(shim, path, swap):
    """Open PATH in a wrapped python, let SWAP() change the tree from outside
    (no shim: nothing the session's generations see), open it again."""
    argv = [b"/bin/bash", b"-c", b"exec %s -c %s %s" % (PY.encode(), _q(HELPERS + SWAP), _q(path))]
    proc = subprocess.Popen(argv, cwd=shim.ws, env=shim.env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    swap()
    out, err = proc.communicate(b"go\n", timeout=60)
    return json.loads(out.decode().strip().splitlines()[-1])


def test_directory_replaced_by_symlink_to_hidden_dir_after_first_open(shim):
    def swap():
        os.rename(shim.p("d"), shim.p("d_old"))
        os.symlink(os.path.join(shim.home, b".ssh"), shim.p("d"))
    got = run_with_swap(shim, os.fsdecode(shim.p("d/f")), swap)
    assert got == {"first": "ok:plain", "again": "EACCES", "again_rel": "EACCES"}, got


def test_directory_renamed_to_hidden_name_after_first_open(shim):
    def swap():
        os.rename(shim.p("a"), shim.p(".env.d"))
        os.remove(shim.p(".env"))
        os.rename(shim.p(".env.d"), shim.p(".env"))
    got = run_with_swap(shim, os.fsdecode(shim.p("a/f")), swap)
    assert got["first"] == "ok:plain" and got["again"] == "ENOENT", got
    got = run_py(shim, "out['x'] = attempt('.env/f')\ndone()\n")
    assert got == {"x": "EACCES"}


def test_directory_swapped_by_the_wrapped_process_itself(shim):
    code = ("out['first'] = attempt('d/f')\nos.rename('d', 'd_old')\nos.symlink(sys.argv[1], 'd')\n"
            "out['again'] = attempt('d/f')\nout['abs'] = attempt(os.path.abspath('d/f'))\ndone()\n")
    got = run_py(shim, code, os.path.join(shim.home, b".ssh"))
    assert got == {"first": "ok:plain", "again": "EACCES", "abs": "EACCES"}


def test_chdir_and_fchdir_move_relative_opens(shim):
    code = r"""
ws = os.getcwd()
os.chdir(sys.argv[1]); out["in_ssh"] = attempt("id_x"); out["in_ssh_sub"] = attempt("sub/../f")
os.chdir(ws); os.chdir("ldir"); out["via_link"] = attempt("id_x")
fd = os.open(os.path.dirname(sys.argv[1]), os.O_RDONLY | os.O_DIRECTORY)
os.fchdir(fd); out["fchdir"] = attempt(".ssh/id_x"); os.close(fd)
os.chdir(ws); out["back"] = attempt("readable"); out["env"] = attempt(".env")
os.chdir("d"); out["up"] = attempt("../.env"); out["here"] = attempt("f")
# paths shorter than a chunk, whose "//", "." or ".." is what moves them
os.chdir(os.path.dirname(os.path.dirname(sys.argv[1])))
out["short_dslash"] = attempt("home//.ssh/k"); out["short_dot"] = attempt("home/./.ssh/k")
os.chdir(os.path.dirname(sys.argv[1])); out["short_dotdot"] = attempt("x/../.ssh/k")
done()
"""
    got = run_py(shim, code, os.path.join(shim.home, b".ssh"))
    assert got == {"in_ssh": "EACCES", "in_ssh_sub": "EACCES", "via_link": "EACCES", "fchdir": "EACCES",
                   "back": "ok:plain", "env": "EACCES", "up": "EACCES", "here": "ok:plain",
                   "short_dslash": "EACCES", "short_dot": "EACCES", "short_dotdot": "EACCES"}, got


def test_dirfd_relative_opens(shim):
    code = r"""
home = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
ws = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
out["ssh"] = attempt(".ssh/id_x", dir_fd=home)
out["ssh_dir"] = attempt(".ssh", os.O_RDONLY | os.O_DIRECTORY, dir_fd=home)
out["env"] = attempt(".env", dir_fd=ws)
out["link"] = attempt("lfile", dir_fd=ws)
out["ldir"] = attempt("ldir", os.O_RDONLY | os.O_DIRECTORY, dir_fd=ws)
out["plain"] = attempt("readable", dir_fd=ws)
out["sub"] = attempt("d/f", dir_fd=ws)
d = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=ws)
out["from_d"] = attempt("../.env", dir_fd=d)
out["in_d"] = attempt("f", dir_fd=d)
out["file_as_dir"] = attempt("x", dir_fd=os.open("readable", os.O_RDONLY))
done()
"""
    got = run_py(shim, code, shim.home)
    assert got == {"ssh": "EACCES", "ssh_dir": "EACCES", "env": "EACCES", "link": "EACCES", "ldir": "EACCES",
                   "plain": "ok:plain", "sub": "ok:plain", "from_d": "EACCES", "in_d": "ok:plain",
                   "file_as_dir": "ENOTDIR"}, got


def test_path_longer_than_path_max_once_joined_to_a_deep_cwd(shim):
    """A cwd over 3000 bytes deep and a relative path that climbs out with
    ".." after components of its own: joined, more than PATH_MAX bytes, so
    the shim has no lexical spelling of it; the kernel's is judged."""
    code = r"""
comp = "d" * 200
for _ in range(16):
    os.makedirs(comp, exist_ok=True); os.chdir(comp)
os.makedirs(comp, exist_ok=True)
cwd = os.getcwd()
up = "../" * cwd.count("/")
target = sys.argv[1].lstrip("/")
path = (comp + "/../") * 5 + up + target
out["joined"] = len(cwd) + 1 + len(path)
out["secret"] = attempt(path)
out["plain"] = attempt((comp + "/../") * 5 + up + sys.argv[2].lstrip("/"))
done()
"""
    got = run_py(shim, code, os.path.join(shim.home, b".ssh", b"id_x"), shim.p("readable"))
    assert got["joined"] > 4096
    assert got["secret"] == "EACCES" and got["plain"] == "ok:plain", got


def test_errno_exact_on_the_fast_path(shim):
    code = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.open.restype = ctypes.c_int
def raw(path, flags):
    ctypes.set_errno(1234)
    fd = libc.open(path.encode(), flags)
    e = ctypes.get_errno()
    if fd >= 0:
        os.close(fd)
    return [fd >= 0, e]
out["ok"] = raw("readable", os.O_RDONLY)
out["missing"] = raw("nope", os.O_RDONLY)
out["notdir"] = raw("readable/x", os.O_RDONLY)
out["loop"] = raw("okl", os.O_RDONLY | os.O_NOFOLLOW)
out["hidden"] = raw(".env", os.O_RDONLY)
out["dir"] = raw("d", os.O_RDONLY | os.O_DIRECTORY)
out["notadir"] = raw("readable", os.O_RDONLY | os.O_DIRECTORY)
done()
"""
    got = run_py(shim, code)
    import errno as E
    assert got == {"ok": [True, 1234], "missing": [False, E.ENOENT], "notdir": [False, E.ENOTDIR],
                   "loop": [False, E.ELOOP], "hidden": [False, E.EACCES], "dir": [True, 1234],
                   "notadir": [False, E.ENOTDIR]}, got


FOPEN = r"""
import ctypes, fcntl
libc = ctypes.CDLL(None, use_errno=True)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.fileno.argtypes = libc.fclose.argtypes = [ctypes.c_void_p]
libc.fgets.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p]
libc.fgets.restype = ctypes.c_void_p
def via_fopen(path, mode):
    ctypes.set_errno(1234)
    f = libc.fopen(path.encode(), mode.encode())
    e = ctypes.get_errno()
    if not f:
        return [errno.errorcode.get(e, str(e))]
    buf = ctypes.create_string_buffer(64)
    line = libc.fgets(buf, 64, f) and buf.value.decode()
    cloexec = bool(fcntl.fcntl(libc.fileno(f), fcntl.F_GETFD) & fcntl.FD_CLOEXEC)
    libc.fclose(f)
    return [line, cloexec, e]
for p in sys.argv[1:]:
    for m in ("r", "re", "rb", "rbe", "rm", "rx", "rbme", "rbmee", "rce", "r,ccs=UTF-8"):
        out[p + " " + m] = via_fopen(p, m)
done()
"""


def test_fopen_for_reading_as_glibc_opens(shim):
    """fopen's read modes open through the shim's judged open and fdopen:
    the stream reads as glibc's own would (its line, FD_CLOEXEC with "e"
    and only then, errno untouched on success, errno of a failure), and a
    hidden file, by its name or a symlink, stays refused."""
    plain = ["readable", "okl", "okdir/f", "d", "nope", "readable/x", "d/../readable"]
    hidden = [".env", "lfile", "chain1", "rel/id_x"]
    got = run_py(shim, FOPEN, *plain, *hidden)
    want = run_py(shim, FOPEN, *plain, preload=False)
    assert {k: v for k, v in got.items() if k.split()[0] in plain} == want
    assert want["readable re"] == ["plain", True, 1234] and want["readable r"] == ["plain", False, 1234]
    assert want["nope r"] == ["ENOENT"] and not want["d r"][0]
    wrong = {k: v for k, v in got.items() if k.split()[0] in hidden and v != ["EACCES"]}
    assert not wrong, wrong


@pytest.mark.parametrize("flags", ["O_RDONLY | O_TRUNC", "O_WRONLY", "O_RDWR | O_APPEND",
                                   "O_RDONLY | O_CREAT", "O_WRONLY | O_CREAT | O_TRUNC"])
def test_opens_that_change_are_journaled_and_rewound(shim, flags):
    code = (f"from os import *\nfor p in ('readable', 'new'):\n"
            f"    try:\n        fd = os.open(p, {flags}, 0o644)\n    except FileNotFoundError:\n        continue\n"
            f"    if {flags} & (O_WRONLY | O_RDWR):\n        os.write(fd, b'changed')\n    os.close(fd)\n"
            f"out['x'] = 1\ndone()\n")
    shim.roundtrip(b"exec %s -c %s" % (PY.encode(), _q(HELPERS + code)))


@pytest.mark.parametrize("flags", ["O_RDONLY | O_TRUNC", "O_RDONLY | O_CREAT", "O_WRONLY"])
def test_changing_opens_of_hidden_paths_refused(shim, flags):
    code = (f"from os import *\nout['env'] = attempt('.env', {flags})\n"
            f"out['new'] = attempt('.env.x.local', {flags})\nout['link'] = attempt('lfile', {flags})\ndone()\n")
    got = run_py(shim, code)
    # a missing file opened without O_CREAT: the kernel's ENOENT, as without the shim
    assert got == {"env": "EACCES", "new": "EACCES" if "O_CREAT" in flags else "ENOENT", "link": "EACCES"}, got
    assert shim.read(".env") == SECRET and not shim.exists(".env.x.local")
    with open(os.path.join(shim.home, b".ssh", b"id_x"), "rb") as f:
        assert f.read() == SECRET


def test_unnormal_spellings_at_every_position_of_a_chunk(shim):
    """A hidden prefix per length: WS/v{k}/sec for k from 1 to 40, so that
    the one "//", "/./" or "/x/.." of each spelling falls at every byte of
    the 16-byte chunks normal_len() takes (the last of one chunk and the
    first of the next among them); each such spelling must be rewritten
    before the policy sees it, or the prefix would not match."""
    ws = os.fsdecode(shim.ws)
    F = "f" * 20
    policy = os.path.join(shim.base, b"chunks.ini")
    lines = ["[policy]", "mode = enforce", "landlock = off", "[paths]", "writable = $WORKSPACE",
             "writable = /tmp"]
    cases = {}
    for k in range(1, 41):
        v = "v" * k
        lines.append(f"hidden = {ws}/{v}/sec")
        # long names after: the relative spellings pass 32 bytes, so that a
        # chunk starts at byte 16, not only at the last 16 bytes
        shim.write(f"{v}/sec/{F}", SECRET)
        shim.write(f"{v}/x/{F}", PLAIN)
        for rel in (f"{v}//sec/{F}", f"{v}/./sec/{F}", f"{v}/x/../sec/{F}", f"{v}/x//../sec/{F}"):
            cases[rel] = cases[f"{ws}/{rel}"] = "EACCES"
        for rel in (f"{v}/x/{F}", f"{v}//x/{F}", f"{v}/./x/{F}"):
            cases[rel] = cases[f"{ws}/{rel}"] = "ok:plain"
        # and short ones, 9 to 15 bytes (one chunk of the first 8 bytes and
        # the last 8), with names of every length
        for m in range(1, 9) if k <= 8 else ():
            g = "g" * m
            shim.write(f"{v}/sec/{g}", SECRET)
            for rel in (f"{v}//sec/{g}", f"{v}/./sec/{g}", f"{v}/x/../sec/{g}"):
                cases[rel] = "EACCES"
    with open(policy, "w") as f:
        f.write("\n".join(lines) + "\n")
    env = shim.env(FTSBX_POLICY=os.fsdecode(policy))
    got = run_py(shim, "for p in sys.argv[1:]:\n    out[p] = attempt(p)\ndone()\n", *cases, env=env)
    wrong = {p: (got.get(p), want) for p, want in cases.items() if got.get(p) != want}
    assert not wrong, f"{len(wrong)} of {len(cases)} wrong (got, wanted): {wrong}"


NO_OPENAT2 = r"""
import ctypes, platform, struct
libc = ctypes.CDLL(None, use_errno=True)
# a seccomp filter: openat2 (437 on x86-64 and aarch64) fails with ERRNO
prog = b"".join(struct.pack("HBBI", *ins) for ins in (
    (0x20, 0, 0, 0), (0x15, 0, 1, 437), (0x06, 0, 0, 0x00050000 | int(sys.argv[1])), (0x06, 0, 0, 0x7fff0000)))
buf = ctypes.create_string_buffer(prog)
fprog = struct.pack("HxxxxxxQ", 4, ctypes.addressof(buf))
assert libc.prctl(38, 1, 0, 0, 0) == 0
assert libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) == 0, ctypes.get_errno()
for p in ("lfile", "ldir/id_x", "chain1", "rel/sub/k", ".env", "readable", "okl", "okdir/f", "nope"):
    out[p] = attempt(p)
out["twice"] = attempt("lfile")
done()
"""


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="openat2's number")
@pytest.mark.parametrize("err", ["ENOSYS", "EPERM"])
def test_symlinks_refused_where_openat2_cannot_be_used(shim, err):
    """A kernel without openat2, or a seccomp profile that refuses it: every
    read is judged as the kernel resolves it (the real open follows
    symlinks the lexical check never saw)."""
    import errno as E
    got = run_py(shim, NO_OPENAT2, getattr(E, err))
    assert got == {"lfile": "EACCES", "ldir/id_x": "EACCES", "chain1": "EACCES", "rel/sub/k": "EACCES",
                   ".env": "EACCES", "readable": "ok:plain", "okl": "ok:plain", "okdir/f": "ok:plain",
                   "nope": "ENOENT", "twice": "EACCES"}, got
