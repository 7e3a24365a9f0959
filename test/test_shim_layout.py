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
