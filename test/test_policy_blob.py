"""The compiled policy a session's processes map (guard.c, policy/decide.c).

The session's root compiles its policy once and leaves the block in the
session directory (SESSION/policy-ROOTPID); every later process maps it and
checks it (magic, version, size, hash, every offset) before it trusts it. A
block that was cut short, lengthened or changed in any byte stops the
process at start ("the session's compiled policy is damaged", exit 126):
fail closed, never run with a policy nobody wrote. The intact block, and
the same block again after the damage is undone, run as usual.
"""
import os
import shutil
import subprocess

import pytest

from conftest import BUILD

SHIM = os.path.join(BUILD, "libftsbx.so")


@pytest.fixture
def session(tmp_path):
    """A session made by a root (sh), and the environment of a process the
    root's tool call would start in it."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LD_PRELOAD": SHIM,
           "FTSBX_JOURNAL": str(tmp_path / "j")}
    out = subprocess.run(["/bin/sh", "-c", 'echo "$FTSBX_ROOT"'], env=env, cwd=tmp_path, capture_output=True,
                         text=True, check=True)
    root = out.stdout.strip()
    blob = tmp_path / "j" / f"policy-{root}"
    assert blob.exists(), list((tmp_path / "j").iterdir())
    os.chmod(blob, 0o600)       # the root leaves it read-only: the test damages it
    child = dict(env, FTSBX_ROOT=root, FTSBX_TXN="7")
    return blob, child, tmp_path


def start(child, cwd):
    return subprocess.run(["/bin/echo", "started"], env=child, cwd=cwd, capture_output=True, text=True,
                          timeout=30)


def refused(r):
    return r.returncode == 126 and "compiled policy is damaged" in r.stderr and not r.stdout


def test_an_intact_compiled_policy_is_mapped_and_used(session):
    blob, child, cwd = session
    r = start(child, cwd)
    assert r.returncode == 0 and r.stdout == "started\n", r.stderr


def test_a_compiled_policy_cut_short_or_lengthened_stops_the_process(session):
    blob, child, cwd = session
    good = blob.read_bytes()
    for size in (len(good) - 1, len(good) - 8, len(good) - 64, len(good) // 2, 200, 0):
        blob.write_bytes(good[:size])
        r = start(child, cwd)
        assert refused(r), (size, r.returncode, r.stderr)
    blob.write_bytes(good + b"\0")
    assert refused(start(child, cwd))
    blob.write_bytes(good)
    assert start(child, cwd).returncode == 0


def test_a_compiled_policy_with_any_byte_changed_stops_the_process(session):
    blob, child, cwd = session
    good = blob.read_bytes()
    # the header (magic, version, size, hash, the tables), the filters, the
    # strings and the entries: offsets spread over the whole block
    offsets = sorted(set(list(range(0, 64, 3)) + list(range(64, len(good), len(good) // 40 + 1)) +
                         [len(good) - 1]))
    for off in offsets:
        bad = bytearray(good)
        bad[off] ^= 1 << (off % 8)
        blob.write_bytes(bytes(bad))
        r = start(child, cwd)
        assert refused(r), (off, r.returncode, r.stderr)
    blob.write_bytes(good)
    assert start(child, cwd).returncode == 0


def test_a_session_without_its_compiled_policy_loads_the_policy_itself(session):
    """(A session made by an older shim has no block: the process compiles
    the policy it names, or the built-in one, as the root did.)"""
    blob, child, cwd = session
    blob.unlink()
    r = start(child, cwd)
    assert r.returncode == 0 and r.stdout == "started\n", r.stderr
