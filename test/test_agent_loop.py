"""The agent-loop test (issue 7; DESIGN.md, "How it is tested"): an ordinary
Python agent loop on the stand-in nano-vllm engine (test/agent/), run once
without the shim and once under LD_PRELOAD=libftsbx.so with
FTSBX_ON_FAILURE=rewind and tensor_parallel_size=2. Under the shim: the
refused command is refused and the loop sees it; each subprocess tool call
is its own transaction with its command line; the failed call is rewound
before the next turn sees the tree; the engine's workers, shared memory and
compile cache work and are not tool calls; a rewind of the whole session
gives back the workspace and the compile cache byte for byte."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import BUILD, TXREPLAY, assert_same, snapshot

SHIM = os.path.join(BUILD, "libftsbx.so")
AGENT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent")
PYTHON = "/usr/bin/python3"
REFUSED = "git push --force origin main"
FAILING = "exit 1"
MISTAKE = "rm -rf src"

WORKSPACE = {
    "README.md": "# mathlib\n\nA tiny arithmetic package.\n",
    "src/mathlib/__init__.py": "from .ops import add\n",
    "src/mathlib/ops.py": "def add(a, b):\n    return a + b\n",
    "tests/test_ops.py": ("import os\nimport sys\n\n"
                          "sys.path.insert(0, os.path.join(os.path.dirname(__file__), \"..\", \"src\"))\n"
                          "from mathlib.ops import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"),
    "build/lib/mathlib/ops.py": "def add(a, b):\n    return a + b\n",
}
GIT_ENV = dict(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.org", GIT_AUTHOR_DATE="2026-01-01T00:00:00Z",
               GIT_COMMITTER_DATE="2026-01-01T00:00:00Z")


def git(cwd, *args, env):
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=60)


def make_workspace(base, name, env):
    """The little project the agent works on: a git repository whose origin
    is a bare repository next to it, so the refused push has a target."""
    ws = os.path.join(base, name)
    for rel, text in WORKSPACE.items():
        os.makedirs(os.path.dirname(os.path.join(ws, rel)), exist_ok=True)
        with open(os.path.join(ws, rel), "w") as f:
            f.write(text)
    remote = os.path.join(base, name + "-remote.git")
    git(base, "init", "-q", "--bare", "-b", "main", remote, env=env)
    git(ws, "init", "-q", "-b", "main", env=env)
    git(ws, "add", "-A", env=env)
    git(ws, "commit", "-q", "-m", "initial", env=env)
    git(ws, "remote", "add", "origin", remote, env=env)
    git(ws, "push", "-q", "origin", "main", env=env)
    return ws


def shm_names():
    return {n for n in os.listdir("/dev/shm") if n.startswith("nanovllm")}


class Run:
    def __init__(self, proc, transcript):
        self.proc = proc
        self.turns = json.load(open(transcript))
        self.calls = [c for t in self.turns for c in t["calls"]]

    def call(self, fragment):
        found = [c for c in self.calls if c["name"] == "shell" and fragment in c["arguments"]["command"]]
        assert len(found) == 1, (fragment, self.calls)
        return found[0]

    def turn_after(self, fragment):
        """The first call of the turn that follows the shell call FRAGMENT."""
        for i, t in enumerate(self.turns):
            if any(c["name"] == "shell" and fragment in c["arguments"]["command"] for c in t["calls"]):
                return self.turns[i + 1]["calls"][0]
        raise AssertionError(f"no shell call {fragment!r}")


def run_agent(base, ws, name, env, tp):
    transcript = os.path.join(base, name + ".json")
    proc = subprocess.run([PYTHON, os.path.join(base, "agent", "agent.py"), "--model",
                           os.path.join(base, "model"), "--workspace", ws, "--tp", str(tp),
                           "--transcript", transcript],
                          cwd=base, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"agent failed:\nstdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}"
    return Run(proc, transcript)


def json_lines(*args):
    out = subprocess.run([TXREPLAY, *args, "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    if not os.access(SHIM, os.R_OK) or not os.access(TXREPLAY, os.X_OK):
        pytest.fail(f"{SHIM} or {TXREPLAY} is not built (make B=... all); set FTSBX_BUILD")
    base = str(tmp_path_factory.mktemp("agentloop"))
    home = os.path.join(base, "home")
    os.makedirs(home)
    shutil.copytree(AGENT_DIR, os.path.join(base, "agent"), ignore=shutil.ignore_patterns("__pycache__", "model"))
    model = os.path.join(base, "model")
    shutil.copytree(os.path.join(AGENT_DIR, "model"), model)
    with open(os.path.join(model, "model.safetensors"), "wb") as f:
        f.write(bytes(range(256)) * 1024)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FTSBX_") and k not in ("LD_PRELOAD", "PYTHONDONTWRITEBYTECODE")}
    # TMPDIR in the scratch too: pytest and patch make temporary files, and
    # a shared /tmp that others change meanwhile makes the rewind see drift
    os.makedirs(os.path.join(base, "tmp"))
    env.update(GIT_ENV, HOME=home, TMPDIR=os.path.join(base, "tmp"), PATH="/usr/local/bin:/usr/bin:/bin")
    shm_before = shm_names()

    plain = run_agent(base, make_workspace(base, "ws-plain", env), "plain", env, tp=2)
    ws = make_workspace(base, "ws", env)
    cache = os.path.join(home, ".cache")
    before = dict(ws=snapshot(os.fsencode(ws)), cache=snapshot(os.fsencode(cache)))
    journal = os.path.join(base, "journal")
    shim_env = dict(env, LD_PRELOAD=SHIM, FTSBX_JOURNAL=journal, FTSBX_ON_FAILURE="rewind")
    shim = run_agent(base, ws, "shim", shim_env, tp=2)
    after = dict(ws=snapshot(os.fsencode(ws)), cache=snapshot(os.fsencode(cache)))
    rows = json_lines("list", journal)
    log = json_lines("log", journal)
    rewind = subprocess.run([TXREPLAY, "rewind", journal], capture_output=True, text=True, timeout=60)
    rewound = dict(ws=snapshot(os.fsencode(ws)), cache=snapshot(os.fsencode(cache)))
    return dict(base=base, ws=ws, home=home, plain=plain, shim=shim, rows=rows, log=log,
                before=before, after=after, rewind=rewind, rewound=rewound,
                shm_left=shm_names() - shm_before)


def argv_of(row):
    return row.get("argv") or []


def test_without_the_shim_the_mistakes_stay(session):
    plain = session["plain"]
    assert plain.call(REFUSED)["exit"] == 0, "without the shim the force push goes through"
    assert plain.call(FAILING)["exit"] == 1
    seen = plain.turn_after(FAILING)["output"]
    assert "return b - a" in seen and "version.py" in seen, seen
    assert not os.path.exists(os.path.join(session["base"], "ws-plain", "src"))


def test_the_refused_command_is_refused_and_the_loop_sees_it(session):
    shim = session["shim"]
    call = shim.call(REFUSED)
    assert call["exit"] != 0 and "ftsbx: refused" in call["output"], \
        f"{call}\nagent's stderr: {shim.proc.stderr[-2000:]}"
    nxt = [t for t in shim.turns if t["turn"] == 5][0]
    assert nxt["calls"], "the loop carried on after the refusal"
    refusals = [r for r in session["log"] if r.get("op") == "refuse"]
    assert refusals, "no refuse record in txreplay log"
    assert any("git" in json.dumps(r) and "push" in json.dumps(r) for r in refusals), refusals
    row = [r for r in session["rows"] if argv_of(r) == ["bash", "-c", REFUSED]]
    assert len(row) == 1 and row[0]["refused"] >= 1, row


def expected_argv(call):
    if call["name"] == "shell":
        return ["bash", "-c", call["arguments"]["command"]]
    if call["name"] == "apply_patch":
        return ["patch", "-p1", "--forward", "--no-backup-if-mismatch"]
    return [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]


def test_each_subprocess_tool_call_is_one_transaction_with_its_command_line(session):
    rows = session["rows"]
    calls = [c for c in session["shim"].calls if c["name"] in ("shell", "apply_patch", "run_tests")]
    assert len(calls) == 9
    for call in calls:
        want = expected_argv(call)
        n_calls = sum(expected_argv(c) == want for c in calls)
        n_rows = sum(argv_of(r) == want for r in rows)
        assert n_rows == n_calls, (want, [argv_of(r) for r in rows])
    ids = [r["txn"] for r in rows]
    assert len(ids) == len(set(ids)), "transaction ids must be unique"
    # the loop's in-process tools (write_file, delete_path) are the root's own
    # transactions, under the agent's command line
    agent_txns = {r["txn"] for r in rows if any(a.endswith("agent.py") for a in argv_of(r))}
    for name in ("tests/test_sub.py", "CHANGELOG.md", "build/lib/mathlib/ops.py"):
        path = os.path.join(session["ws"], name)
        txns = {r["txn"] for r in session["log"] if r.get("path") == path and r["op"] not in ("exec",)}
        assert txns and txns <= agent_txns, (name, txns, agent_txns)


def test_the_failed_call_was_rewound_and_the_next_turn_saw_the_clean_state(session):
    shim = session["shim"]
    assert shim.call(FAILING)["exit"] == 1
    seen = shim.turn_after(FAILING)["output"]
    assert "return a - b" in seen and "return b - a" not in seen, seen
    assert "version.py" not in seen, seen
    row = [r for r in session["rows"] if FAILING in " ".join(argv_of(r))]
    assert len(row) == 1 and row[0]["status"] == 1, row
    assert row[0]["rewound"] not in ("no", False, None), row
    msg = f"ftsbx: tool call (transaction {row[0]['txn']}) exited with 1: its changes were rewound"
    assert msg in session["shim"].proc.stderr, session["shim"].proc.stderr


def test_the_engine_worked_and_is_not_a_tool_call(session):
    plain, shim = session["plain"], session["shim"]
    assert [(t["text"], t["token_ids"]) for t in shim.turns] == \
        [(t["text"], t["token_ids"]) for t in plain.turns], "generate() differs under the shim"
    assert len(shim.turns) == 10 and "<done/>" in shim.turns[-1]["text"]
    assert not session["shm_left"], f"shared memory left in /dev/shm: {session['shm_left']}"
    calls = [" ".join(argv_of(r)) for r in session["rows"] if r["txn"] != 0]
    assert not any("multiprocessing" in c for c in calls), calls
    # every transaction but 0 is a tool call or the root's own writes: none
    # stands for a worker the engine started and reaped
    phantom = [r for r in session["rows"] if r["txn"] != 0 and not argv_of(r)]
    assert not phantom, f"transactions without a command line (a reaped engine worker?): {phantom}"
    kernels = [d for d in os.listdir(os.path.join(session["home"], ".cache", "nanovllm"))]
    assert len(kernels) == 1
    ranks = os.listdir(os.path.join(session["home"], ".cache", "nanovllm", kernels[0], "kernels"))
    assert sorted(ranks) == ["rank0.bin", "rank1.bin"]
    assert session["before"]["cache"] != session["after"]["cache"], "the engine rewrote no compile cache"
    assert "Traceback" not in shim.proc.stderr, shim.proc.stderr


def test_the_mistake_stayed_until_the_rewind(session):
    """rm -rf src exited 0: a mistake, not a failure, so nothing rewound it
    during the session; only the whole-session rewind brings src back."""
    assert session["shim"].call(MISTAKE)["exit"] == 0
    assert b"src/mathlib/ops.py" in session["before"]["ws"]
    assert not any(p.startswith(b"src") for p in session["after"]["ws"]), "src/ should be gone before the rewind"
    assert b"CHANGELOG.md" in session["after"]["ws"] and b"build" not in session["after"]["ws"]


def test_rewinding_the_whole_session_gives_back_the_workspace_and_the_cache(session):
    """The compile cache is rewound with the rest when the session journaled
    it. A policy may mark ~/.cache untracked (policies/default.ini does: not
    journaled); then nothing there is journaled and the rewind must leave it
    as the session left it."""
    assert session["rewind"].returncode == 0, session["rewind"].stderr
    assert_same(session["before"]["ws"], session["rewound"]["ws"], "the workspace")
    cache = os.path.join(session["home"], ".cache") + "/"
    journaled = [r for r in session["log"] if (r.get("path") or "").startswith(cache)]
    if journaled:
        assert_same(session["before"]["cache"], session["rewound"]["cache"], "$HOME/.cache")
    else:
        assert_same(session["after"]["cache"], session["rewound"]["cache"], "the untracked $HOME/.cache")
