"""[programs]: the programs the shim cannot see into, found at exec by
looking at the ELF file (shim/opaque.c). The agent keeps what it found per
inode; a program changed since (rewritten in place, even with its old
modification time put back or the same size, made set-user-ID, or another
file renamed over it) is looked at again, so the warning follows the file's content, never an
old answer. Files are made more than two seconds before the agent runs, so
that their first answers are kept (the shim does not keep an answer about a
file changed within the last two seconds)."""
import os
import shutil
import subprocess
import textwrap
import time

import pytest

from conftest import BUILD

SHIM = os.path.join(BUILD, "libftsbx.so")


def run_wrapped(tmp_path, ws, script):
    """Python SCRIPT run in WS under the shim (journal and HOME under
    TMP_PATH, the default policy, no transaction of the test's own)."""
    env = dict(os.environ, LD_PRELOAD=SHIM, FTSBX_JOURNAL=str(tmp_path / "j"), HOME=str(tmp_path),
               PATH="/usr/bin:/bin")
    for k in ("FTSBX_TXN", "FTSBX_ROOT", "FTSBX_POLICY"):
        env.pop(k, None)
    return subprocess.run(["/usr/bin/python3", "-c", script], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=120)
HELLO = '#include <stdio.h>\nint main(void) { puts("ran"); return 0; }\n'

# Each step: an action on ./prog, then two runs of it by each start method;
# the agent prints, per run, whether the shim warned.
AGENT = textwrap.dedent("""
    import os, shutil, subprocess, sys, time

    def runs():
        out = []
        for how in ("vfork", "spawn", "vfork", "spawn"):
            if how == "vfork":
                r = subprocess.run(["./prog"], capture_output=True, text=True)   # may crash
                err = r.stderr
            else:
                rd, wr = os.pipe()
                pid = os.posix_spawn("./prog", ["./prog"], os.environ,
                                     file_actions=[(os.POSIX_SPAWN_DUP2, wr, 1)])
                os.close(wr)
                os.read(rd, 100)
                os.close(rd)
                os.waitpid(pid, 0)
                err = ""        # the parent (this process) says it: see the log
            out.append(err)
        return out

    def rewrite(src, keep_mtime=False):
        st = os.stat("prog")
        data = open(src, "rb").read()
        with open("prog", "r+b") as f:          # the same inode
            f.write(data)
            f.truncate(len(data))
        if keep_mtime:
            os.utime("prog", ns=(st.st_atime_ns, st.st_mtime_ns))

    steps = []
    def step(name):
        sys.stderr.write(f"STEP {name}\\n")
        sys.stderr.flush()
        steps.append((name, runs()))

    step("static")
    rewrite("dyn")
    step("rewritten dynamic")
    rewrite("static2", keep_mtime=True)
    step("rewritten static, old mtime")
    time.sleep(2.2)
    step("static, settled")
    # one byte (the ELF type: no longer a static executable), the same
    # size, the old times put back: only the change time tells
    st = os.stat("prog")
    with open("prog", "r+b") as f:
        f.seek(16)
        f.write(bytes([3]))
    os.utime("prog", ns=(st.st_atime_ns, st.st_mtime_ns))
    step("same size, old times")
    shutil.copy("dyn", "prog.new")
    os.rename("prog.new", "prog")
    step("dynamic renamed over")
    os.chmod("prog", 0o4755)
    step("made set-user-ID")
    time.sleep(2.2)
    step("set-user-ID, settled")
    os.chmod("prog", 0o755)
    step("plain again")
    print(repr(steps))
""")


def test_a_program_changed_since_its_last_look_is_looked_at_again(tmp_path):
    if not shutil.which("gcc"):
        pytest.skip("no gcc")
    ws = tmp_path / "ws"
    ws.mkdir()
    for name, flags in (("prog", ["-static"]), ("static2", ["-static", "-O0"]), ("dyn", [])):
        subprocess.run(["gcc", "-O2", *flags, "-x", "c", "-", "-o", str(ws / name)], input=HELLO.encode(),
                       check=True)
    time.sleep(2.2)             # old enough to be kept
    r = run_wrapped(tmp_path, ws, AGENT)
    assert r.returncode == 0, r.stderr
    steps = eval(r.stdout.strip().splitlines()[-1])
    # the warnings the agent's own posix_spawn printed, per step
    own = {}
    name = None
    for line in r.stderr.splitlines():
        if line.startswith("STEP "):
            name = line[5:]
            own[name] = []
        elif line.startswith("ftsbx: warning:") and name:
            own[name].append(line)
    want = {"static": "a static binary", "rewritten dynamic": None, "rewritten static, old mtime": "a static binary",
            "static, settled": "a static binary", "same size, old times": None, "dynamic renamed over": None,
            "made set-user-ID": "a set-user-ID program", "set-user-ID, settled": "a set-user-ID program",
            "plain again": None}
    assert [n for n, _ in steps] == list(want)
    for (n, errs), (_, kind) in zip(steps, want.items()):
        vfork_warned = [kind in e if kind else "ftsbx: warning" in e for e in (errs[0], errs[2])]
        assert vfork_warned == [bool(kind)] * 2, (n, errs)
        spawn_warned = [line for line in own[n] if (kind or "ftsbx: warning") in line]
        assert len(spawn_warned) == (2 if kind else 0), (n, own[n])
        if not kind:
            assert not own[n], (n, own[n])


def elf(phoff, note_at, interp=True, namesz=4):
    """A 64-bit ELF file (it cannot run: it only has to be looked at) with
    its program headers at PHOFF and a note named "Go" (a Go build ID) at
    NOTE_AT, 12 KiB long. Go's linker gives the name "Go\\0\\0" the size 4;
    the ELF convention would give it 3."""
    import struct
    phnum = 2 if interp else 1
    data = bytearray(12288)
    data[:16] = b"\x7fELF\x02\x01\x01" + bytes(9)
    data[16:64] = struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, phoff, 0, 0, 64, 56, phnum, 0, 0, 0)
    note = struct.pack("<III", namesz, 4, 4) + b"Go\0\0" + b"abcd"
    data[note_at:note_at + len(note)] = note
    phdrs = [struct.pack("<IIQQQQQQ", 4, 4, note_at, 0, 0, len(note), len(note), 4)]
    if interp:
        phdrs.append(struct.pack("<IIQQQQQQ", 3, 4, 11000, 0, 0, 28, 28, 1))
        data[11000:11028] = b"/lib64/ld-linux-x86-64.so.2\0"
    for i, ph in enumerate(phdrs):
        data[phoff + 56 * i:phoff + 56 * (i + 1)] = ph
    return bytes(data)


@pytest.mark.parametrize("phoff,note_at,go,namesz", [
    (64, 600, True, 4),         # all in the first KiB
    (64, 600, True, 3),         # the name's size as the ELF convention gives it
    (64, 5000, True, 4),        # the note further in, within the 8 KiB looked at
    (3000, 400, True, 4),       # the program headers further in
    (64, 8180, False, 4),       # the note runs past 8 KiB: not looked at (as ever)
    (8180, 400, False, 4),      # the program headers run past 8 KiB
])
def test_go_programs_are_found_wherever_their_note_lies_in_the_first_8_kib(tmp_path, phoff, note_at, go, namesz):
    ws = tmp_path / "ws"
    ws.mkdir()
    prog = ws / "prog"
    prog.write_bytes(elf(phoff, note_at, namesz=namesz))
    prog.chmod(0o755)
    r = run_wrapped(tmp_path, ws, "import os\ntry:\n    os.waitpid(os.posix_spawn('./prog', ['./prog'], os.environ), 0)\n"
                    "except OSError as e:\n    print(e.errno)\n")
    assert ("is a Go program" in r.stderr) == go, r.stderr


SYMLINK_AGENT = textwrap.dedent("""
    import os, shutil, subprocess, sys

    def warned(path):
        r = subprocess.run([path], capture_output=True, text=True)
        return "a static binary" in r.stderr

    out = []
    for step in ("static", "replaced"):
        if step == "replaced":
            shutil.copy("dyn", "bin/real/prog.new")
            os.rename("bin/real/prog.new", "bin/real/prog")
        out.append([warned(p) for p in ("./l2", "./dirlink/l1", "./bin/l1", "./bin/real/prog") for _ in (0, 1)])
    print(repr(out))
""")


def test_a_program_reached_through_symlinks_is_judged_by_the_file_they_lead_to(tmp_path):
    """(The policy resolves the program through its symlinks and hands the
    file it found to the look at the ELF file: relative targets, chains and
    symlinked directories lead to the same file the kernel runs.)"""
    if not shutil.which("gcc"):
        pytest.skip("no gcc")
    ws = tmp_path / "ws"
    (ws / "bin" / "real").mkdir(parents=True)
    subprocess.run(["gcc", "-O2", "-static", "-x", "c", "-", "-o", str(ws / "bin" / "real" / "prog")],
                   input=HELLO.encode(), check=True)
    subprocess.run(["gcc", "-O2", "-x", "c", "-", "-o", str(ws / "dyn")], input=HELLO.encode(), check=True)
    os.symlink("real/prog", ws / "bin" / "l1")
    os.symlink("bin/l1", ws / "l2")
    os.symlink("bin", ws / "dirlink")
    time.sleep(2.2)             # old enough to be kept
    r = run_wrapped(tmp_path, ws, SYMLINK_AGENT)
    assert r.returncode == 0, r.stderr
    static, replaced = eval(r.stdout.strip().splitlines()[-1])
    assert static == [True] * 8, static
    assert replaced == [False] * 8, replaced


def test_the_loader_run_as_a_program_is_seen_into_and_refused_only_where_asked(tmp_path):
    """[programs] ldso: the dynamic loader run as a program preloads the
    shim into what it runs, so by default it runs with no warning and what
    it runs is judged and journaled; `ldso = refuse` (strict) refuses it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    loader = "/lib64/ld-linux-x86-64.so.2"
    if not os.path.exists(loader):
        pytest.skip("no x86-64 glibc loader")
    script = (f"import subprocess\ntry:\n    r = subprocess.run([{loader!r}, '/bin/sh', '-c', 'echo ran > out'],"
              f" capture_output=True, text=True)\n    print(r.returncode); print(r.stderr, end='')\n"
              f"except OSError as e:\n    print('refused', e.errno)")
    r = run_wrapped(tmp_path, ws, script)
    assert r.returncode == 0 and r.stdout.split("\n")[0] == "0", r.stdout + r.stderr
    assert "warning" not in r.stdout + r.stderr and (ws / "out").read_text() == "ran\n"
    seen = subprocess.run([os.path.join(os.path.dirname(SHIM), "txreplay"), "log", str(tmp_path / "j")],
                          capture_output=True, text=True)
    assert "out" in seen.stdout, seen.stdout + seen.stderr     # the write was journaled
    (ws / "out").unlink()
    pol = tmp_path / "ldso.ini"
    pol.write_text("[policy]\nbase = default\n\n[programs]\nldso = refuse\n")
    env = dict(os.environ, LD_PRELOAD=SHIM, FTSBX_JOURNAL=str(tmp_path / "j2"), HOME=str(tmp_path),
               FTSBX_POLICY=str(pol), PATH="/usr/bin:/bin")
    for k in ("FTSBX_TXN", "FTSBX_ROOT"):
        env.pop(k, None)
    r = subprocess.run(["/usr/bin/python3", "-c", script], cwd=ws, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.split("\n")[0] == "refused 1", r.stdout + r.stderr      # EPERM
    assert not (ws / "out").exists()
    log = subprocess.run([os.path.join(os.path.dirname(SHIM), "txreplay"), "log", str(tmp_path / "j2")],
                         capture_output=True, text=True)
    assert "[programs] ldso" in log.stdout, log.stdout + log.stderr
