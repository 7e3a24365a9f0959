"""The compiled policy a session's processes map (guard.c, policy/decide.c).

The session's root compiles its policy once and leaves the block in the
session (in SESSION/shared, or SESSION/policy-ROOTPID for a second root of
the same session); every later process maps it and checks each of its
three parts (magic, version, size, hash, every offset) before it trusts
it: the core (the path rules) at its first question to the policy (here:
cat's open of a file), the exec and network rules at its first exec or
connect, the rules' texts at its first refusal. A block that was cut short,
lengthened or changed in any byte stops the process there, before the call
it was asked about ("the session's compiled policy is damaged", exit 126):
fail closed, never run with a policy nobody wrote. The intact block, and
the same block again after the damage is undone, run as usual.
"""
import os
import shutil
import struct
import subprocess

import pytest

from conftest import BUILD

SHIM = os.path.join(BUILD, "libftsbx.so")


class SlotBlob:
    """The block a root leaves in SESSION/shared: its bytes after what the
    session maps (where the block's magic is), its length on the first page
    (struct jpolicy_slot at byte 256: owner, length)."""
    LEN_AT = 256 + 8

    def __init__(self, path):
        self.path = path
        data = path.read_bytes()
        self.at = data.index(b"FPOL", 4096)
        assert self.at % 4096 == 0, self.at

    def read_bytes(self):
        data = self.path.read_bytes()
        return data[self.at:self.at + struct.unpack_from("<Q", data, self.LEN_AT)[0]]

    def write_bytes(self, b):
        with open(self.path, "r+b") as f:
            f.seek(self.at)
            f.write(b)
            f.seek(self.LEN_AT)
            f.write(struct.pack("<Q", len(b)))


def make_session(tmp_path, kind):
    """A session made by a root (sh), and the environment of a process the
    root's tool call would start in it. The session's first root leaves its
    block in SESSION/shared (FTSBX_ROOT=PID+); a later root of the same
    session in a file of its own (SESSION/policy-PID)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LD_PRELOAD": SHIM,
           "FTSBX_JOURNAL": str(tmp_path / "j")}
    for _ in range(1 if kind == "shared" else 2):
        out = subprocess.run(["/bin/sh", "-c", 'echo "$FTSBX_ROOT"'], env=env, cwd=tmp_path, capture_output=True,
                             text=True, check=True)
    root = out.stdout.strip()
    if kind == "shared":
        assert root.endswith("+"), root
        blob = SlotBlob(tmp_path / "j" / "shared")
    else:
        assert root.isdigit(), root
        blob = tmp_path / "j" / f"policy-{root}"
        assert blob.exists(), list((tmp_path / "j").iterdir())
        os.chmod(blob, 0o600)       # the root leaves it read-only: the test damages it
    assert blob.read_bytes().startswith(b"FPOL")
    child = dict(env, FTSBX_ROOT=root, FTSBX_TXN="7")
    return blob, child, tmp_path


@pytest.fixture(params=["shared", "file"])
def session(request, tmp_path):
    return make_session(tmp_path, request.param)


def start(child, cwd):
    (cwd / "note").write_text("started\n")
    return subprocess.run(["/bin/cat", "note"], env=child, cwd=cwd, capture_output=True, text=True, timeout=30)


def start_all_parts(child, cwd):
    """A shell that execs cat (the exec rules), whose first open is refused
    (the texts, for the reason) before it reads the note (the core)."""
    (cwd / "note").write_text("started\n")
    (cwd / ".ssh").mkdir(exist_ok=True)
    (cwd / ".ssh" / "id_rsa").write_text("secret\n")
    return subprocess.run(["/bin/sh", "-c", "cat .ssh/id_rsa note"], env=child, cwd=cwd, capture_output=True,
                          text=True, timeout=30)


def ran_all_parts(r):
    return r.returncode == 1 and r.stdout == "started\n" and "[paths] hidden" in r.stderr


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
    r = start_all_parts(child, cwd)
    assert ran_all_parts(r), (r.returncode, r.stdout, r.stderr)
    # the header (magic, version, size, hash, the tables), the filters, the
    # strings and the entries: offsets spread over the whole block
    offsets = sorted(set(list(range(0, 64, 3)) + list(range(64, len(good), len(good) // 40 + 1)) +
                         [len(good) - 1]))
    for off in offsets:
        bad = bytearray(good)
        bad[off] ^= 1 << (off % 8)
        blob.write_bytes(bytes(bad))
        r = start_all_parts(child, cwd)
        assert refused(r), (off, r.returncode, r.stderr)
    blob.write_bytes(good)
    assert ran_all_parts(start_all_parts(child, cwd))
    assert start(child, cwd).returncode == 0


def test_a_process_checks_only_the_parts_of_the_compiled_policy_it_needs(session):
    """A cat of a file reads the core only: damage in the exec rules or the
    texts stops the first process that needs them, not one that does not."""
    blob, child, cwd = session
    good = blob.read_bytes()
    # struct pol_hdr: 64 bytes of fixed fields, then part[0] {off, size,
    # str_off, str_len, hash}, part[1] {off, ...}: the exec part starts
    # where the core ends
    core, exec_off = struct.unpack_from("<I", good, 68)[0], struct.unpack_from("<I", good, 88)[0]
    assert core == exec_off, (core, exec_off)
    assert 0 < core < len(good) // 4, core
    for off in (core + 8, len(good) - 1):
        bad = bytearray(good)
        bad[off] ^= 0x10
        blob.write_bytes(bytes(bad))
        r = start(child, cwd)
        assert r.returncode == 0 and r.stdout == "started\n", (off, r.stderr)
        assert refused(start_all_parts(child, cwd)), off
    blob.write_bytes(good)



def test_a_session_without_its_compiled_policy_loads_the_policy_itself(tmp_path):
    """(A session made by an older shim has no block: the process compiles
    the policy it names, or the built-in one, as the root did.)"""
    blob, child, cwd = make_session(tmp_path, "file")
    blob.unlink()
    r = start(child, cwd)
    assert r.returncode == 0 and r.stdout == "started\n", r.stderr


# Threads that ask their first questions at once: one maps the block, the
# others wait for it; every answer is the policy's (a hidden file refused,
# an ordinary one read).
THREADS = r"""
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_barrier_t go;
static const char *hidden, *plain;
static int bad;

static void *ask(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&go);
	int h = open(hidden, O_RDONLY), e = errno, p = open(plain, O_RDONLY);
	if (h >= 0 || e != EACCES || p < 0)
		__atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[16];

	(void)argc;
	hidden = argv[1];
	plain = argv[2];
	pthread_barrier_init(&go, NULL, 16);
	for (int i = 0; i < 16; i++)
		pthread_create(&t[i], NULL, ask, NULL);
	for (int i = 0; i < 16; i++)
		pthread_join(t[i], NULL);
	printf("%d\n", bad);
	return 0;
}
"""


def test_threads_asking_their_first_questions_at_once_share_one_mapping(session):
    blob, child, cwd = session
    if not shutil.which("gcc"):
        pytest.skip("no gcc")
    exe = cwd / "threads"
    subprocess.run(["gcc", "-O2", "-pthread", "-x", "c", "-", "-o", str(exe)], input=THREADS.encode(), check=True)
    (cwd / ".ssh").mkdir()
    (cwd / ".ssh" / "id_rsa").write_text("secret\n")
    (cwd / "note").write_text("plain\n")
    for _ in range(20):
        r = subprocess.run([str(exe), str(cwd / ".ssh" / "id_rsa"), str(cwd / "note")], env=child, cwd=cwd,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and r.stdout == "0\n", (r.stdout, r.stderr)


@pytest.mark.parametrize("spelling", ["{j}", "{j}/", "{j}//", "{p}//{n}", "{p}/./{n}", "{p}/../{b}/{n}"])
def test_any_spelling_of_the_session_directory_finds_it_and_keeps_it_off_limits(session, spelling):
    """(The root exports the session directory normalised; a process given
    another spelling of it normalises it itself.)"""
    blob, child, cwd = session
    j = child["FTSBX_JOURNAL"]
    p, n = os.path.split(j)
    env = dict(child, FTSBX_JOURNAL=spelling.format(j=j, p=p, n=n, b=os.path.basename(p)))
    r = subprocess.run(["/bin/cat", "note", os.path.join(j, "session")], env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=30)
    assert r.stdout == "", r.stdout
    (cwd / "note").write_text("started\n")
    r = subprocess.run(["/bin/cat", "note", os.path.join(j, "session")], env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=30)
    assert r.stdout == "started\n" and r.returncode == 1, (r.stdout, r.stderr)
    assert "off limits" in r.stderr, r.stderr
