"""Transactions for unmodified agent loops (shim/txn.c): every process tree
the session's root starts is one transaction with its command line; a tool
call that fails is rewound before the agent sees its status when
FTSBX_ON_FAILURE=rewind; the agent's own machinery (multiprocessing workers)
is not a tool call; a whole-session rewind gives back the tree as it was."""
import json
import os
import subprocess
import textwrap

from conftest import BUILD, TXREPLAY, assert_same, populate, snapshot

SHIM = os.path.join(BUILD, "libftsbx.so")

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
    env = dict(os.environ, LD_PRELOAD=SHIM, FTSBX_JOURNAL=str(tmp_path / "j"), HOME=str(tmp_path),
               FTSBX_ON_FAILURE=on_failure)
    for k in ("FTSBX_TXN", "FTSBX_ROOT"):
        env.pop(k, None)
    return subprocess.run(["/usr/bin/python3", str(agent)], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=120)


def setup_ws(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    populate(os.fsencode(ws))
    (ws / "state.txt").write_text("zero\n")
    return ws


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
