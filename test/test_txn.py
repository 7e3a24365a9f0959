"""Transactions for unmodified agent loops (shim/txn.c): every process tree
the session's root starts is one transaction with its command line; a tool
call that fails is rewound before the agent sees its status when
FTSBX_ON_FAILURE=rewind; the agent's own machinery (multiprocessing workers)
is not a tool call; a whole-session rewind gives back the tree as it was."""
import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import BUILD, TXREPLAY, assert_same, diff_snapshots, populate, snapshot

SHIM = os.path.join(BUILD, "libftsbx.so")


def shim_env(tmp_path, preload=True, drop=(), **extra):
    """The environment of a wrapped agent: the shim, a journal and HOME under
    TMP_PATH, no transaction or root inherited from the test's own, DROP
    removed, EXTRA added."""
    env = dict(os.environ, FTSBX_JOURNAL=str(tmp_path / "j"), HOME=str(tmp_path))
    if preload:
        env["LD_PRELOAD"] = SHIM
    for k in ("FTSBX_TXN", "FTSBX_ROOT", "FTSBX_TXN_GROUP", *drop):
        env.pop(k, None)
    env.update(extra)
    return env


AGENT = textwrap.dedent("""
    import subprocess, sys, concurrent.futures, multiprocessing as mp

    def tool(cmd):
        r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
        return r.returncode, open("state.txt").read()

    def square(x):
        return x * x

    if __name__ == "__main__":
        log = []
        log.append(tool("echo one >> state.txt"))
        log.append(tool("echo two >> state.txt; rm -f a.txt; exit 3"))
        log.append(tool("echo three >> state.txt"))
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            log += list(pool.map(tool, ["touch t1", "touch t2"]))
        with mp.get_context("spawn").Pool(2) as p:
            assert p.map(square, [1, 2, 3]) == [1, 4, 9]
        open("notes.txt", "w").write("the agent's own write\\n")
        print(repr(log))
""")


def run_agent(tmp_path, ws, on_failure="rewind"):
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    env = shim_env(tmp_path, FTSBX_ON_FAILURE=on_failure)
    return subprocess.run(["/usr/bin/python3", str(agent)], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=120)


def setup_ws(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    populate(os.fsencode(ws))
    (ws / "state.txt").write_text("zero\n")
    return ws


def run_script(tmp_path, ws, name, text, *args, timeout=60, **env):
    """The agent TEXT (Python, saved as NAME) run in WS under the shim, with
    rewind on failure unless ENV says otherwise."""
    agent = tmp_path / name
    agent.write_text(text)
    return subprocess.run(["/usr/bin/python3", str(agent), *args], cwd=ws,
                          env=shim_env(tmp_path, **{"FTSBX_ON_FAILURE": "rewind", **env}),
                          capture_output=True, text=True, timeout=timeout)


def rewind_whole(tmp_path, ws, before):
    """Rewind the whole session: the tree is BEFORE again, with no drift."""
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True, text=True)
    assert out.returncode == 0 and "drift:" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


def test_failed_tool_call_is_rewound_before_the_agent_sees_it(tmp_path):
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    r = run_agent(tmp_path, ws)
    assert r.returncode == 0, r.stderr
    log = eval(r.stdout.strip().splitlines()[-1])
    assert log[0] == (0, "zero\none\n")
    assert log[1] == (3, "zero\none\n"), "the failed call's write must be gone"
    assert (ws / "a.txt").exists(), "the failed call's rm must be undone"
    assert log[2] == (0, "zero\none\nthree\n")
    assert "transaction" in r.stderr and "rewound" in r.stderr
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


def test_each_tool_call_is_its_own_transaction_with_its_command_line(tmp_path):
    ws = setup_ws(tmp_path)
    r = run_agent(tmp_path, ws, on_failure="keep")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(l) for l in subprocess.run([TXREPLAY, "list", str(tmp_path / "j"), "--json"],
                                                  capture_output=True, text=True).stdout.splitlines()]
    cmds = [" ".join(row["argv"] or []) for row in rows]
    for call in ("echo one >> state.txt", "exit 3", "echo three", "touch t1", "touch t2"):
        assert sum(call in c for c in cmds) == 1, (call, cmds)
    failed = [row for row in rows if "exit 3" in " ".join(row["argv"] or [])][0]
    assert failed["status"] == 3 and failed["rewound"] == "no"
    # the engine's spawned workers are not tool calls: they run in transaction 0
    calls = [" ".join(row["argv"] or []) for row in rows if row["txn"] != 0]
    assert not any("multiprocessing" in c for c in calls), calls
    assert (ws / "state.txt").read_text() == "zero\none\ntwo\nthree\n"


# --- the policy's [rewind] exceptions see the tool call's command line -----------

# A test runner the default policy excepts from rewind on failure ("prove"),
# failing after it changed the workspace, as failing test runs do.
PROVE = "#!/bin/sh\necho 'prove ran' >> state.txt\nrm -f a.txt\nmkdir -p t/out && echo log > t/out/log\nexit 1\n"

# The agent runs each command with the start method MODE and leaves a
# snapshot of the workspace after each one (conftest.snapshot) beside it.
START_AGENT = textwrap.dedent("""
    import os, pickle, shlex, subprocess, sys
    sys.path.insert(0, sys.argv[2])
    from conftest import snapshot

    def start(mode, argv, env):
        if mode == "vfork":             # subprocess's default: close_fds, vfork + exec
            return subprocess.run(argv, env=env).returncode
        if mode == "fork":              # fork + exec (as before Python 3.10, or with preexec_fn)
            subprocess._USE_VFORK = False
            try:
                return subprocess.run(argv, env=env).returncode
            finally:
                subprocess._USE_VFORK = True
        if mode == "spawn":             # subprocess through posix_spawn (no close_fds, a path)
            return subprocess.run(argv, env=env, close_fds=False).returncode
        if mode == "os_posix_spawn":
            pid = os.posix_spawn(argv[0], argv, env)
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if mode == "system":            # the environment of system() is the agent's own
            saved = dict(os.environ)
            os.environ.clear()
            os.environ.update(env)
            try:
                return os.waitstatus_to_exitcode(os.system(shlex.join(argv)))
            finally:
                os.environ.clear()
                os.environ.update(saved)
        raise ValueError(mode)

    mode, out, calls = sys.argv[1], sys.argv[3], sys.argv[4:]
    snaps, codes = [snapshot(b".")], []
    for i in range(0, len(calls), 3):
        env = dict(os.environ)
        if calls[i + 1]:
            env["FTSBX_TXN_GROUP"] = calls[i + 1]
        codes.append(start(calls[i] or mode, calls[i + 2].split("\x1f"), env))
        snaps.append(snapshot(b"."))
    with open(out, "wb") as f:
        pickle.dump((codes, snaps), f)
""")

TESTDIR = os.path.dirname(os.path.abspath(__file__))


def start_calls(tmp_path, ws, mode, calls, on_failure="rewind", extra_env=None):
    """Run CALLS ([(mode or None, argv)] or [(mode, argv, group)]) from an
    agent under the shim, each started by MODE unless it names its own, in
    the transaction group GROUP if any; the exit codes and the workspace
    snapshots before and after each call."""
    agent = tmp_path / "start_agent.py"
    agent.write_text(START_AGENT)
    out = tmp_path / "snaps.pickle"
    env = shim_env(tmp_path, FTSBX_ON_FAILURE=on_failure, PATH="/usr/local/bin:/usr/bin:/bin",
                   **(extra_env or {}))
    env["PYTHONDONTWRITEBYTECODE"] = "1"    # conftest's own .pyc stays out of the journal
    args = [a for m, argv, *group in calls for a in (m or "", group[0] if group else "", "\x1f".join(argv))]
    r = subprocess.run(["/usr/bin/python3", str(agent), mode, TESTDIR, str(out), *args], cwd=ws, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    import pickle
    with open(out, "rb") as f:
        codes, snaps = pickle.load(f)
    return r, codes, snaps


def txn_rows(tmp_path):
    """The transactions of the tool calls (not the agent's own writes)."""
    out = subprocess.run([TXREPLAY, "list", str(tmp_path / "j"), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    return [row for row in rows if row["argv"] and row["argv"][0] != "/usr/bin/python3"]


def prove_script(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    prove = bindir / "prove"
    prove.write_text(PROVE)
    prove.chmod(0o755)
    return str(prove)


FAILING = ["/bin/bash", "-c", "echo 'bash ran' >> state.txt; rm -f empty; mkdir -p u && echo x > u/f; exit 3"]


@pytest.mark.parametrize("mode", ["vfork", "fork", "spawn", "os_posix_spawn", "system"])
def test_a_failing_exempt_command_is_kept_a_failing_other_one_rewound(tmp_path, mode):
    ws = setup_ws(tmp_path)
    prove = prove_script(tmp_path)
    before = snapshot(os.fsencode(ws))
    r, codes, snaps = start_calls(tmp_path, ws, mode, [(None, [prove]), (None, FAILING)])
    assert codes == [1, 3], r.stderr
    assert_same(before, snaps[0])
    # the test runner failed, as test runs do: its changes stay
    assert (ws / "state.txt").read_text() == "zero\nprove ran\n"
    assert not (ws / "a.txt").exists() and (ws / "t" / "out" / "log").exists()
    assert diff_snapshots(snaps[0], snaps[1])
    # the other failing call was rewound before the agent saw its status:
    # the tree is exactly as the test runner left it
    assert_same(snaps[1], snaps[2], "the tree after the rewound call")
    rows = {" ".join(row["argv"] or []): row for row in txn_rows(tmp_path)}
    kept = [row for cmd, row in rows.items() if cmd.endswith("prove")]
    rewound = [row for cmd, row in rows.items() if "exit 3" in cmd]
    assert len(kept) == 1 and kept[0]["status"] == 1 and kept[0]["rewound"] == "no", rows
    assert len(rewound) == 1 and rewound[0]["status"] == 3 and rewound[0]["rewound"] == "yes", rows
    assert f"transaction {rewound[0]['txn']}) exited with 3" in r.stderr
    assert f"transaction {kept[0]['txn']})" not in r.stderr
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


@pytest.mark.parametrize("mode", ["vfork", "fork"])
def test_an_exempt_command_behind_sh_c_is_kept(tmp_path, mode):
    """Agents run their tools as sh -c STRING: a string that is one plain
    command (after a cd, or variables assigned for it) is judged as that
    command; a longer script is not."""
    ws = setup_ws(tmp_path)
    prove = prove_script(tmp_path)
    r, codes, snaps = start_calls(tmp_path, ws, mode, [
        (None, ["bash", "-c", f"cd . && {prove} -v 't/x y'"]),
        (None, ["sh", "-c", f"CI=1 PYTHONPATH='src dir' {prove} -v"]),
        (None, ["sh", "-c", f"{prove}; echo done"]),
        # the shell's own options before -c, in any spelling
        (None, ["bash", "-l", "-c", prove]),
        (None, ["bash", "--login", "--noprofile", "--norc", "-c", prove]),
        (None, ["sh", "-e", "-x", "-c", prove]),
        (None, ["bash", "-o", "pipefail", "-c", prove]),
        (None, ["bash", "-eo", "pipefail", "-c", prove]),
        (None, ["bash", "-c", "--", prove]),
    ])
    assert codes == [1, 1, 0, 1, 1, 1, 1, 1, 1]
    r, codes, snaps = start_calls(tmp_path, ws, mode, [(None, ["sh", "-c", f"{prove} || exit 4"]),
                                                       (None, ["sh", "-c", f"X=$(true) {prove}"])])
    assert codes == [4, 1]
    assert_same(snaps[0], snaps[1], "the tree after the rewound script")
    assert_same(snaps[1], snaps[2], "the tree after the rewound command with a substitution before it")
    rows = txn_rows(tmp_path)
    assert [row["rewound"] for row in rows if row["status"] == 1] == ["no"] * 8 + ["yes"], rows
    assert [row["rewound"] for row in rows if row["status"] == 4] == ["yes"], rows


def test_a_vfork_child_that_changes_directory_leaves_the_agents_paths_alone(tmp_path):
    """Python's subprocess runs its child's chdir (cwd=) on the agent's own
    memory (vfork): the agent's later relative writes are still journaled
    under its own directory."""
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    agent = tmp_path / "cwd_agent.py"
    agent.write_text(textwrap.dedent(f"""
        import subprocess
        for i in range(3):
            subprocess.run(["true"], cwd={str(tmp_path)!r}, check=True)
            with open(f"rel{{i}}.txt", "w") as f:
                f.write("written by the agent\\n")
    """))
    env = shim_env(tmp_path)
    r = subprocess.run(["/usr/bin/python3", str(agent)], cwd=ws, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    log = [json.loads(line) for line in subprocess.run([TXREPLAY, "log", str(tmp_path / "j"), "--json"],
                                                       capture_output=True, text=True).stdout.splitlines()]
    created = {row["path"] for row in log if row["op"] == "create"}
    assert {str(ws / f"rel{i}.txt") for i in range(3)} <= created, created
    execs = [row for row in log if row["op"] == "exec" and row["argv"] == ["true"]]
    assert len(execs) == 3 and all(row["cwd"] == str(tmp_path) for row in execs), execs
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


def test_the_children_a_tool_calls_shell_forks_record_their_programs_where_they_ran(tmp_path):
    """A tool call's shell opens the session before its first fork and its
    children inherit it (shim/txn.c, session_for_children), with its cached
    cwd: a child that changes directory first (a subshell's cd) records its
    own, and every program of a pipeline or a list is recorded once, in the
    tool call's transaction."""
    ws = setup_ws(tmp_path)
    (ws / "sub").mkdir()
    agent = tmp_path / "shell_agent.py"
    agent.write_text(textwrap.dedent("""
        import subprocess
        for cmd in ["ls . | wc -l && (cd sub && pwd) && cat state.txt",
                    "(cd sub && ls -a) | sort; head -1 state.txt"]:
            subprocess.run(["bash", "-c", cmd], check=True, capture_output=True)
    """))
    r = subprocess.run(["/usr/bin/python3", str(agent)], cwd=ws, env=shim_env(tmp_path), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    log = [json.loads(line) for line in subprocess.run([TXREPLAY, "log", str(tmp_path / "j"), "--json"],
                                                       capture_output=True, text=True).stdout.splitlines()]
    execs = [row for row in log if row["op"] == "exec"]
    shells = [row for row in execs if row["argv"] and row["argv"][:2] == ["bash", "-c"]]
    assert len(shells) == 2 and shells[0]["txn"] != shells[1]["txn"] and all(row["txn"] for row in shells)
    progs = {}
    for row in execs:
        if row["argv"] and row["argv"][0] in ("ls", "wc", "pwd", "cat", "sort", "head"):
            progs.setdefault(" ".join(row["argv"]), []).append(row)
    # pwd is a bash builtin: not a program start
    want = {"ls .": (0, str(ws)), "wc -l": (0, str(ws)), "cat state.txt": (0, str(ws)),
            "ls -a": (1, str(ws / "sub")), "sort": (1, str(ws)), "head -1 state.txt": (1, str(ws))}
    assert set(progs) == set(want), progs
    for cmd, (k, cwd) in want.items():
        assert len(progs[cmd]) == 1, (cmd, progs[cmd])
        assert progs[cmd][0]["cwd"] == cwd, (cmd, progs[cmd][0])
        assert progs[cmd][0]["txn"] == shells[k]["txn"], (cmd, progs[cmd][0], shells[k])


def test_an_exec_record_keeps_a_long_command_line_whole_and_an_enormous_ones_beginning(tmp_path):
    """A command line past the exec hook's first buffer (4 KiB) is recorded
    whole from a second one (16 KiB); one past that keeps its first 8 KiB,
    the word cut there marked "...", and names the tool call in the list
    (shim/exec.c, record_exec_in)."""
    ws = setup_ws(tmp_path)
    long_arg, huge_arg = "L" * 6000, "H" * 40000
    agent = tmp_path / "argv_agent.py"
    agent.write_text(textwrap.dedent(f"""
        import subprocess
        for arg in ["short", {long_arg!r}, {huge_arg!r}]:
            subprocess.run(["bash", "-c", '/bin/true "$1" && /bin/true "$1"', "x", arg], check=True)
    """))
    r = subprocess.run(["/usr/bin/python3", str(agent)], cwd=ws, env=shim_env(tmp_path), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    log = [json.loads(line) for line in subprocess.run([TXREPLAY, "log", str(tmp_path / "j"), "--json"],
                                                       capture_output=True, text=True).stdout.splitlines()]
    trues = [row["argv"] for row in log if row["op"] == "exec" and row["path"] == "/bin/true"]
    cut = ["/bin/true", "H" * (8192 - len("/bin/true") - 1 - 4) + "..."]
    # each tool call's shell forks the first /bin/true and execs the second itself
    assert trues == [["/bin/true", "short"]] * 2 + [["/bin/true", long_arg]] * 2 + [cut] * 2, \
        [a[:1] + [x[:10] for x in a[1:]] for a in trues]
    shells = [row["argv"] for row in log if row["op"] == "exec" and row["argv"] and row["argv"][0] == "bash"]
    assert len(shells) == 3 and shells[2][:4] == ["bash", "-c", '/bin/true "$1" && /bin/true "$1"', "x"], \
        [a[:4] for a in shells]
    assert shells[2][4] == "H" * (8192 - sum(len(w) + 1 for w in shells[2][:4]) - 4) + "..."
    rows = [json.loads(line) for line in subprocess.run([TXREPLAY, "list", str(tmp_path / "j"), "--json"],
                                                        capture_output=True, text=True).stdout.splitlines()]
    assert [row["argv"][:2] for row in rows if row["argv"] and row["argv"][0] == "bash"] == [["bash", "-c"]] * 3


# --- FTSBX_TXN_GROUP: a harness makes several tool calls one transaction --------

def step(n):
    return ["/bin/sh", "-c", f"echo 'step {n}' >> state.txt; mkdir -p g{n} && echo {n} > g{n}/f; rm -f sym"]


def exec_txns(tmp_path):
    """The transaction of each step's exec record, by step."""
    log = [json.loads(line) for line in subprocess.run([TXREPLAY, "log", str(tmp_path / "j"), "--json"],
                                                       capture_output=True, text=True).stdout.splitlines()]
    return {row["argv"][2].split("'")[1]: row["txn"] for row in log
            if row["op"] == "exec" and row["argv"] and row["argv"][:2] == ["/bin/sh", "-c"]}


def test_a_group_of_separately_started_processes_is_one_transaction(tmp_path):
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    r, codes, snaps = start_calls(tmp_path, ws, "vfork", [
        (None, step(1)),
        ("vfork", step(2), "build"),
        ("os_posix_spawn", step(3), "build"),
        ("fork", step(4), "build"),
        (None, ["cat", "state.txt"]),           # no group: the group ends
        ("spawn", step(5), "build"),            # the same name again: a new transaction
    ], on_failure="keep")
    assert codes == [0] * 6, r.stderr
    txn = exec_txns(tmp_path)
    assert txn["step 2"] == txn["step 3"] == txn["step 4"], txn
    assert len({txn["step 1"], txn["step 2"], txn["step 5"]}) == 3, txn
    rows = {row["txn"]: row for row in txn_rows(tmp_path)}
    group = rows[txn["step 2"]]
    assert group["argv"] == step(2) and group["changes"] >= 6, group
    assert [row["txn"] for row in rows.values() if row["argv"] in (step(3), step(4))] == [], rows
    # rewound together, and nothing else: back to the tree after step 1,
    # with step 5 rewound first (it built on the group's state.txt)
    for t in (txn["step 5"], txn["step 2"]):
        out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j"), "--txn", str(t)], capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stdout + out.stderr
    assert_same(snaps[1], snapshot(os.fsencode(ws)), "the tree after the group's rewind")
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


def test_a_failing_member_rewinds_its_whole_group(tmp_path):
    ws = setup_ws(tmp_path)
    fail = ["/bin/sh", "-c", "echo 'step 3' >> state.txt; exit 5"]
    r, codes, snaps = start_calls(tmp_path, ws, "vfork", [
        (None, step(1)),
        (None, step(2), "edit"),
        ("fork", fail, "edit"),
        (None, step(4), "edit"),        # the group goes on, in the same transaction
    ])
    assert codes == [0, 0, 5, 0], r.stderr
    assert_same(snaps[1], snaps[3], "the tree after the group's failed member")
    txn = exec_txns(tmp_path)
    assert txn["step 2"] == txn["step 3"] == txn["step 4"] != txn["step 1"], txn
    assert f"(transaction {txn['step 2']}) exited with 5" in r.stderr
    assert (ws / "state.txt").read_text() == "zero\nstep 1\nstep 4\n"


def test_a_group_going_on_after_its_failed_member_is_journaled_again(tmp_path):
    """The members after a failed (and rewound) one change the paths the
    group recorded before the rewind: each change is journaled afresh, the
    files and their directories, so that a whole-session rewind gives back
    the tree."""
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    member = lambda n: ["/bin/sh", "-c", f"echo {n} >> state.txt; echo {n} > f; touch src/t{n}; rm -f a.txt"]
    r, codes, snaps = start_calls(tmp_path, ws, "vfork", [
        (None, member(1), "edit"),
        (None, ["/bin/sh", "-c", "echo 2 >> state.txt; exit 1"], "edit"),
        (None, member(3), "edit"),
    ])
    assert codes == [0, 1, 0], r.stderr
    assert_same(before, snaps[2], "the tree after the group's failed member")
    assert (ws / "state.txt").read_text() == "zero\n3\n" and (ws / "f").read_text() == "3\n"
    rewind_whole(tmp_path, ws, before)


CLOSED_SHELL_AGENT = """
import subprocess, sys, time
p = subprocess.Popen(["bash"], stdin=subprocess.PIPE, text=True)
def cmd(c):
    p.stdin.write(c + "\\n")
    p.stdin.flush()
    time.sleep(0.3)
cmd("printf 'fixed\\\\n' > a.txt")
cmd("ls > /dev/null")
cmd("echo more >> state.txt")
if sys.argv[1] == "terminate":
    p.terminate()
else:                   # a last builtin that fails, then the end of its input
    cmd("test -e nothing-here")
    p.stdin.close()
print(p.wait(), repr(open("a.txt").read()), repr(open("state.txt").read()))
"""


@pytest.mark.parametrize("how", ["terminate", "failed_builtin"])
def test_closing_a_session_shell_keeps_what_it_wrote_itself(tmp_path, how):
    """A harness closes its shell by a signal, or the shell's last builtin
    failed: the shell's tool call ends failed, and with rewind on failure
    is rewound; the shell's own writes, before its first command too, are
    transactions of their own and stay."""
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    r = run_script(tmp_path, ws, "closed_shell_agent.py", CLOSED_SHELL_AGENT, how)
    assert r.returncode == 0, r.stderr
    code = "-15" if how == "terminate" else "1"
    assert r.stdout.strip() == f"{code} 'fixed\\n' 'zero\\nmore\\n'", r.stdout + r.stderr
    rewind_whole(tmp_path, ws, before)


FORKED_SHELL_AGENT = """
import os, subprocess, time
if os.fork() == 0:      # the agent's own worker keeps a shell open
    p = subprocess.Popen(["bash"], stdin=subprocess.PIPE, text=True)
    for c in ["touch made.txt", "sh -c 'echo bad >> state.txt; rm -f a.txt; exit 2'", "ls > /dev/null"]:
        p.stdin.write(c + "\\n")
        p.stdin.flush()
        time.sleep(0.3)
    p.stdin.write("exit 0\\n")
    p.stdin.close()
    p.wait()
    os._exit(0)
os.wait()
print(open("state.txt").read().split(), os.path.exists("a.txt"), os.path.exists("made.txt"))
"""


def test_a_session_shell_of_a_forked_worker_starts_transactions(tmp_path):
    """A fork of the root is the agent itself: a shell it keeps open is a
    session shell, as the root's own would be."""
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    r = run_script(tmp_path, ws, "forked_shell_agent.py", FORKED_SHELL_AGENT)
    assert r.stdout.strip() == "['zero'] True True", r.stdout + r.stderr
    rewind_whole(tmp_path, ws, before)


TMUX_AGENT = """
import os, subprocess, sys, time
sock = "ftsbx-test-%d" % os.getpid()
def tmux(*a):
    return subprocess.run(["tmux", "-L", sock, *a], capture_output=True, text=True)
def run(cmd, n):
    tmux("send-keys", "-t", "main", cmd + "; echo __DONE__$?", "Enter")
    for _ in range(400):
        lines = [l for l in tmux("capture-pane", "-p", "-t", "main").stdout.splitlines() if l.startswith("__DONE__")]
        if len(lines) >= n:
            return lines[n - 1]
        time.sleep(0.025)
    return "timeout"
tmux("new-session", "-d", "-s", "main", "-x", "200", "-y", "50", "bash", "--norc", "--noprofile")
codes = [run("sh -c 'echo bad >> state.txt; rm -f a.txt; exit 3'", 1), run("sh -c 'echo good >> state.txt'", 2),
         run("mkdir -p t && sh -c 'echo x > t/f'", 3)]
tmux("kill-server")
print(codes, open("state.txt").read().split(), os.path.exists("a.txt"))
"""


@pytest.mark.skipif(not shutil.which("tmux"), reason="no tmux")
def test_each_command_typed_into_a_tmux_pane_is_its_own_transaction(tmp_path):
    """A harness that keeps its shell in a tmux pane (OpenHands' libtmux)
    and types each command into it: the pane's shell, which tmux's server
    runs, starts transactions as the root does, so a failing command is
    rewound before the harness reads the pane."""
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    r = run_script(tmp_path, ws, "tmux_agent.py", TMUX_AGENT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['__DONE__3', '__DONE__0', '__DONE__0'] ['zero', 'good'] True", r.stdout + r.stderr
    rows = {" ".join(row["argv"] or []): row for row in txn_rows(tmp_path)}
    assert rows["sh -c echo bad >> state.txt; rm -f a.txt; exit 3"]["rewound"] == "yes", rows
    assert rows["sh -c echo good >> state.txt"]["rewound"] == "no", rows
    rewind_whole(tmp_path, ws, before)


@pytest.mark.skipif(not shutil.which("tmux"), reason="no tmux")
def test_a_tmux_server_the_session_did_not_start_is_refused(tmp_path):
    """The user's own tmux server (an agent often runs inside one) would run
    what a client sends it outside every rule: its clients' connects are
    refused, and nothing reaches it."""
    ws = setup_ws(tmp_path)
    sock = str(tmp_path / "user.sock")
    plain = dict(os.environ, HOME=str(tmp_path))
    plain.pop("LD_PRELOAD", None)
    subprocess.run(["tmux", "-S", sock, "new-session", "-d", "-s", "user", "sleep 120"], env=plain, check=True)
    try:
        marker = tmp_path / "escaped"
        r = subprocess.run(["bash", "-c", f"tmux -S {sock} run-shell 'touch {marker}'; "
                            f"tmux -S {sock} new-window -d 'touch {marker}'; "
                            f"tmux -S {sock} send-keys -t user 'touch {marker}' Enter; echo done"],
                           cwd=ws, env=shim_env(tmp_path), capture_output=True, text=True, timeout=60)
        time.sleep(0.5)
        assert r.stdout.strip() == "done" and r.stderr.count("server the session did not start") == 3, \
            r.stdout + r.stderr
        assert not marker.exists()
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], env=plain, capture_output=True)


def test_a_spawn_that_fails_after_its_file_actions_ends_its_tool_call(tmp_path):
    """glibc makes a posix_spawn's file actions in the child before its
    exec: a spawn of a program that is not there has truncated the file by
    then. Its tool call ends as a shell's 127 and is rewound on failure."""
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    r = run_script(tmp_path, ws, "spawn_agent.py", textwrap.dedent("""
        import os
        try:
            os.posix_spawn("/nonexistent/tool", ["tool"], os.environ,
                           file_actions=[(os.POSIX_SPAWN_OPEN, 1, "state.txt", os.O_WRONLY | os.O_TRUNC, 0)])
        except OSError as e:
            print(e.errno)
        print(open("state.txt").read().strip())
    """))
    assert r.stdout.split() == ["2", "zero"], r.stdout + r.stderr
    rows = [json.loads(line) for line in subprocess.run([TXREPLAY, "list", str(tmp_path / "j"), "--json"],
                                                        capture_output=True, text=True).stdout.splitlines()]
    assert [(row["status"], row["rewound"]) for row in rows if row["changes"]] == [(127, "yes")], rows
    rewind_whole(tmp_path, ws, before)


WRITER = """
import os, time
with open("big.bin", "r+b") as f:
    for i in range(12):
        f.seek(i)
        f.write(b"W")
        f.flush()
        time.sleep(0.05)
for i in range(6):
    os.close(os.open("big.bin", os.O_WRONLY))
    time.sleep(0.05)
"""

LONG_AGENT = """
import subprocess, sys
writer = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
for i in range(10):
    subprocess.run(["sh", "-c", f"echo {i} >> state.txt"], check=True)
writer.wait()
"""


def test_a_running_call_is_not_copied_again_when_others_end(tmp_path):
    """One tool call rewrites a file in place again and again while the
    agent runs others, each of which ends: its pre-image is saved once (the
    end of one call takes nothing from another's copy on first write)."""
    ws = setup_ws(tmp_path)
    with open(ws / "big.bin", "wb") as f:
        f.write(os.urandom(1 << 20))
    before = snapshot(os.fsencode(ws))
    r = run_script(tmp_path, ws, "long_agent.py", LONG_AGENT, WRITER, FTSBX_ON_FAILURE="keep")
    assert r.returncode == 0, r.stderr
    log = [json.loads(line) for line in subprocess.run([TXREPLAY, "log", str(tmp_path / "j"), "--json"],
                                                       capture_output=True, text=True).stdout.splitlines()]
    saved = [row["op"] for row in log if row["op"] in ("content", "append", "create", "meta")
             and row["path"] == str(ws / "big.bin")]
    assert saved == ["content"], saved
    rewind_whole(tmp_path, ws, before)


# A tool call that leaves a job running: the job changes files after the
# call's end (the server's log of `nohup server > log &`), some of them
# already recorded by the call, some after the call was rewound.
JOBS = {
    "nohup": ("nohup sh -c 'echo up; sleep 0.3; echo more; touch src/late' > server.log 2>&1 &", 0),
    "appends_after_success": ("echo 1 >> state.txt; echo 1 > f; "
                              "(sleep 0.3; echo 2 >> f; echo 2 >> state.txt; touch src/late) >/dev/null 2>&1 &", 0),
    "appends_after_rewind": ("echo 1 >> state.txt; echo 1 > f; "
                             "(sleep 0.5; echo 2 >> f; echo 2 >> state.txt; touch src/late) >/dev/null 2>&1 & exit 4", 4),
}


@pytest.mark.parametrize("job", sorted(JOBS))
def test_what_a_job_left_running_changes_is_rewound_without_drift(tmp_path, job):
    script, code = JOBS[job]
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    r = run_script(tmp_path, ws, "job_agent.py", textwrap.dedent(f"""
        import os, subprocess, sys, time
        print(subprocess.run(["/bin/sh", "-c", {script!r}]).returncode)
        for _ in range(1000):
            if os.path.exists("src/late"):
                break
            time.sleep(0.01)
        time.sleep(0.1)
        print(os.path.exists("src/late"))
    """))
    assert r.stdout.split() == [str(code), "True"], r.stdout + r.stderr
    rewind_whole(tmp_path, ws, before)


def test_tool_calls_started_from_threads_at_once_are_each_their_own_transaction(tmp_path):
    """vfork from four threads at once (each child on its thread's memory),
    fork and posix_spawn mixed in: every call is one transaction holding
    exactly its own change, and its failure rewinds only that."""
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    agent = tmp_path / "threads_agent.py"
    agent.write_text(textwrap.dedent("""
        import os, subprocess
        from concurrent.futures import ThreadPoolExecutor

        def call(i):
            cmd = f"echo {i} > out{i}.txt" + ("; exit 1" if i % 10 == 7 else "")
            if i % 5 == 1:
                return subprocess.run(["sh", "-c", cmd], close_fds=False, executable="/bin/sh").returncode
            return subprocess.run(["sh", "-c", cmd]).returncode

        with ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(call, range(80)))
        assert codes == [1 if i % 10 == 7 else 0 for i in range(80)], codes
    """))
    env = shim_env(tmp_path, FTSBX_ON_FAILURE="rewind")
    r = subprocess.run(["/usr/bin/python3", str(agent)], cwd=ws, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in ws.glob("out*.txt")) == sorted(f"out{i}.txt" for i in range(80) if i % 10 != 7)
    log = [json.loads(line) for line in subprocess.run([TXREPLAY, "log", str(tmp_path / "j"), "--json"],
                                                       capture_output=True, text=True).stdout.splitlines()]
    by_cmd = {}
    for row in log:
        if row["op"] == "exec" and row["argv"] and row["argv"][0] == "sh":
            by_cmd.setdefault(row["argv"][2].split()[1], set()).add(row["txn"])
    assert len(by_cmd) == 80 and all(len(t) == 1 for t in by_cmd.values()), by_cmd
    txns = {i: by_cmd[str(i)].pop() for i in range(80)}
    assert len(set(txns.values())) == 80
    for row in log:
        if row["op"] == "create" and row["path"].startswith(str(ws / "out")):
            i = int(row["path"][len(str(ws / "out")):-4])
            assert row["txn"] == txns[i], (row, txns[i])
            assert row["rewound"] == (i % 10 == 7), row
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


# --- session shells: a harness that keeps one bash open and writes commands to it --

# The harness (SWE-agent, OpenHands, pexpect style): one /bin/bash, each
# command written to its stdin followed by an `echo MARKER $?` line, output
# read up to the marker. MODE "popen": subprocess.Popen(["/bin/bash"]);
# "asyncio": asyncio.create_subprocess_shell("/bin/bash") (/bin/sh -c /bin/bash).
SHELL_AGENT = textwrap.dedent("""
    import asyncio, os, pickle, subprocess, sys
    sys.path.insert(0, sys.argv[2])
    from conftest import snapshot

    mode, out, cmds = sys.argv[1], sys.argv[3], sys.argv[4:]
    snaps, results = [snapshot(b".")], []

    def framed(cmd):
        return (cmd + "\\necho __DONE__ $?\\n").encode()

    def result(lines, marker):
        results.append(("".join(lines), int(marker.split()[1])))
        snaps.append(snapshot(b"."))

    if mode == "popen":
        p = subprocess.Popen(["/bin/bash"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for cmd in cmds:
            p.stdin.write(framed(cmd))
            p.stdin.flush()
            lines = []
            while not (line := p.stdout.readline().decode(errors="replace")).startswith("__DONE__"):
                lines.append(line)
            result(lines, line)
        p.stdin.close()
        code = p.wait()
    else:
        async def main():
            p = await asyncio.create_subprocess_shell("/bin/bash", stdin=asyncio.subprocess.PIPE,
                                                      stdout=asyncio.subprocess.PIPE)
            for cmd in cmds:
                p.stdin.write(framed(cmd))
                await p.stdin.drain()
                lines = []
                while not (line := (await p.stdout.readline()).decode(errors="replace")).startswith("__DONE__"):
                    lines.append(line)
                result(lines, line)
            p.stdin.close()
            return await p.wait()
        code = asyncio.run(main())
    with open(out, "wb") as f:
        pickle.dump((code, results, snaps), f)
""")


def shell_session(tmp_path, ws, mode, cmds, on_failure="keep"):
    agent = tmp_path / "shell_agent.py"
    agent.write_text(SHELL_AGENT)
    out = tmp_path / "shell.pickle"
    env = shim_env(tmp_path, FTSBX_ON_FAILURE=on_failure, PATH="/usr/local/bin:/usr/bin:/bin",
                   PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run(["/usr/bin/python3", str(agent), mode, TESTDIR, str(out), *cmds], cwd=ws, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    import pickle
    with open(out, "rb") as f:
        code, results, snaps = pickle.load(f)
    return r, code, results, snaps


def list_rows(tmp_path):
    out = subprocess.run([TXREPLAY, "list", str(tmp_path / "j"), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


SHELL_CMDS = [
    "touch made.txt",
    "sh -c 'echo two >> state.txt'",
    "mkdir -p d/e && cp state.txt d/e/copy",
    "rm -f a.txt",
]


@pytest.mark.parametrize("mode", ["popen", "asyncio"])
def test_each_command_of_a_persistent_shell_is_its_own_transaction(tmp_path, mode):
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    r, code, results, snaps = shell_session(tmp_path, ws, mode, SHELL_CMDS)
    assert code == 0 and [c for _, c in results] == [0, 0, 0, 0], r.stderr
    assert_same(before, snaps[0])
    assert (ws / "made.txt").exists() and not (ws / "a.txt").exists()
    assert (ws / "d" / "e" / "copy").read_text() == "zero\ntwo\n"
    rows = list_rows(tmp_path)
    by_cmd = {" ".join(row["argv"] or []): row for row in rows}
    for cmd in ("touch made.txt", "sh -c echo two >> state.txt", "mkdir -p d/e", "cp state.txt d/e/copy",
                "rm -f a.txt"):
        assert cmd in by_cmd, (cmd, list(by_cmd))
        row = by_cmd[cmd]
        assert row["status"] == 0 and row["changes"] >= 1, row
    assert len({by_cmd[c]["txn"] for c in ("touch made.txt", "mkdir -p d/e", "cp state.txt d/e/copy",
                                           "rm -f a.txt")}) == 4
    # the shell itself: the root's tool call, holding none of the commands' changes
    shell = [row for row in rows if row["argv"] and row["argv"][-1] == "/bin/bash"]
    assert shell and all(row["changes"] == 0 for row in shell), rows
    # each command's transactions hold exactly its changes: rewinding them,
    # last first, gives back the tree before it
    for i, cmds in ((3, ["rm -f a.txt"]), (2, ["cp state.txt d/e/copy", "mkdir -p d/e"])):
        for cmd in cmds:
            out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j"), "--txn", str(by_cmd[cmd]["txn"])],
                                 capture_output=True, text=True)
            assert out.returncode == 0, out.stdout + out.stderr
        assert_same(snaps[i], snapshot(os.fsencode(ws)), f"the tree before command {i + 1}")
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


@pytest.mark.parametrize("mode", ["popen", "asyncio"])
def test_a_failing_command_of_a_persistent_shell_is_rewound(tmp_path, mode):
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    r, code, results, snaps = shell_session(tmp_path, ws, mode, [
        "touch made.txt",
        "echo own > own.txt",           # the shell's own write (a redirection of a builtin)
        "sh -c 'echo bad > state.txt; mkdir junk; rm -f a.txt; exit 3'",
        "cat state.txt; ls",
    ], on_failure="rewind")
    assert code == 0, r.stderr
    assert [c for _, c in results] == [0, 0, 3, 0], r.stderr
    # the failed command was rewound before the shell ran the next one
    assert_same(snaps[2], snaps[3], "the tree after the failed command")
    out4 = results[3][0]
    assert out4.startswith("zero\n") and "a.txt" in out4 and "junk" not in out4, out4
    assert (ws / "made.txt").exists() and (ws / "own.txt").read_text() == "own\n"
    rows = list_rows(tmp_path)
    failed = [row for row in rows if row["argv"] and row["argv"][0] == "sh" and "exit 3" in row["argv"][2]]
    assert len(failed) == 1 and failed[0]["status"] == 3 and failed[0]["rewound"] == "yes", rows
    assert f"(transaction {failed[0]['txn']}) exited with 3" in r.stderr
    assert [row["rewound"] for row in rows if row["status"] not in (None, 3)] == \
        ["no" if row["changes"] else "-" for row in rows if row["status"] not in (None, 3)]
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


def test_a_stdin_shell_inside_a_tool_call_is_part_of_it(tmp_path):
    """`bash -c '... | bash'`: the inner bash reads its commands from a pipe,
    but it is not the root's tool call: the whole call is one transaction,
    and its failure rewinds all of it."""
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    r, codes, snaps = start_calls(tmp_path, ws, "vfork", [
        (None, ["bash", "-c", "printf 'touch inner\\nmkdir innerdir\\nfalse\\n' | bash"]),
        (None, ["bash", "-c", "printf 'touch kept\\nmkdir keptdir\\n' | bash"]),
    ])
    assert codes == [1, 0], r.stderr
    assert_same(snaps[0], snaps[1], "the tree after the failed call")
    assert (ws / "kept").exists() and (ws / "keptdir").is_dir()
    rows = txn_rows(tmp_path)
    assert [" ".join(row["argv"]) for row in rows] == [
        "bash -c printf 'touch inner\\nmkdir innerdir\\nfalse\\n' | bash",
        "bash -c printf 'touch kept\\nmkdir keptdir\\n' | bash"], rows
    assert [(row["status"], row["rewound"]) for row in rows] == [(1, "yes"), (0, "no")], rows
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


# pexpect and pty.fork() start the shell through forkpty, which glibc forks
# inside the C library: the shim's forkpty forks through the fork hook.
PTY_AGENT = textwrap.dedent("""
    import os, pty, re, sys
    cmds = sys.argv[1:]
    pid, fd = pty.fork()
    if pid == 0:
        os.execve("/bin/bash", ["bash", "--norc", "--noprofile"], dict(os.environ, PS1="", PS2=""))
    done = re.compile(rb"(?<!echo )__DONE__ (\\d+)")
    buf, codes = b"", []
    for cmd in cmds:
        os.write(fd, (cmd + "\\necho __DONE__ $?\\n").encode())
        while not (m := done.search(buf)):
            buf += os.read(fd, 4096)
        codes.append(int(m.group(1)))
        buf = buf[m.end():]
    os.write(fd, b"exit\\n")
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass
    _, status = os.waitpid(pid, 0)
    print(codes, os.waitstatus_to_exitcode(status))
""")


def test_a_shell_on_a_pseudo_terminal_is_a_session_shell(tmp_path):
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    agent = tmp_path / "pty_agent.py"
    agent.write_text(PTY_AGENT)
    env = shim_env(tmp_path, FTSBX_ON_FAILURE="rewind", PATH="/usr/local/bin:/usr/bin:/bin")
    r = subprocess.run(["/usr/bin/python3", str(agent), "touch made.txt",
                        "sh -c 'echo bad > state.txt; mkdir junk; exit 3'", "touch after.txt"],
                       cwd=ws, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[0, 3, 0] 0", r.stdout + r.stderr
    assert (ws / "state.txt").read_text() == "zero\n" and not (ws / "junk").exists()
    assert (ws / "made.txt").exists() and (ws / "after.txt").exists()
    rows = list_rows(tmp_path)
    by_cmd = {" ".join(row["argv"] or []): row for row in rows}
    assert "touch made.txt" in by_cmd and "touch after.txt" in by_cmd, list(by_cmd)
    assert by_cmd["touch made.txt"]["txn"] != by_cmd["touch after.txt"]["txn"]
    failed = [row for row in rows if row["argv"] and row["argv"][0] == "sh" and "exit 3" in row["argv"][2]]
    assert len(failed) == 1 and failed[0]["rewound"] == "yes", rows
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


# --- an agent loop in Node.js (child_process through libuv) ----------------------

NODE_AGENT = r"""
const cp = require('child_process');
const log = [];
const run = (c) => {
  try { cp.execSync(c, {shell: '/bin/bash', stdio: 'pipe'}); return 0; }
  catch (e) { return e.status; }
};
const state = () => require('fs').readFileSync('state.txt', 'utf8');
log.push([run('echo one >> state.txt'), state()]);
log.push([run('echo two >> state.txt; rm -f a.txt; exit 3'), state()]);
const r = cp.spawnSync('sh', ['-c', 'echo three >> state.txt; exit 4']);
log.push([r.status, state()]);
const child = cp.spawn('bash', ['-c', 'echo four >> state.txt']);
child.on('exit', (code) => {
  log.push([code, state()]);
  console.log(JSON.stringify(log));
});
"""


@pytest.mark.skipif(not shutil.which("node"), reason="no node")
def test_a_node_agent_loop_gets_a_transaction_per_call_and_rewinds_failures(tmp_path):
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    (tmp_path / "agent.js").write_text(NODE_AGENT)
    env = shim_env(tmp_path, FTSBX_ON_FAILURE="rewind")
    r = subprocess.run(["node", str(tmp_path / "agent.js")], cwd=ws, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    log = json.loads(r.stdout.strip().splitlines()[-1])
    assert log == [[0, "zero\none\n"], [3, "zero\none\n"], [4, "zero\none\n"], [0, "zero\none\nfour\n"]], log
    assert (ws / "a.txt").exists(), "the failed call's rm must be undone"
    rows = [json.loads(l) for l in subprocess.run([TXREPLAY, "list", str(tmp_path / "j"), "--json"],
                                                  capture_output=True, text=True).stdout.splitlines()]
    cmds = [" ".join(row["argv"] or []) for row in rows if row["txn"] != 0]
    for call in ("echo one", "exit 3", "exit 4", "echo four"):
        assert sum(call in c for c in cmds) == 1, (call, cmds)
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


# --- the root's table of its children (pid -> tool call), with pids reused ----------

# The agent runs as pid 1 of a pid namespace of its own, where it can choose
# the next pid (/proc/sys/kernel/ns_last_pid, opened on descriptor 9 before
# the shim loads): it keeps LIVE tool calls running, reaps one at random
# (or whichever the kernel picks, with wait()), and at once starts the next
# one on the pid just freed, by posix_spawn, fork + exec or subprocess's
# vfork in turn. Most of the pids share one home slot in txn.c's table (its
# hash, copied here: the worst case for its probing; with another hash the
# test still runs, just easier). Each call writes its own file and exits with its own
# status; a failed one is rewound when reaped. A tool call matched to the
# wrong transaction would rewind another's file, or keep a failed one's.
PID_REUSE_AGENT = textwrap.dedent("""
    import os, random, subprocess, sys
    rng = random.Random(int(sys.argv[1]))
    LIVE, CALLS = 48, 200
    live, want, popens, forced, n = {}, {}, [], 0, 0

    def start(pid_wanted):
        global n, forced
        i, n = n, n + 1
        status = rng.choice([0, 0, 1, 2])
        argv = ["/bin/sh", "-c", f"echo {i} > out{i}.txt; exit {status}"]
        os.pwrite(9, str(pid_wanted - 1).encode(), 0)
        how = i % 3
        if how == 0:
            pid = os.posix_spawn("/bin/sh", argv, os.environ)
        elif how == 1:
            pid = os.fork()
            if pid == 0:
                try:
                    os.execv("/bin/sh", argv)
                finally:
                    os._exit(127)
        else:
            p = subprocess.Popen(argv)
            popens.append(p)
            pid = p.pid
        forced += pid == pid_wanted
        live[pid] = (i, status)

    home = lambda p: (p * 0x9e3779b1 & 0xffffffff) >> 22
    pool = [p for p in range(300, 1 << 15) if home(p) == home(300)][:LIVE - 8] + list(range(200, 208))
    for p in pool:
        start(p)
    while live:
        if rng.random() < 0.2:
            pid, st = os.wait()
        else:
            pid, st = os.waitpid(rng.choice(list(live)), 0)
        i, status = live.pop(pid)
        assert os.waitstatus_to_exitcode(st) == status, (i, st, status)
        want[i] = status
        if n < CALLS:
            start(pid)
    print(forced, n)
    for p in popens:
        p.returncode = 0        # reaped above
    print(repr(want))
""")


def test_tool_calls_on_reused_pids_reaped_in_any_order_keep_their_transactions(tmp_path):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a pid namespace")
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    agent = tmp_path / "reuse_agent.py"
    agent.write_text(PID_REUSE_AGENT)
    env = shim_env(tmp_path, preload=False, drop=("LD_PRELOAD",), FTSBX_ON_FAILURE="rewind")
    script = f"exec 9>/proc/sys/kernel/ns_last_pid && exec env LD_PRELOAD={SHIM} /usr/bin/python3 {agent} 5"
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "/bin/sh", "-c", script], cwd=ws, env=env,
                       capture_output=True, text=True, timeout=300)
    if r.returncode and "unshare" in r.stderr and "ftsbx" not in r.stderr:
        pytest.skip(f"no pid namespace here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    forced, calls = map(int, r.stdout.splitlines()[-2].split())
    want = eval(r.stdout.splitlines()[-1])
    assert calls == len(want) == 200
    assert forced >= 180, f"only {forced} of {calls} calls got the pid they were meant to reuse"
    assert sorted(p.name for p in ws.glob("out*.txt")) == sorted(f"out{i}.txt" for i, s in want.items() if s == 0)
    for i, s in want.items():
        if s == 0:
            assert (ws / f"out{i}.txt").read_text() == f"{i}\n"
    rows = txn_rows(tmp_path)
    by_call = {int(row["argv"][2].split()[1]): row for row in rows if row["argv"][0] == "/bin/sh"}
    assert sorted(by_call) == list(range(200)), rows
    for i, s in want.items():
        assert by_call[i]["status"] == s and by_call[i]["rewound"] == ("yes" if s else "no"), (i, by_call[i])
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


# --- an agent loop in Java (ProcessBuilder starts commands through jspawnhelper) ----

JAVA_AGENT = """
import java.nio.file.*;
public class Agent {
  static int run(String c) throws Exception {
    return new ProcessBuilder("bash", "-c", c).inheritIO().start().waitFor();
  }
  static String state() throws Exception { return new String(Files.readAllBytes(Paths.get("state.txt"))); }
  public static void main(String[] a) throws Exception {
    int one = run("echo one >> state.txt");
    String s1 = state();
    int two = run("echo two >> state.txt; rm -f a.txt; exit 3");
    System.out.println(one + "|" + two + "|" + s1.replace("\\n", "/") + "|" + state().replace("\\n", "/"));
  }
}
"""


@pytest.mark.skipif(not (shutil.which("javac") and shutil.which("java")), reason="no JDK")
def test_a_java_agent_loop_records_the_commands_behind_jspawnhelper(tmp_path):
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    (tmp_path / "Agent.java").write_text(JAVA_AGENT)
    subprocess.run(["javac", "-d", str(tmp_path), str(tmp_path / "Agent.java")], check=True, timeout=300)
    env = shim_env(tmp_path, FTSBX_ON_FAILURE="rewind", TMPDIR=str(tmp_path))
    r = subprocess.run(["java", "-Xshare:auto", "-cp", str(tmp_path), "Agent"], cwd=ws, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "0|3|zero/one/|zero/one/", r.stdout
    assert (ws / "a.txt").exists(), "the failed call's rm must be undone"
    rows = [json.loads(l) for l in subprocess.run([TXREPLAY, "list", str(tmp_path / "j"), "--json"],
                                                  capture_output=True, text=True).stdout.splitlines()]
    cmds = [row["argv"] for row in rows if row["txn"] != 0]
    assert ["bash", "-c", "echo one >> state.txt"] in cmds, cmds
    assert ["bash", "-c", "echo two >> state.txt; rm -f a.txt; exit 3"] in cmds, cmds
    assert not any("jspawnhelper" in " ".join(c or []) for c in cmds), cmds
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


# --- the environment a tool call gets: its own FTSBX_TXN, the shim's variables back ---

ENV_AGENT = textwrap.dedent("""
    import os, subprocess, sys
    out = []
    variants = {
        "inherited": dict(os.environ),
        "empty": {},
        "foreign": {"LD_PRELOAD": "libc.so.6", "FTSBX_TXN": "999", "X": "1"},
        "stale_txn": dict(os.environ, FTSBX_TXN="12345", Y="2"),
        "no_journal": {k: v for k, v in os.environ.items() if k != "FTSBX_JOURNAL"},
    }
    for name, env in variants.items():
        for how in ("spawn", "vfork", "fork"):
            argv = ["/usr/bin/env", "-0"]
            if how == "spawn":
                r, w = os.pipe()
                fa = [(os.POSIX_SPAWN_DUP2, w, 1)]
                pid = os.posix_spawn(argv[0], argv, env, file_actions=fa)
                os.close(w)
                data = b""
                while chunk := os.read(r, 65536):
                    data += chunk
                os.close(r)
                os.waitpid(pid, 0)
            elif how == "vfork":
                data = subprocess.run(argv, env=env, stdout=subprocess.PIPE, check=True).stdout
            else:
                subprocess._USE_VFORK = False
                data = subprocess.run(argv, env=env, stdout=subprocess.PIPE, check=True).stdout
                subprocess._USE_VFORK = True
            out.append((name, how, [v.decode() for v in data.split(b"\\0") if v]))
    print(repr(out))
""")


def test_each_tool_call_gets_its_own_txn_and_the_shims_variables_back_in_any_environment(tmp_path):
    ws = setup_ws(tmp_path)
    agent = tmp_path / "env_agent.py"
    agent.write_text(ENV_AGENT)
    env = shim_env(tmp_path)
    r = subprocess.run(["/usr/bin/python3", str(agent)], cwd=ws, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    out = eval(r.stdout.strip().splitlines()[-1])
    txns = []
    for name, how, lines in out:
        names = [line.split("=", 1)[0] for line in lines]
        assert names.count("LD_PRELOAD") == 1 and names.count("FTSBX_TXN") == 1, (name, how, lines)
        got = dict(line.split("=", 1) for line in lines)
        assert SHIM in got["LD_PRELOAD"].replace(":", " ").split(), (name, how, got)
        assert got["FTSBX_JOURNAL"] == str(tmp_path / "j"), (name, how, got)
        assert "FTSBX_ROOT" in got, (name, how, got)
        txns.append(int(got["FTSBX_TXN"]))
        if name == "foreign":
            assert got["X"] == "1" and "libc.so.6" not in got["LD_PRELOAD"], got
        if name == "stale_txn":
            assert got["Y"] == "2", got
    assert len(set(txns)) == len(txns) and 0 not in txns, txns
    # each is the transaction the journal gives that tool call
    rows = [row for row in txn_rows(tmp_path) if row["argv"][:1] == ["/usr/bin/env"]]
    assert sorted(row["txn"] for row in rows) == sorted(txns), (rows, txns)


# --- a fork inside the C library (daemon()) that no hook sees -----------------------

# WRITE_FIRST: the process journals a change before daemon(), so that the
# shim keeps its pid and has registered its fork handler; else the child's
# first record is the process's first. Each file holds the pid that made it.
DAEMON = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void put(const char *name)
{
	char buf[32];
	int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
	if (fd < 0 || write(fd, buf, (size_t)n) != n)
		exit(1);
	close(fd);
}

int main(int argc, char **argv)
{
	if (!strcmp(argv[1], "write-first"))
		put("before");
	if (daemon(1, 1))
		return 1;
	put("after.tmp");
	rename("after.tmp", "after");
	return 0;
}
"""


@pytest.mark.parametrize("first", ["write-first", "fork-first"])
def test_a_daemon_child_journals_under_its_own_pid(tmp_path, first):
    if not shutil.which("gcc"):
        pytest.skip("no gcc")
    ws = setup_ws(tmp_path)
    exe = tmp_path / "daemonize"
    subprocess.run(["gcc", "-O2", "-x", "c", "-", "-o", str(exe)], input=DAEMON.encode(), check=True)
    env = shim_env(tmp_path)
    r = subprocess.run(["/bin/sh", "-c", f"{exe} {first}"], cwd=ws, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    for _ in range(500):
        if (ws / "after").exists():
            break
        time.sleep(0.01)
    child = int((ws / "after").read_text())
    log = [json.loads(line) for line in subprocess.run([TXREPLAY, "log", str(tmp_path / "j"), "--json"],
                                                       capture_output=True, text=True).stdout.splitlines()]
    made = {os.path.basename(row["path"]): row["pid"] for row in log if row["op"] == "create"}
    assert made["after.tmp"] == child, (made, child)
    if first == "write-first":
        assert made["before"] == int((ws / "before").read_text()) != child, made
    out = subprocess.run([TXREPLAY, "verify", str(tmp_path / "j")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("mode", ["vfork", "spawn"])
def test_a_failed_call_that_changed_nothing_is_reaped_in_silence(tmp_path, mode):
    """A failed tool call with nothing to rewind (grep without a match, the
    commonest failure of an agent's loop) gets no line on the agent's
    stderr; a failed one that changed a file gets its line and its rewind,
    and the calls after see the clean tree."""
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    calls = [(None, ["/bin/grep", "-q", "no such text", "state.txt"]),
             (None, ["/bin/bash", "-c", "exit 7"]),
             (None, ["/bin/bash", "-c", "echo changed >> state.txt; rm -f a.txt; exit 2"]),
             (None, ["/bin/grep", "-c", "zero", "state.txt"])]
    r, codes, snaps = start_calls(tmp_path, ws, mode, calls)
    assert codes == [1, 7, 2, 0], r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("ftsbx: tool call")]
    rows = {row["argv"][-1]: row for row in txn_rows(tmp_path)}
    changer = rows["echo changed >> state.txt; rm -f a.txt; exit 2"]
    assert lines == [f"ftsbx: tool call (transaction {changer['txn']}) exited with 2: its changes were rewound"], \
        r.stderr
    for k in range(4):
        assert_same(before, snaps[k], f"the tree after call {k}")


@pytest.mark.parametrize("mode", ["vfork", "spawn"])
def test_on_failure_refusal_rewinds_a_call_that_exits_0_after_a_refusal(tmp_path, mode):
    """[rewind] on_failure = refusal: a tool call one of whose processes the
    policy refused something is rewound though it exits 0; one with no
    refusal is kept."""
    ws = setup_ws(tmp_path)
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_rsa").write_text("KEY\n")
    policy = tmp_path / "policy.ini"
    policy.write_text("[policy]\nbase = default\n[rewind]\non_failure = refusal\n")
    before = snapshot(os.fsencode(ws))
    sneaky = ["/bin/bash", "-c", "echo sneaky >> state.txt; rm -f a.txt; cat ~/.ssh/id_rsa; exit 0"]
    honest = ["/bin/bash", "-c", "echo honest >> state.txt; exit 0"]
    r, codes, snaps = start_calls(tmp_path, ws, mode, [(None, sneaky), (None, honest)], on_failure="",
                                  extra_env={"FTSBX_POLICY": str(policy)})
    assert codes == [0, 0], r.stderr
    assert_same(before, snaps[1], "the tree after the call with a refusal")
    assert (ws / "state.txt").read_text() == "zero\nhonest\n"
    assert "exited with 0 after a refused call: its changes were rewound" in r.stderr, r.stderr
    rows = {" ".join(row["argv"] or []): row for row in txn_rows(tmp_path)}
    assert [row["rewound"] for cmd, row in rows.items() if "sneaky" in cmd] == ["yes"], rows
    assert [row["rewound"] for cmd, row in rows.items() if "honest" in cmd] == ["no"], rows


FORK_AGENT = textwrap.dedent("""
    import json, multiprocessing as mp, os, subprocess, sys

    def tool(cmd):
        if cmd.startswith("popen:"):
            f = os.popen(cmd[6:])
            f.read()
            st = f.close()
            code = 0 if st is None else os.waitstatus_to_exitcode(st)
        else:
            code = subprocess.run(cmd, shell=True).returncode
        return code, open("state.txt").read(), os.path.exists("a.txt")

    def worker(rfd, wfd):
        r, w = os.fdopen(rfd), os.fdopen(wfd, "w")
        for line in r:
            w.write(json.dumps(tool(json.loads(line))) + "\\n")
            w.flush()
        os._exit(0)

    calls = ["echo one >> state.txt", "popen:echo two >> state.txt; rm -f a.txt; exit 3",
             "echo three >> state.txt", "popen:echo four >> state.txt"]
    if __name__ != "__main__":
        pass                        # a spawned worker importing this module
    elif sys.argv[1] == "fork":     # the agent's own workers, forked, fed through pipes
        a_r, a_w = os.pipe()
        b_r, b_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(a_w); os.close(b_r)
            worker(a_r, b_w)
        os.close(a_r); os.close(b_w)
        to, frm = os.fdopen(a_w, "w"), os.fdopen(b_r)
        log = []
        for c in calls:
            to.write(json.dumps(c) + "\\n"); to.flush()
            log.append(json.loads(frm.readline()))
        to.close()
        os.waitpid(pid, 0)
    else:                           # multiprocessing: fork (Linux's default before Python 3.14),
        # spawn, forkserver (3.14's): workers it started, in transaction 0
        how = {"pool": "fork"}.get(sys.argv[1], sys.argv[1])
        with mp.get_context(how).Pool(1) as pool:
            log = [pool.apply(tool, (c,)) for c in calls]
    if __name__ == "__main__":
        print(json.dumps(log))
""")


@pytest.mark.parametrize("how", ["fork", "pool", "spawn", "forkserver"])
def test_tool_calls_of_forked_workers_are_transactions_of_their_own(tmp_path, how):
    """An agent that hands its tool calls to workers it forked (os.fork,
    multiprocessing's fork start method) or started (spawn, forkserver: the
    agent's machinery, in transaction 0) gets one transaction per tool call,
    and a failing one rewound before the worker reports back; a whole-session
    rewind gives back the tree."""
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    r = run_script(tmp_path, ws, "fork_agent.py", FORK_AGENT, how, timeout=120)
    assert r.returncode == 0, r.stderr
    log = json.loads(r.stdout.strip().splitlines()[-1])
    assert log[0] == [0, "zero\none\n", True]
    assert log[1] == [3, "zero\none\n", True], "the failed call's write and rm must be gone"
    assert log[2] == [0, "zero\none\nthree\n", True]
    assert log[3] == [0, "zero\none\nthree\nfour\n", True]
    rows = [json.loads(l) for l in subprocess.run([TXREPLAY, "list", str(tmp_path / "j"), "--json"],
                                                  capture_output=True, text=True).stdout.splitlines()]
    cmds = {" ".join(row["argv"] or []): row for row in rows}
    for call in ("echo one", "exit 3", "echo three", "echo four"):
        assert sum(call in c for c in cmds) == 1, (call, list(cmds))
    assert [row["rewound"] for c, row in cmds.items() if "exit 3" in c] == ["yes"]
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j")], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


WORKER_EDIT = textwrap.dedent("""
    import multiprocessing as mp, subprocess, sys
    from concurrent.futures import ProcessPoolExecutor
    def edit(path, text):
        with open(path, "w") as f:
            f.write(text)
    if __name__ == "__main__":
        with ProcessPoolExecutor(1, mp_context=mp.get_context(sys.argv[1])) as pool:
            subprocess.run(["sh", "-c", "echo v1 > f.txt"], check=True)
            pool.submit(edit, "f.txt", "v2\\n").result()
            subprocess.run(["sh", "-c", "echo tool2 > g.txt"], check=True)
""")


@pytest.mark.parametrize("how", ["fork", "spawn", "forkserver"])
def test_a_pool_workers_own_writes_are_a_transaction_of_their_own(tmp_path, how):
    """The agent's own code running in a pool's worker (any start method)
    writes in a transaction of its own, as the root's own writes are:
    not in transaction 0, so that the rewind of an earlier tool call can
    name it as the later one to rewind first, and rewinding it alone gives
    back the tool call's file."""
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    r = run_script(tmp_path, ws, "pool_edit.py", WORKER_EDIT, how, timeout=120, FTSBX_ON_FAILURE="keep")
    assert r.returncode == 0, r.stderr
    assert (ws / "f.txt").read_text() == "v2\n"
    log = subprocess.run([TXREPLAY, "log", str(tmp_path / "j"), "--json"], capture_output=True, text=True)
    recs = [json.loads(l) for l in log.stdout.splitlines()]
    first = [x["txn"] for x in recs if (x.get("path") or "").endswith("/f.txt") and x["op"] == "create"]
    edit = [x["txn"] for x in recs if (x.get("path") or "").endswith("/f.txt") and x["op"] == "content"]
    assert len(first) == 1 and len(edit) == 1 and edit[0] not in (0, first[0]), (first, edit)
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j"), "--txn", str(first[0])], capture_output=True,
                         text=True)
    assert out.returncode != 0 and f"later transactions {edit[0]} " in out.stderr, out.stderr
    out = subprocess.run([TXREPLAY, "rewind", str(tmp_path / "j"), "--txn", str(edit[0])], capture_output=True,
                         text=True)
    assert out.returncode == 0 and (ws / "f.txt").read_text() == "v1\n", out.stdout + out.stderr
    rewind_whole(tmp_path, ws, before)


POPEN_AGENT = r"""
#include <stdio.h>
#include <sys/wait.h>
/* a C agent loop: each tool call through popen, its status from pclose */
int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		char buf[256];
		FILE *p = popen(argv[i], "r");
		if (!p)
			return 9;
		while (fgets(buf, sizeof(buf), p))
			printf("out %d: %s", i, buf);
		int st = pclose(p);
		printf("status %d: %d\n", i, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	}
	return 0;
}
"""


def test_a_tool_call_through_popen_ends_at_pclose_and_is_rewound_on_failure(tmp_path):
    """pclose reaps popen's child inside libc, where no wait hook sees it:
    the tool call ends there, with its status, and a failed one is rewound
    before pclose returns, as system's are."""
    ws = setup_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    agent = tmp_path / "popen_agent"
    subprocess.run(["gcc", "-O2", "-x", "c", "-", "-o", str(agent)], input=POPEN_AGENT.encode(), check=True)
    r = subprocess.run([str(agent), "echo bad > state.txt; rm -f a.txt; exit 3", "cat state.txt",
                        "echo one >> state.txt", "kill -9 $$"],
                       cwd=ws, env=shim_env(tmp_path, FTSBX_ON_FAILURE="rewind"), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["status 1: 3", "out 2: zero", "status 2: 0", "status 3: 0",
                                     "status 4: 137"], r.stdout + r.stderr
    assert (ws / "state.txt").read_text() == "zero\none\n"
    rows = [json.loads(l) for l in subprocess.run([TXREPLAY, "list", str(tmp_path / "j"), "--json"],
                                                  capture_output=True, text=True).stdout.splitlines()]
    ended = {" ".join(row["argv"] or []): (row["status"], row["rewound"]) for row in rows if row["txn"]}
    assert ended["sh -c echo bad > state.txt; rm -f a.txt; exit 3"] == (3, "yes"), ended
    assert ended["sh -c echo one >> state.txt"][0] == 0, ended
    assert ended["sh -c kill -9 $$"][0] == 128 + 9, ended
    rewind_whole(tmp_path, ws, before)


CWD_AGENT = textwrap.dedent("""
    import os, subprocess
    subprocess.run(["sh", "-c", "mkdir build && echo b > build/f"], check=True)
    os.chdir("build")
    rc = subprocess.run(["sh", "-c", "cd .. && rm -rf build; exit 1"]).returncode
    print("rc", rc)
    try:
        print("cwd", os.getcwd())
    except FileNotFoundError:
        print("cwd (removed)")
    try:
        open("own.txt", "w").write("x")
        print("write ok")
    except OSError as e:
        print("write", e.errno)
""")


def test_a_directory_the_agent_stands_in_is_not_kept_in_the_journal(tmp_path):
    """A tool call removes the directory the agent stands in and fails: its
    rewind makes the directory anew, and the agent is left in the removed
    one, as without the shim (its writes there fail ENOENT), never in the
    journal (where the journal's rmdir would have kept the directory)."""
    ws = setup_ws(tmp_path)
    (tmp_path / "cwd_agent.py").write_text(CWD_AGENT)
    env = shim_env(tmp_path, FTSBX_ON_FAILURE="rewind")
    r = subprocess.run(["/usr/bin/python3", str(tmp_path / "cwd_agent.py")], cwd=ws, env=env, capture_output=True,
                       text=True, timeout=60)
    out = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert out["rc"] == "1", r.stdout + r.stderr
    assert str(tmp_path / "j") not in out["cwd"], r.stdout + r.stderr
    assert out["write"] == str(errno.ENOENT), r.stdout + r.stderr
    assert "ftsbx: refused" not in r.stderr, r.stderr
    assert (ws / "build" / "f").read_text() == "b\n"


OVERLAP_AGENT = textwrap.dedent("""
    import subprocess, threading, time
    def a():
        subprocess.run(["sh", "-c", "echo a > f; sleep 0.6; exit 1"])
    t = threading.Thread(target=a)
    t.start()
    time.sleep(0.3)
    subprocess.run(["sh", "-c", "echo b > f"], check=True)
    t.join()
""")


def test_a_failed_call_whose_rewind_is_refused_says_why(tmp_path):
    """A failed tool call that a later one built on (both wrote f) is not
    rewound alone: the shim's line says so, with txreplay's reason."""
    ws = setup_ws(tmp_path)
    (tmp_path / "overlap.py").write_text(OVERLAP_AGENT)
    r = subprocess.run(["/usr/bin/python3", str(tmp_path / "overlap.py")], cwd=ws,
                       env=shim_env(tmp_path, FTSBX_ON_FAILURE="rewind"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    line = [x for x in r.stderr.splitlines() if x.startswith("ftsbx: tool call")]
    assert len(line) == 1 and "its rewind did not finish" in line[0], r.stderr
    assert "later transactions" in line[0] and "--cascade" in line[0], line
    assert (ws / "f").read_text() == "b\n"


EDITOR_SERVER = textwrap.dedent("""
    import os, socket, sys
    s = socket.socket(socket.AF_UNIX)
    s.bind(sys.argv[1])
    s.listen(4)
    open(sys.argv[1] + ".ready", "w").close()
    while True:
        c, _ = s.accept()
        data = c.recv(100)
        if data:
            open(sys.argv[2], "ab").write(data)
        c.close()
""")


def test_an_editors_server_the_session_did_not_start_gets_nothing(tmp_path):
    """emacsclient --eval '(shell-command ...)' (nvim --remote-send, kitty
    and wezterm remote control) has the user's editor run it, outside every
    rule: such a client's connection to a server the session did not start
    is refused (EACCES), and nothing reaches it; one to a server the session
    started goes through."""
    ws = setup_ws(tmp_path)
    server = tmp_path / "editor_server.py"
    server.write_text(EDITOR_SERVER)
    client = tmp_path / "emacsclient"
    os.symlink(os.path.realpath(sys.executable), client)
    plain = dict(os.environ)
    plain.pop("LD_PRELOAD", None)
    sock, got = str(tmp_path / "server"), tmp_path / "got"
    srv = subprocess.Popen([sys.executable, str(server), sock, str(got)], env=plain)
    try:
        for _ in range(200):
            if os.path.exists(sock + ".ready"):
                break
            time.sleep(0.05)
        code = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\n"
                "    s.sendall(b'(shell-command \"touch x\")')\n    print('sent')\nexcept OSError as e:\n"
                "    print('errno', e.errno)\n")
        r = subprocess.run([str(client), "-c", code, sock], cwd=ws, env=shim_env(tmp_path), capture_output=True,
                           text=True, timeout=60)
        assert r.stdout.split() == ["errno", str(errno.EACCES)], r.stdout + r.stderr
        assert "server the session did not start" in r.stderr, r.stderr
        time.sleep(0.3)
        assert not got.exists()
        # nvim is such a client only with --server or --remote* (it talks to
        # its language servers too); the same program under another name is
        # none
        nvim = tmp_path / "nvim"
        os.symlink(os.path.realpath(sys.executable), nvim)
        r = subprocess.run([str(nvim), "-c", code, sock, "--server"], cwd=ws, env=shim_env(tmp_path),
                           capture_output=True, text=True, timeout=60)
        assert r.stdout.split() == ["errno", str(errno.EACCES)], r.stdout + r.stderr
        for argv in ([str(nvim), "-c", code, sock], [sys.executable, "-c", code, sock]):
            r = subprocess.run(argv, cwd=ws, env=shim_env(tmp_path), capture_output=True, text=True, timeout=60)
            assert r.stdout.split() == ["sent"], r.stdout + r.stderr
    finally:
        srv.kill()
        srv.wait()
