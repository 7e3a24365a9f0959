"""Where libftsbx.so keeps what every process writes at start (shim.h:
HOT_DATA), and how it is bound. Each page a process first writes costs it a
page fault, and there is one of those per program start; on a machine that
virtualises page tables a fault costs as much as a few dozen system calls.
The library is bound lazily (-z lazy): bound at load, its 117 calls into
libc were looked up at every program start, 70,000 instructions of a start
of true, most of them for functions the program never calls. Its .got.plt,
which the loader writes anyway, shares a page with .data (the shim's state,
the sticky environment) and the start of .bss (the real functions'
pointers). A process that forks calls, before its first fork, the libc
functions a fork child's exec takes (txn.c: warm_libc), so that the child
looks nothing up. And it has no _init or _fini (linked without the start
files), whose page a process would fault in at start or at exit.
"""
import os
import re
import shutil
import subprocess

import pytest

from conftest import BUILD

SHIM = os.path.join(BUILD, "libftsbx.so")
PAGE = 4096


def sections():
    out = subprocess.run(["readelf", "-SW", SHIM], capture_output=True, check=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        f = line.replace("[ ", "[").split()
        if len(f) > 5 and f[0].startswith("[") and f[1].startswith("."):
            found[f[1]] = (int(f[3], 16), int(f[5], 16))
    return found


def dynamic_flags():
    return subprocess.run(["readelf", "-dW", SHIM], capture_output=True, check=True, text=True).stdout


def test_the_library_is_bound_lazily():
    flags = dynamic_flags()
    assert "BIND_NOW" not in flags and " NOW" not in flags, flags
    assert ".got.plt" in sections(), "no .got.plt: bound at load, every call looked up at every start"


def test_got_plt_data_and_the_real_functions_share_one_page():
    if "libubsan" in dynamic_flags():
        pytest.skip("a sanitizer build (make SAN=1) keeps its checks' data in .data")
    s = sections()
    got_at, got_size = s[".got.plt"]
    data_at, data_size = s[".data"]
    real_at, real_size = s[".bss.ftsbx_real"]
    # the .got.plt's first three entries are the loader's, in RELRO
    assert (got_at + 24) // PAGE == data_at // PAGE == (data_at + data_size - 1) // PAGE, \
        f".got.plt at {got_at:#x}, .data {data_size} bytes from {data_at:#x}: more than one page (shim.h: HOT_DATA)"
    assert real_at >= data_at + data_size and real_at // PAGE == data_at // PAGE, (hex(data_at), hex(real_at))
    assert real_size > 100 * 8, "the real functions' pointers are not in .bss.ftsbx_real"


WARM = r"""for i in 1 2 3; do /bin/true; done; /bin/true | cat; x=$(/bin/echo hi); /bin/true > f
(cd /; /bin/true); /bin/echo x >> f; cat f 2>&1 > g"""


def child_lookups(log):
    """LD_DEBUG=bindings,files output: the symbols the shim looked up (at
    a call through its .got.plt, or by dlsym: REAL) in a fork child before
    it exec'd, as (pid, symbol). The loader writes a message in pieces (its
    version, its newline apart), which the processes sharing a pipe
    interleave: each message is taken from its "PID:<tab>" on."""
    state, found = {}, []
    for m in re.finditer(r"(\d+):\t(.*?)(?=\s+\d+:\t|\Z)", log, re.S):
        pid, msg = m.groups()
        state.setdefault(pid, "child" if state else "root")
        if "generating link map" in msg:
            if state[pid] == "child":
                state[pid] = "exec'd"
            continue
        b = re.search(r"binding file (\S+) \[0\] to \S+ \[0\]: normal symbol `([^']+)'", msg)
        if b and "libftsbx" in b.group(1) and state[pid] == "child":
            found.append((pid, b.group(2)))
    return found


def test_a_fork_child_looks_nothing_up_before_it_execs(tmp_path):
    """A shell's children (pipes, redirections, subshells, command
    substitutions, appends whose pre-image is journaled) find every
    function the shim calls bound already, by the shell before its first
    fork. The session is made by a first run (the first writer makes log/
    and the objects); the second is the one looked at."""
    env = dict(os.environ, LD_PRELOAD=SHIM, FTSBX_JOURNAL=str(tmp_path / "j"), HOME=str(tmp_path),
               FTSBX_WORKSPACE=str(tmp_path))
    for k in ("FTSBX_TXN", "FTSBX_ROOT", "FTSBX_POLICY"):
        env.pop(k, None)
    for run in range(2):
        r = subprocess.run(["bash", "-c", WARM], cwd=tmp_path, env=dict(env, LD_DEBUG="bindings,files"),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "g").read_text() == "x\n"
    log = r.stderr + r.stdout
    pids = {m.group(1) for m in re.finditer(r"(\d+):\t", log)}
    assert len(pids) >= 8, f"only {len(pids)} processes: LD_DEBUG said nothing?"
    found = child_lookups(log)
    assert not found, f"fork children looked these up (txn.c: warm_libc, warm_exec_path): {found}"


def test_fork_children_take_the_pid_namespace_from_their_parent(tmp_path):
    """journal/writer.c owner_id: a process that writes the journal names
    its pid namespace, which a first look at /proc/self costs a new process
    some 50 us. A shell finds it once, before its first fork (txn.c:
    warm_owner), and each fork child takes it from its parent (checked
    against getppid: state.c atfork_child), subshells' children too: in a
    session of many forks one stat of /proc/self/ns/pid, where each child
    that wrote made one. A child in a pid namespace of its own
    (unshare --pid) finds its own."""
    if not shutil.which("strace"):
        pytest.skip("no strace")
    env = dict(os.environ, LD_PRELOAD=SHIM, FTSBX_JOURNAL=str(tmp_path / "j"), HOME=str(tmp_path),
               FTSBX_WORKSPACE=str(tmp_path))
    for k in ("FTSBX_TXN", "FTSBX_ROOT", "FTSBX_POLICY"):
        env.pop(k, None)
    script = "for i in 1 2 3 4; do /bin/echo $i > f$i; (/bin/echo s >> f$i; /bin/true); done; /bin/cat f1 f2 > g"
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=newfstatat,stat,statx", "-o", str(tmp_path / "st"),
                        "bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "g").read_text() == "1\ns\n2\ns\n"
    log = (tmp_path / "st").read_text()
    looks = [line for line in log.splitlines() if "/proc/self/ns/pid" in line]
    writers = {line.split()[0] for line in log.splitlines()}
    assert len(writers) >= 8, log[-2000:]
    assert len(looks) == 1, looks
    if shutil.which("unshare") and subprocess.run(["unshare", "--pid", "--fork", "true"],
                                                   capture_output=True).returncode == 0:
        r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=newfstatat,stat,statx", "-o", str(tmp_path / "st2"),
                            "bash", "-c", "/bin/echo a > h; unshare --pid --fork /bin/sh -c '/bin/echo b >> h'"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
        assert (tmp_path / "h").read_text() == "a\nb\n"
        looks = [line for line in (tmp_path / "st2").read_text().splitlines() if "/proc/self/ns/pid" in line]
        assert len(looks) >= 2, looks


def test_no_init_or_fini_function_only_the_arrays():
    """Linked without the start files: no _init or _fini for the loader to
    call (a page of their own at every start and exit); the constructor and
    the destructor run from .init_array and .fini_array."""
    flags = dynamic_flags()
    tags = {line.split()[1] for line in flags.splitlines() if line.strip().startswith("0x")}
    assert "(INIT)" not in tags and "(FINI)" not in tags, flags
    assert "(INIT_ARRAY)" in tags and "(FINI_ARRAY)" in tags, flags


LAYOUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shim", "layout.ld")


def functions():
    """The library's functions: name -> (address, size)."""
    out = subprocess.run(["nm", "-S", "--defined-only", SHIM], capture_output=True, check=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in "tTwW":
            found[f[3]] = (int(f[0], 16), int(f[1], 16))
    return found


def hot_names():
    names = re.findall(r"\*\(\.text\.([A-Za-z_][A-Za-z0-9_.]*) \.text\.hot\.", open(LAYOUT).read())
    names = [n for n in names if n != "hot"]     # the hot-attributed functions' own line
    assert len(names) > 50, "shim/layout.ld lists no hot functions: run test/hot_text.py"
    return names


def test_the_functions_every_process_runs_are_together_at_the_start_of_the_text():
    """shim/layout.ld: what the processes of a session run (test/hot_text.py
    measured it) in one run of pages, .text.startup first; a name the
    library no longer has is a list gone stale (regenerate it)."""
    s = sections()
    hot_at, hot_size = s[".text.ftsbx_hot"]
    text_at, _ = s[".text"]
    # (a sanitizer build's checks make the same functions larger)
    limit = (256 if "libubsan" in dynamic_flags() else 160) << 10
    assert hot_at < text_at and hot_size < limit, (hex(hot_at), hot_size)
    have = functions()
    # (a sanitizer build inlines and clones other functions: .isra, .part)
    stale = [n for n in hot_names() if n not in have and "libubsan" not in dynamic_flags()]
    assert not stale, f"shim/layout.ld names functions the library lacks (run test/hot_text.py): {stale[:10]}"
    for name in ("shim_init", "open_hook", "close", "guard_exec", "jseg_open", "check_now", "execve", "fork"):
        at, size = have[name]
        assert hot_at <= at and at + size <= hot_at + hot_size, (name, hex(at), hex(hot_at), hot_size)


def test_the_large_arrays_of_bss_come_after_the_small_variables():
    """The small variables every process writes share the pages after
    .data; the per-descriptor path cache and the other large arrays follow."""
    if "libubsan" in dynamic_flags():
        pytest.skip("a sanitizer build (make SAN=1) keeps its checks' data in .bss")
    s = sections()
    bss_at, bss_size = s[".bss"]
    large_at, large_size = s[".bss.ftsbx_large"]
    assert large_at >= bss_at + bss_size and large_size > 256 << 10, (hex(bss_at), bss_size, hex(large_at))
    assert bss_size < 16 << 10, f".bss holds {bss_size} bytes before the large arrays: one of them is new?"


def test_relative_relocations_are_packed_where_the_linker_can():
    """DT_RELR: the loader reads a few hundred bytes of relocations at every
    start instead of 15 KB (four pages)."""
    probe = subprocess.run(["cc", "-shared", "-x", "c", "-", "-o", "/dev/null", "-Wl,-z,pack-relative-relocs"],
                           input="int x;", text=True, capture_output=True)
    if probe.returncode != 0:
        pytest.skip("this linker cannot pack relative relocations")
    s = sections()
    assert ".relr.dyn" in s and s[".rela.dyn"][1] < 4096, {k: v for k, v in s.items() if k.startswith(".rel")}
