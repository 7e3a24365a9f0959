"""What the end-to-end tests of the shim share (issue 5; no tests here).

A Shim wraps conftest's Scratch: the workspace BASE/ws, the session
BASE/j/sess, a fake home BASE/home (a .gitconfig, nothing else) and a
TMPDIR BASE/tmp. sh() runs a bash script under libftsbx.so with the
workspace as cwd; snap() snapshots everything a wrapped program may change
(workspace, home, tmp); roundtrip() is the shape of most tests: snapshot,
run, check the tree changed, rewind, snapshot again, identical, verify ok.
"""
import contextlib
import os
import shutil
import subprocess
import time

import pytest

from conftest import BUILD, TXREPLAY, assert_changed, assert_same, snapshot

SHIM = os.path.join(BUILD, "libftsbx.so")
PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
PY = "/usr/bin/python3"
GITCONFIG = b"""[user]
\tname = Shim Test
\temail = shim@example.invalid
[init]
\tdefaultBranch = main
[gc]
\tauto = 0
[maintenance]
\tauto = false
"""


def b(x):
    return x if isinstance(x, bytes) else os.fsencode(str(x))


def q(x):
    """X quoted for a bash script (bytes): '...' with ' escaped."""
    return b"'" + b(x).replace(b"'", b"'\\''") + b"'"


def tail(data, n=3000):
    return data[-n:] if isinstance(data, bytes) else data


class Shim:
    """A scratch workspace whose programs run under the shim."""

    def __init__(self, scratch):
        for prog in (SHIM, TXREPLAY):
            if not os.access(prog, os.R_OK):
                pytest.fail(f"{prog} is not built (make B=... {prog}); set FTSBX_BUILD")
        self.scratch = scratch
        self.base, self.ws, self.journal = scratch.base, scratch.ws, scratch.sess
        self.home = os.path.join(self.base, b"home")
        self.tmp = os.path.join(self.base, b"tmp")
        self.ns = None          # a pid whose mount namespace programs run in
        for d in (self.home, self.tmp):
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(self.home, b".gitconfig"), "wb") as f:
            f.write(GITCONFIG)

    def p(self, rel):
        return os.path.join(self.ws, b(rel))

    def env(self, preload=True, **extra):
        """The environment of a wrapped program (PRELOAD False: a plain one,
        for setting a tree up before the snapshot)."""
        env = dict(PATH=PATH, HOME=os.fsdecode(self.home), TMPDIR=os.fsdecode(self.tmp),
                   LC_ALL="C", GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_DATE="2001-02-03T04:05:06Z",
                   GIT_COMMITTER_DATE="2001-02-03T04:05:06Z")
        if preload:
            env.update(LD_PRELOAD=SHIM, FTSBX_JOURNAL=os.fsdecode(self.journal))
        env.update(extra)
        return env

    def sh(self, script, rc=0, preload=True, timeout=120, env=None, refusals_ok=False):
        """Run bash -c SCRIPT in the workspace; check its exit status is RC
        (None: any) and, unless REFUSALS_OK, that the shim refused nothing."""
        env = env or self.env(preload)
        argv = [b"/bin/bash", b"-c", b(script)]
        if self.ns:             # the shim's variables are set inside the namespace
            shim_vars = [b"%s=%s" % (b(k), b(env.pop(k))) for k in ("LD_PRELOAD", "FTSBX_JOURNAL")
                         if k in env]
            argv = [b"/bin/bash", b"-c", b"cd -- %s || exit 99\n%s" % (q(self.ws), b(script))]
            argv = self.in_ns([b"/usr/bin/env"] + shim_vars + argv, self.ws)
        proc = subprocess.run(argv, cwd=self.ws, capture_output=True, env=env, timeout=timeout)
        where = f"script {b(script)!r}\nexit {proc.returncode}\n" \
                f"stdout: {tail(proc.stdout)!r}\nstderr: {tail(proc.stderr)!r}"
        if rc is not None:
            assert proc.returncode == rc, f"expected exit {rc}: {where}"
        if preload and not refusals_ok:
            assert b"ftsbx: " not in proc.stderr, f"the shim refused something: {where}"
        return proc

    def setup(self, script):
        """Run SCRIPT without the shim (building the tree before the snapshot)."""
        return self.sh(script, preload=False)

    def in_ns(self, argv, wd):
        """ARGV run in the mount namespace of self.ns (if set) with the
        working directory WD (entering a namespace moves to its root)."""
        if not self.ns:
            return argv
        return [b"nsenter", b"-t", b(self.ns), b"-m", b"--wd=" + b(wd), b"--"] + argv

    def snap(self):
        out = {}
        for name, root in ((b"ws", self.ws), (b"home", self.home), (b"tmp", self.tmp)):
            for rel, e in snapshot(root).items():
                out[os.path.join(name, rel)] = e
        return out

    def txreplay(self, *args, rc=0):
        proc = subprocess.run(self.in_ns([b(TXREPLAY)] + [b(a) for a in args], self.base),
                              capture_output=True, cwd=self.base, timeout=300)
        assert rc is None or proc.returncode == rc, \
            f"txreplay {args!r}: exit {proc.returncode}, expected {rc}\n" \
            f"stdout: {tail(proc.stdout)!r}\nstderr: {tail(proc.stderr)!r}"
        return proc

    def rewind(self):
        """Rewind the whole session: exit 0, nothing failed, no drift."""
        proc = self.txreplay("rewind", self.journal)
        last = proc.stdout.splitlines()[-1] if proc.stdout else b""
        assert last.startswith(b"rewound:") and last.endswith(b" 0 drift, 0 failed"), \
            f"rewind: {tail(proc.stdout)!r}\nstderr: {tail(proc.stderr)!r}"
        return proc

    def verify(self):
        return self.txreplay("verify", self.journal)

    def roundtrip(self, script, check=None, before=None, **kw):
        """Snapshot, run SCRIPT under the shim, check the tree changed (and
        CHECK(proc), which looks at what the program did), rewind, compare,
        verify. Returns the program's CompletedProcess."""
        before = before or self.snap()
        proc = self.sh(script, **kw)
        assert_changed(before, self.snap())
        if check:
            check(proc)
        self.rewind()
        assert_same(before, self.snap())
        self.verify()
        return proc

    def program_case(self, name, case):
        """CASE: (programs it needs, script, DID(shim): did it do its work).
        Skipped when a program is not installed; else the round trip."""
        progs, script, did = case
        missing = [p for p in progs if not shutil.which(p)]
        if missing:
            pytest.skip(f"not installed: {' '.join(missing)}")

        def check(proc):
            assert did(self), f"{name}: the program did not do its work\nstderr: {proc.stderr[-2000:]!r}"
        return self.roundtrip(script, check, timeout=300)

    # what a SCRIPT for run_with_log_removed does first: a refusal (a record
    # that changes nothing, which makes log/), then "ready", then it waits
    LOG_MADE_THEN_WAIT = (
        'import os, subprocess, sys\n'
        'try:\n    open("/ftsbx-outside-every-root/x", "w")\nexcept OSError:\n    pass\n'
        'print("ready", flush=True)\nsys.stdin.read(1)\n')

    def run_with_log_removed(self, script):
        """Run the Python SCRIPT under the shim until it prints "ready",
        remove the journal's log/ from outside, let it go on (a byte on its
        stdin): the (process, stdout, stderr) it ended with."""
        proc = subprocess.Popen([PY, "-c", script], cwd=self.ws, env=self.env(), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert proc.stdout.readline() == b"ready\n"
            assert os.path.isdir(os.path.join(self.journal, b"log"))
            shutil.rmtree(os.path.join(self.journal, b"log"))
            out, err = proc.communicate(b"x", timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        return proc, out, err

    def read(self, rel):
        with open(self.p(rel), "rb") as f:
            return f.read()

    def write(self, rel, data, mode=None):
        path = self.p(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b(data))
        if mode is not None:
            os.chmod(path, mode)

    def exists(self, rel):
        return os.path.lexists(self.p(rel))

    def gcc(self, out, *sources, flags=()):
        """Compile test/hostile/SOURCES into BASE/bin/OUT (not under the
        shim; outside the snapshot). Returns the program's path."""
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile")
        bindir = os.path.join(self.base, b"bin")
        os.makedirs(bindir, exist_ok=True)
        exe = os.path.join(bindir, b(out))
        argv = ["gcc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror", "-O1", "-o", exe]
        argv += [os.path.join(here, s) for s in sources] + list(flags)
        proc = subprocess.run([b(a) for a in argv], capture_output=True)
        assert proc.returncode == 0, f"gcc {sources}: {proc.stderr.decode(errors='replace')}"
        return exe


@contextlib.contextmanager
def in_mount_namespace(shim, mount_args, what):
    """SHIM's programs and txreplay in a mount namespace of their own (a
    sleeping process holds it; they run in it through nsenter), after
    `mount MOUNT_ARGS` there; skipped where WHAT is not permitted."""
    holder = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "600"],
                              stderr=subprocess.PIPE)
    try:
        mine = os.readlink("/proc/self/ns/mnt")
        for _ in range(200):
            if holder.poll() is not None or os.readlink(f"/proc/{holder.pid}/ns/mnt") != mine:
                break
            time.sleep(0.01)
        if holder.poll() is not None:
            pytest.skip(f"unshare -m is not permitted: {holder.stderr.read().decode().strip()}")
        mount = subprocess.run(["nsenter", "-t", str(holder.pid), "-m", "mount", *mount_args], capture_output=True)
        if mount.returncode:
            pytest.skip(f"cannot {what} in a mount namespace: {mount.stderr.decode().strip()}")
        shim.ns = holder.pid
        yield shim
    finally:
        shim.ns = None
        holder.kill()
        holder.wait()
