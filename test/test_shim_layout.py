"""Where libftsbx.so keeps what every process writes at start (shim.h:
HOT_DATA). Each page a process first writes costs it a page fault, and
there is one of those per program start; on a machine that virtualises page
tables a fault costs as much as a few dozen system calls. The library is
linked with -z now: its .got is relocated at load and read-only (RELRO), no
fork child writes it when it first calls a function, and the initialised
data starts on a page of its own. That page, which the loader writes anyway
(it zeroes what .bss shares of it), must hold all of .data: the shim's
state, the real functions' pointers, the sticky environment. And it has no
_init or _fini (linked without the start files), whose page a process would
fault in at start or at exit.
"""
import os
import re
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


def test_the_library_is_bound_at_load_with_its_got_read_only():
    flags = dynamic_flags()
    assert "BIND_NOW" in flags or " NOW" in flags, flags
    assert ".got.plt" not in sections(), "a .got.plt: lazy binding, written by fork children"


def test_data_and_the_start_of_bss_share_one_page():
    if "libubsan" in dynamic_flags():
        pytest.skip("a sanitizer build (make SAN=1) keeps its checks' data in .data")
    s = sections()
    data_at, data_size = s[".data"]
    bss_at, _ = s[".bss"]
    assert bss_at == data_at + data_size or bss_at - (data_at + data_size) < 64, (hex(data_at), hex(bss_at))
    assert data_at // PAGE == bss_at // PAGE, \
        f".data is {data_size} bytes from {data_at:#x}: it spills onto a second page (shim.h: HOT_DATA)"


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
