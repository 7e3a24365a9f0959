#!/usr/bin/python3
"""bench_agent.py - the agent-loop figure of `make bench` (issue 7): the
unmodified agent loop of test/agent/ (agent.py on the stand-in nano-vllm
engine, tensor_parallel_size=2: a spawned worker and a SharedMemory segment)
replays a scripted trajectory of 200 tool calls over a small Python project
in git: shell commands through subprocess (ls, cat, grep, sed -i, cp, mkdir,
git status, diff, add and commit, python -c, py_compile), patches, pytest
runs, files written and trees deleted in-process, several calls of one reply
run in the loop's thread pool, and a few calls that fail. Each run gets a
fresh copy of the workspace and of the fake HOME; the whole agent process is
timed (wall clock, and the CPU time of the whole process tree, which moves
less on a busy machine), without the shim, with LD_PRELOAD=libftsbx.so and a
journal, and with FTSBX_ON_FAILURE=rewind as well, in alternating rounds;
the median of each is kept and printed with its ratio. Prints figures; never
fails on a slow machine (it fails only when the agent itself does).

Usage: bench_agent.py BUILD_DIR        (FTSBX_BENCH_AGENT_ROUNDS, default 5)
"""
import difflib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
SHIM = os.path.join(BUILD, "libftsbx.so")
AGENT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent")
PYTHON = "/usr/bin/python3"
ROUNDS = int(os.environ.get("FTSBX_BENCH_AGENT_ROUNDS", "5"))
CALLS = 200
MODULES = 12
GIT_ENV = dict(GIT_AUTHOR_NAME="agent", GIT_AUTHOR_EMAIL="agent@example.org", GIT_COMMITTER_NAME="agent",
               GIT_COMMITTER_EMAIL="agent@example.org", GIT_AUTHOR_DATE="2026-01-01T00:00:00Z",
               GIT_COMMITTER_DATE="2026-01-01T00:00:00Z")


# --- the project the agent works on -------------------------------------------------

def module_text(k):
    lines = [f'"""mathlib.m{k:02d}: helpers of family {k}."""', "# rev 0", ""]
    for f in range(4):
        lines += [f"def f{k}_{f}(x):", f"    return x * {f + 1} + {k}", "", ""]
    return "\n".join(lines).rstrip() + "\n"


def test_text(k):
    return (f"import os\nimport sys\n\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), \"..\", \"src\"))\n"
            f"from mathlib.m{k:02d} import f{k}_0, f{k}_3\n\n\n"
            f"def test_f{k}():\n    assert f{k}_0(1) == {1 + k}\n    assert f{k}_3(2) == {8 + k}\n")


def make_template(root, env):
    files = {"README.md": "# mathlib\n\nA small arithmetic package.\n",
             "docs/notes.md": "# Notes\n",
             "src/mathlib/__init__.py": "from .ops import add, mul\n",
             "src/mathlib/ops.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
             ".gitignore": "__pycache__/\nbuild/\n"}
    for k in range(MODULES):
        files[f"src/mathlib/m{k:02d}.py"] = module_text(k)
    for k in range(0, MODULES, 3):
        files[f"tests/test_m{k:02d}.py"] = test_text(k)
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "initial"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, timeout=60)


# --- the trajectory: 200 tool calls, grouped into replies -----------------------------

def ext_text(j, n):
    return "".join(f"def g{j}_{i}(x):\n    return x + {i}\n\n\n" for i in range(n)).rstrip() + "\n"


def patch(path, old, new):
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/" + path, "b/" + path))


def shell(cmd):
    return {"name": "shell", "arguments": {"command": cmd}}


def episode(j):
    """One round of work on module j: look, write, patch, check, clean, test,
    commit. Calls in one reply are independent: they run in parallel."""
    k = j % MODULES
    m = f"src/mathlib/m{k:02d}.py"
    ext = f"src/mathlib/ext{j}.py"
    old, new = ext_text(j, 3), ext_text(j, 4)
    turns = [
        ("Looking around first.",
         [shell(f"ls src/mathlib tests && head -5 {m}"), shell("grep -rn 'def ' src/mathlib | wc -l"),
          shell("git status --short | head -20")]),
        ("Adding a helper module.",
         [{"name": "write_file", "arguments": {"path": ext, "content": old}}]),
        ("Extending it and marking the revision.",
         [{"name": "apply_patch", "arguments": {"diff": patch(ext, old, new)}},
          shell(f"sed -i 's/^# rev .*/# rev {j + 1}/' {m}")]),
        ("Checking that it compiles and imports.",
         [shell(f"python3 -m py_compile {ext} && python3 -c \"import sys; sys.path.insert(0, 'src'); "
                f"import mathlib.ext{j} as e; print(e.g{j}_3(1))\"")]),
        ("Notes and a build copy.",
         [shell(f"echo '- step {j}: ext{j}' >> docs/notes.md && tail -1 docs/notes.md"),
          shell(f"mkdir -p build/obj{j} && cp src/mathlib/*.py build/obj{j}/ && ls build/obj{j} | wc -l")]),
        ("Removing the build copy.",
         [{"name": "delete_path", "arguments": {"path": f"build/obj{j}"}}]),
        ("Running the tests." if j % 3 == 0 else "Reviewing the diff.",
         [{"name": "run_tests", "arguments": {}} if j % 3 == 0 else shell("git diff --stat | tail -3")]),
        ("Committing." if j % 4 == 3 else "Counting lines.",
         [shell(f"git add -A && git commit -q -m 'step {j}' && git log --oneline | head -1")
          if j % 4 == 3 else shell("wc -l src/mathlib/*.py | tail -1")]),
    ]
    if j % 5 == 4:      # a call that fails after changing something
        turns.append(("Looking for the old symbol.",
                      [shell(f"echo 'attempt {j}' >> scratch.log && grep -q NO_SUCH_SYMBOL {m}")]))
    return turns


def trajectory():
    turns, n, j = [], 0, 0
    while n < CALLS:
        for text, calls in episode(j):
            calls = calls[:CALLS - n]
            if not calls:
                break
            body = "".join(f"\n<tool>{json.dumps(c)}</tool>" for c in calls)
            turns.append(text + body)
            n += len(calls)
        j += 1
    turns.append("All steps are done.\n<done/>")
    return turns


# --- runs ------------------------------------------------------------------------------

def setup(tmp):
    base = os.path.join(tmp, "agent")
    shutil.copytree(AGENT_DIR, base, ignore=shutil.ignore_patterns("__pycache__", "model"))
    model = os.path.join(tmp, "model")
    os.makedirs(model)
    shutil.copy(os.path.join(AGENT_DIR, "model", "config.json"), model)
    with open(os.path.join(model, "trajectory.json"), "w") as f:
        json.dump({"comment": "bench_agent.py: 200 tool calls", "turns": trajectory()}, f, indent=1)
    with open(os.path.join(model, "model.safetensors"), "wb") as f:
        f.write(bytes(range(256)) * 1024)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FTSBX_") and k not in ("LD_PRELOAD", "PYTHONDONTWRITEBYTECODE")}
    env.update(GIT_ENV, PATH="/usr/local/bin:/usr/bin:/bin")
    template = os.path.join(tmp, "template")
    make_template(template, env)
    return env, template


def run_agent(tmp, env, template, name, extra):
    """One run in a fresh workspace and HOME: (wall, cpu) in seconds."""
    run = os.path.join(tmp, name)
    ws, home, scratch = (os.path.join(run, d) for d in ("ws", "home", "tmp"))
    os.makedirs(home)
    os.makedirs(scratch)
    subprocess.run(["cp", "-a", template, ws], check=True)
    env = dict(env, HOME=home, TMPDIR=scratch, **extra)
    if "FTSBX_JOURNAL" in extra:
        env["FTSBX_JOURNAL"] = os.path.join(run, "journal")
    transcript = os.path.join(run, "transcript.json")
    argv = [PYTHON, os.path.join(tmp, "agent", "agent.py"), "--model", os.path.join(tmp, "model"),
            "--workspace", ws, "--tp", "2", "--max-turns", "1000", "--transcript", transcript]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=run, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, timeout=900)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    if proc.returncode != 0:
        sys.exit(f"bench_agent: the agent failed ({name}):\n{proc.stderr[-3000:]}")
    calls = [c for t in json.load(open(transcript)) for c in t["calls"]]
    failed = [c for c in calls if c["exit"] != 0 and "NO_SUCH_SYMBOL" not in json.dumps(c["arguments"])]
    if len(calls) != CALLS or failed:
        sys.exit(f"bench_agent: unexpected run ({name}): {len(calls)} calls, failed: {failed[:3]}")
    # the run stays until the end: removing thousands of files between runs
    # makes the next run's file creations slow on an ext4 without a journal
    # (it scans past recently freed inodes), which measures the bench
    return dt, cpu


def main():
    tmp = tempfile.mkdtemp(prefix="ftsbx-bench-agent-")
    try:
        env, template = setup(tmp)
        modes = {"native": {}, "shim": dict(LD_PRELOAD=SHIM, FTSBX_JOURNAL="x"),
                 "rewind": dict(LD_PRELOAD=SHIM, FTSBX_JOURNAL="x", FTSBX_ON_FAILURE="rewind")}
        times = {m: [] for m in modes}
        run_agent(tmp, env, template, "warm-up", {})     # the agent's own .pyc, the page cache
        for r in range(ROUNDS):
            order = list(modes) if r % 2 == 0 else list(reversed(modes))
            for m in order:
                times[m].append(run_agent(tmp, env, template, f"{m}-{r}", modes[m]))
        print(f"ftsbx agent-loop bench: {CALLS} tool calls of test/agent/agent.py (tp=2), medians of "
              f"{ROUNDS} alternating rounds; ratio = with shim / native")
        for k, what in ((0, "wall"), (1, "cpu")):
            native = statistics.median(x[k] for x in times["native"])
            for m, label in (("shim", f"agent loop, 200 tool calls, {what}"),
                             ("rewind", f"  the same, FTSBX_ON_FAILURE=rewind, {what}")):
                t = statistics.median(x[k] for x in times[m])
                best = min(x[k] for x in times[m]) / min(x[k] for x in times["native"])
                print(f"{label:<44} {t * 1e3:>10.0f} ms     native {native * 1e3:>10.0f} ms     ratio "
                      f"{t / native:5.2f}  ({(t - native) / CALLS * 1e3:+.2f} ms per call; best rounds {best:4.2f})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
