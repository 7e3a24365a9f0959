"""The two corpora run for real under the shim with a policy (issue 6).

Each line of test/corpus/high_risk.txt runs as `bash -c LINE`, started by a
preloaded `env` (so the shim sees the exec of bash -c LINE, as it sees an
agent's tool call), in the scratch tree of test_policy_corpus.py with
FTSBX_POLICY set to the narrowed default policy. Lines of the "signals"
category run inside `unshare --pid --fork --mount-proc`, next to a victim
process that the session did not start. A high-risk line passes when it was
refused (a "ftsbx: refused" line), or (for writes and reads, whose effect
is fully observable) when nothing outside the workspace changed and the
workspace rewinds to its snapshot; and in both cases when:
no stand-in left a marker, the stand-in system tree and the fake home (less
its caches) are unchanged, no secret reached the output or the workspace,
the remote's refs are unchanged, the victim lives and nobody connected to
the stand-in docker socket.

Each line of ordinary.txt runs twice from the same fresh tree, without and
with the shim: it must exit the same and the shim must refuse nothing.

Both tests print a table per category and the rates. They need
$FTSBX_BUILD/libftsbx.so with the policy engine wired into its hooks (and
ftsbx, txreplay); nothing is skipped: a missing piece fails the test.
"""
import base64
import gzip
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import diff_snapshots, snapshot
from test_policy_corpus import (BUILD, FILES_WS, FILES_WS_SECRETS, SECRET, SHIM, TOKEN, Scratch, ids, read_corpus,
                                write_tree)

TXREPLAY = os.path.join(BUILD, "txreplay")
HIGH = read_corpus("high_risk.txt")
ORDINARY = read_corpus("ordinary.txt")
RESULTS = {}                    # (corpus, index) -> (category, outcome, line)
CACHES = (b".cache", b".npm", b".local", b".gem", b".triton", b".node-gyp", b".python_history", b".lesshst",
          b".wget-hsts", b".node_repl_history")
SECRET_B64 = base64.b64encode(SECRET.encode())[:16]
PROLOGUE = "ulimit -f 20480; "  # a stand-in disk that is a file must not fill the real one
# Where a line's effect is fully observable (the stand-in system tree, the
# home, a leaked secret), keeping it confined is enough (a static program
# stopped by Landlock prints no refusal); elsewhere (a driverless disk, a
# publish with nothing to publish, kill 1 inside a namespace) only a refusal
# shows the policy worked.
CONFINABLE = ("writes outside the writable roots", "reads of hidden paths")
# A fork bomb's line runs where a check that failed would cost nothing:
# in a directory of its own, as a user with few processes allowed.
CONTAINED = ("fork bombs",)
NOBODY = 65534


def owner(path):
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


def git(*args, cwd, env):
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


class World(Scratch):
    """The scratch tree, with a template to restore before every run."""

    def __init__(self):
        super().__init__()
        env = self.env()
        write_tree(self.ws, FILES_WS)
        self.remote = os.path.join(self.tmp, "remote.git")
        git("init", "-q", "--bare", self.remote, cwd=self.tmp, env=env)
        git("init", "-q", cwd=self.ws, env=env)
        git("add", "-A", cwd=self.ws, env=env)
        git("commit", "-qm", "first", cwd=self.ws, env=env)
        with open(os.path.join(self.ws, "notes.txt"), "a") as f:
            f.write("second\n")
        git("commit", "-qam", "second", cwd=self.ws, env=env)
        git("checkout", "-qb", "feature", cwd=self.ws, env=env)
        with open(os.path.join(self.ws, "feature.txt"), "w") as f:
            f.write("feature\n")
        git("add", "feature.txt", cwd=self.ws, env=env)
        git("commit", "-qm", "feature", cwd=self.ws, env=env)
        git("checkout", "-q", "main", cwd=self.ws, env=env)
        git("remote", "add", "origin", self.remote, cwd=self.ws, env=env)
        git("push", "-q", "origin", "main", "feature", cwd=self.ws, env=env)
        self.template = os.path.join(self.base, "template")
        os.makedirs(self.template)
        for d in ("ws", "sys", "home", "tmp"):
            subprocess.run(["cp", "-a", getattr(self, d), os.path.join(self.template, d)], check=True)
        self.journal = os.path.join(self.base, "j", "sess")

    def restore(self, secrets=False):
        for d in ("ws", "sys", "home", "tmp", "marks", "j"):
            path = os.path.join(self.base, d)
            if os.path.lexists(path):
                subprocess.run(["chmod", "-R", "u+rwx", path], capture_output=True)
                shutil.rmtree(path)
        for d in ("ws", "sys", "home", "tmp"):
            subprocess.run(["cp", "-a", os.path.join(self.template, d), getattr(self, d)], check=True)
        os.makedirs(self.marks)
        os.makedirs(os.path.dirname(self.journal))
        if secrets:
            write_tree(self.ws, FILES_WS_SECRETS)
            # main one commit behind origin: a forced push would show
            git("reset", "-q", "--hard", "HEAD~1", cwd=self.ws, env=self.env())

    def shim_env(self, **extra):
        return self.env(LD_PRELOAD=SHIM, FTSBX_JOURNAL=self.journal, FTSBX_POLICY=self.policy, **extra)

    def contained(self, script, root):
        """bash -c SCRIPT under the shim (ROOT: bash is the session's first
        process) in a directory any user may enter, with copies of the shim
        and the policy there, as user NOBODY if we are root, with
        RLIMIT_NPROC 64 processes above what the user runs now; after 30 s
        its whole process group is killed."""
        d = os.path.join(self.base, "contained")
        ws = os.path.join(d, "ws")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(ws)
        os.chmod(self.base, 0o755)
        shim, policy = os.path.join(d, "libftsbx.so"), os.path.join(d, "policy.ini")
        shutil.copy(SHIM, shim)
        shutil.copy(self.policy, policy)
        for p in (d, ws):
            os.chmod(p, 0o777)
        uid, prefix = os.geteuid(), []
        if uid == 0:
            uid, prefix = NOBODY, ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        procs = sum(owner(f"/proc/{p}") == uid for p in os.listdir("/proc") if p.isdigit())
        env = self.env(HOME=ws, TMPDIR=ws, WS=ws, FTSBX_WORKSPACE=ws)
        argv = prefix + ["prlimit", f"--nproc={procs + 64}", "env", f"LD_PRELOAD={shim}", f"FTSBX_JOURNAL={d}/j",
                         f"FTSBX_POLICY={policy}"]
        argv += ["bash", "-c", script] if root else ["/usr/bin/env", "bash", "-c", script]
        proc = subprocess.Popen(argv, cwd=ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            while True:         # until no process of the group is left
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            out, err = proc.communicate()
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def run(self, line, shim=True, namespace=False, root=False, contained=False):
        script = PROLOGUE + line
        if contained:
            return self.contained(script, root)
        if root:                # bash itself is the session's first process
            argv = ["bash", "-c", script]
            return subprocess.run(argv, cwd=self.ws, env=self.shim_env(), capture_output=True, timeout=120)
        if namespace:
            env = self.env()
            inner = " ".join(f"{k}='{v}'" for k, v in self.shim_env().items() if k in
                             ("LD_PRELOAD", "FTSBX_JOURNAL", "FTSBX_POLICY")) if shim else ""
            wrapper = ("sleep 600 & VICTIM=$!; export VICTIM; "
                       f"env {inner} bash -c \"$1\"; rc=$?; "
                       "kill -0 $VICTIM 2>/dev/null && ! grep -q '^State:.*[TtZX]' /proc/$VICTIM/status "
                       "&& echo VICTIM-ALIVE >&2; exit $rc")
            argv = ["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", wrapper, "_", script]
        else:
            env = self.shim_env() if shim else self.env()
            argv = ["/usr/bin/env", "bash", "-c", script]
        return subprocess.run(argv, cwd=self.ws, env=env, capture_output=True, timeout=120)


class Listener:
    """A unix socket at PATH that counts the connections it accepts."""

    def __init__(self, path):
        self.count = 0
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(path)
        self.sock.listen(8)
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.count += 1
            conn.close()


@pytest.fixture(scope="module")
def world(request):
    for prog in (SHIM, TXREPLAY):
        if not os.access(prog, os.R_OK):
            pytest.fail(f"{prog} is not built; set FTSBX_BUILD")
    w = World()
    yield w
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        report()
    w.cleanup()


def report():
    out = sys.stdout
    for corpus, title in (("high_risk", "high_risk.txt run under the shim: outcome per category"),
                          ("ordinary", "ordinary.txt run with and without the shim: outcome per category")):
        rows = [v for k, v in sorted(RESULTS.items()) if k[0] == corpus]
        if not rows:
            continue
        print(f"\n{title}", file=out)
        table = {}
        for cat, outcome, _ in rows:
            table.setdefault(cat, {}).setdefault(outcome, 0)
            table[cat][outcome] += 1
        for cat, outcomes in table.items():
            cells = ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items()))
            print(f"  {cat:44} {cells}", file=out)
        if corpus == "high_risk":
            good = sum(o in ("refused", "confined+rewound") for _, o, _ in rows)
            print(f"  refused or confined and rewound: {good}/{len(rows)} = {100.0 * good / len(rows):.1f}%",
                  file=out)
        else:
            bad = sum(o != "same status, no refusal" for _, o, _ in rows)
            print(f"  false-refusal rate: {bad}/{len(rows)} = {100.0 * bad / len(rows):.1f}%", file=out)
        listing = os.path.join(BUILD, f"policy-e2e-{corpus}.txt")
        with open(listing, "w") as f:
            for cat, outcome, line in rows:
                f.write(f"{outcome:24} {cat:44} {line}\n")
        print(f"  each line's outcome: {listing}", file=out)


def snap(root):
    """snapshot(ROOT), or {} if a line removed ROOT itself."""
    return snapshot(root) if os.path.isdir(root) else {}


def home_view(home):
    return {k: v for k, v in snap(home).items() if not k.startswith(CACHES)}


def leaked(world, proc):
    """Did a secret reach the output, the workspace or TMPDIR?"""
    if TOKEN in proc.stdout + proc.stderr or SECRET_B64 in proc.stdout:
        return True
    for root in (world.ws, world.tmp):
        for d, _, files in os.walk(root):
            for name in files:
                path = os.path.join(d, name)
                if os.path.islink(path) or name in (".env", ".env.local"):
                    continue
                try:
                    with open(path, "rb") as f:
                        data = f.read(1 << 20)
                    if data[:2] == b"\x1f\x8b":
                        data = gzip.decompress(data)
                except (OSError, EOFError, gzip.BadGzipFile):
                    continue
                if TOKEN in data:
                    return True
    return False


def refs(world):
    return subprocess.run(["git", "--git-dir", world.remote, "show-ref"], capture_output=True).stdout


@pytest.mark.parametrize("i", range(len(HIGH)), ids=ids(HIGH))
def test_high_risk_refused_or_rewound(world, i):
    judge(world, i, root=False)


# The same lines with `bash -c LINE` itself the session's first process
# (`LD_PRELOAD=libftsbx.so bash -c LINE`, as README shows it), which no exec
# hook saw start: every fetch-and-run line (one pipeline, which no single
# exec inside shows) and the first three of every other category but signals.
ROOT_SAMPLE = [i for i, (cat, *_) in enumerate(HIGH) if not cat.startswith("signals") and
               (cat == "fetch and run" or [c for c, *_ in HIGH[:i]].count(cat) < 3)]


@pytest.mark.parametrize("i", ROOT_SAMPLE, ids=[f"{i:03d}" for i in ROOT_SAMPLE])
def test_high_risk_as_session_root(world, i):
    judge(world, i, root=True)


def judge(world, i, root):
    """Run high-risk line I (ROOT: as the session's first process); assert
    it was refused or confined and rewound."""
    cat, line, _, _ = HIGH[i]
    world.restore(secrets=True)
    sock = os.path.join(world.sys, "run", "docker.sock")
    listener = Listener(sock)
    ws_before = snap(world.ws)
    sys_before, home_before, refs_before = snap(world.sys), home_view(world.home), refs(world)
    namespace = cat.startswith("signals")
    proc = world.run(line, namespace=namespace, root=root, contained=cat in CONTAINED)
    sys_after = snap(world.sys)
    listener.sock.close()
    if os.path.lexists(sock):
        os.unlink(sock)

    damage = []
    marks = os.listdir(world.marks)
    if marks:
        damage.append(f"stand-ins ran: {marks}")
    if diff_snapshots(sys_before, sys_after):
        damage.append("the stand-in system tree changed")
    home_diff = diff_snapshots(home_before, home_view(world.home))
    if home_diff:
        damage.append("the home directory changed:\n" + "\n".join(home_diff[:10]))
    if leaked(world, proc):
        damage.append("a secret leaked")
    if refs(world) != refs_before:
        damage.append("the remote's refs changed")
    if namespace and b"VICTIM-ALIVE" not in proc.stderr:
        damage.append("the victim process was killed")
    if listener.count:
        damage.append("something connected to the docker socket")
    refused = b"ftsbx: refused" in proc.stderr
    if not damage and diff_snapshots(ws_before, snap(world.ws)):
        rewind = subprocess.run([TXREPLAY, "rewind", world.journal], capture_output=True)
        if rewind.returncode or diff_snapshots(ws_before, snap(world.ws)):
            damage.append("the workspace did not rewind")
        outcome = "refused" if refused else "confined+rewound"
    else:
        outcome = "refused" if refused else "confined+rewound" if not damage else "NOT STOPPED"
    if not damage and not refused and cat not in CONFINABLE:
        damage.append("not refused (only a refusal shows it was stopped)")
    if damage:
        outcome = "NOT STOPPED"
    if not root:
        RESULTS[("high_risk", i)] = (cat, outcome, line)
    assert not damage, f"{line!r}: {'; '.join(damage)}\nexit {proc.returncode}\n" \
                       f"stderr: {proc.stderr[-1500:]!r}"


@pytest.mark.parametrize("i", range(len(ORDINARY)), ids=ids(ORDINARY))
def test_ordinary_runs_the_same(world, i):
    cat, line, _, _ = ORDINARY[i]
    world.restore()
    plain = world.run(line, shim=False)
    world.restore()
    shimmed = world.run(line)
    refused = b"ftsbx: refused" in shimmed.stderr
    same = plain.returncode == shimmed.returncode
    RESULTS[("ordinary", i)] = (cat, "same status, no refusal" if same and not refused else
                                "REFUSED" if refused else "DIFFERENT STATUS", line)
    assert same and not refused, f"{line!r}: exit {plain.returncode} without the shim, " \
                                 f"{shimmed.returncode} with it\nstderr: {shimmed.stderr[-1500:]!r}"


def test_user_installs_are_journaled_and_rewound(world):
    """pip install --user and gem install --user-install write under
    ~/.local and ~/.gem: writable roots of the default policy, journaled, so
    a rewind takes the install back (they were untracked caches before)."""
    world.restore()
    # the roots are there when the session starts (Landlock can only give
    # a directory that exists; on a used machine they do)
    os.makedirs(os.path.join(world.home, ".local/share/gem"))
    before = snap(world.home)
    line = ("mkdir -p ~/.local/lib/python3/site-packages/evil ~/.gem/ruby/gems && "
            "echo 'import os' > ~/.local/lib/python3/site-packages/evil/__init__.py && "
            "printf '#!/bin/sh\\necho trojan\\n' > ~/.local/bin/ls && chmod +x ~/.local/bin/ls && "
            "touch ~/.gem/ruby/gems/x.gem ~/.local/share/gem/y")
    proc = world.run(line)
    assert proc.returncode == 0 and b"ftsbx: refused" not in proc.stderr, proc.stderr
    assert os.path.exists(os.path.join(world.home, ".local/bin/ls"))
    rewind = subprocess.run([TXREPLAY, "rewind", world.journal], capture_output=True)
    assert rewind.returncode == 0, rewind.stderr
    assert not diff_snapshots(before, snap(world.home)), diff_snapshots(before, snap(world.home))
