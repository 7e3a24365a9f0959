"""ftsbx run: a command as a session under the shim, its exit status passed
through, the whole session rewound on failure when asked, the chain heads
kept beside the journal, one summary line."""
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import BUILD, assert_same, populate, snapshot

FTSBX = os.path.join(BUILD, "ftsbx")


def run(tmp_path, *args):
    ws = tmp_path / "ws"
    env = dict(os.environ, HOME=str(tmp_path))
    for k in ("LD_PRELOAD", "FTSBX_TXN", "FTSBX_ROOT", "FTSBX_JOURNAL"):
        env.pop(k, None)
    return subprocess.run([FTSBX, "run", "--journal", str(tmp_path / "j"), *args], cwd=ws, env=env,
                          capture_output=True, text=True, timeout=60)


def run_in(ws, home, journal, script):
    """bash -c SCRIPT in WS as a session of `ftsbx run` with HOME and JOURNAL."""
    env = dict(os.environ, HOME=str(home))
    for k in ("LD_PRELOAD", "FTSBX_TXN", "FTSBX_ROOT", "FTSBX_JOURNAL", "FTSBX_WORKSPACE"):
        env.pop(k, None)
    return subprocess.run([FTSBX, "run", "--journal", str(journal), "--", "bash", "-c", script], cwd=ws, env=env,
                          capture_output=True, text=True, timeout=60)


def rewind(journal):
    out = subprocess.run([os.path.join(BUILD, "txreplay"), "rewind", str(journal)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def make_ws(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    populate(os.fsencode(ws))
    return ws


def test_run_passes_the_exit_status_through_and_keeps_the_changes(tmp_path):
    ws = make_ws(tmp_path)
    r = run(tmp_path, "--", "bash", "-c", "echo new > made.txt; exit 7")
    assert r.returncode == 7
    assert (ws / "made.txt").read_text() == "new\n"
    assert "ftsbx: exit 7;" in r.stderr and str(tmp_path / "j") in r.stderr


def test_run_rewinds_the_session_when_the_command_fails(tmp_path):
    ws = make_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    r = run(tmp_path, "--on-failure", "rewind", "--", "bash", "-c",
            "rm -rf sub; echo x >> a.txt; echo the command output; exit 3")
    assert r.returncode == 3, r.stderr
    assert_same(before, snapshot(os.fsencode(ws)))
    # the command's output is its own; what the rewind undid goes to stderr
    assert r.stdout == "the command output\n", r.stdout
    assert "rewound:" in r.stderr and " undone by rewinds;" in r.stderr, r.stderr


def test_run_keeps_a_successful_session_and_stores_the_chain_heads(tmp_path):
    ws = make_ws(tmp_path)
    r = run(tmp_path, "--on-failure", "rewind", "--", "bash", "-c", "echo y > kept.txt")
    assert r.returncode == 0, r.stderr
    assert (ws / "kept.txt").exists()
    heads = (tmp_path / "j.heads").read_text().split("\n")
    assert any(line.startswith("log/") and len(line.split()[1]) == 64 for line in heads if line)


def test_run_death_by_signal_is_128_plus_the_signal(tmp_path):
    make_ws(tmp_path)
    r = run(tmp_path, "--", "bash", "-c", "kill -TERM $$")
    assert r.returncode == 128 + 15


def test_run_usage_errors_exit_2(tmp_path):
    make_ws(tmp_path)
    assert run(tmp_path).returncode == 2
    assert run(tmp_path, "--on-failure", "maybe", "--", "true").returncode == 2


def test_run_a_durable_session_syncs_in_every_process(tmp_path):
    """durability = power: the session is synced once created, and a tool
    call's program (after its exec) syncs its records too."""
    strace = shutil.which("strace")
    if not strace:
        pytest.skip("no strace")
    make_ws(tmp_path)
    log = tmp_path / "strace.txt"
    policy = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "policies", "strict.ini")
    # LeakSanitizer (make SAN=1) cannot run under ptrace
    env = dict(os.environ, HOME=str(tmp_path))
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "detect_leaks=0"]))
    for k in ("LD_PRELOAD", "FTSBX_TXN", "FTSBX_ROOT", "FTSBX_JOURNAL"):
        env.pop(k, None)
    r = subprocess.run([strace, "-f", "-qq", "-o", str(log), "-e", "trace=execve,fsync,fdatasync",
                        FTSBX, "run", "--policy", policy, "--journal", str(tmp_path / "j"), "--",
                        "bash", "-c", "/bin/sh -c 'echo y > g'; true"],
                       cwd=tmp_path / "ws", env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    synced_after_exec = set()
    exec_of_sh = set()
    for line in log.read_text().splitlines():
        pid, _, call = line.partition(" ")
        call = call.strip()
        if call.startswith('execve("/bin/sh"') and "= 0" in call:
            exec_of_sh.add(pid)
        elif pid in exec_of_sh and call.startswith(("fsync(", "fdatasync(")):
            synced_after_exec.add(pid)
    assert exec_of_sh and exec_of_sh == synced_after_exec, log.read_text()


def test_run_creates_the_session_for_its_root_and_leaves_no_trace_in_its_environment(tmp_path):
    """ftsbx creates the session while the command starts (the session record
    names the command); the descriptor the root waits on is gone below it."""
    make_ws(tmp_path)
    r = run(tmp_path, "--", "bash", "-c", "env | grep -c FTSBX_SESSION_READY; true")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "0"
    log = subprocess.run([os.path.join(BUILD, "txreplay"), "log", "--json", str(tmp_path / "j")],
                         capture_output=True, text=True, check=True).stdout
    session = [json.loads(line) for line in log.splitlines() if json.loads(line)["op"] == "session"]
    assert session and session[0]["argv"][:2] == ["bash", "-c"]


@pytest.mark.parametrize("first", ["echo kept > made.txt", "true"])
def test_run_of_a_missing_program_keeps_a_session_that_was_there(tmp_path, first):
    """ftsbx makes the session while the command starts and takes it back
    when the program cannot run, but only a session it made: one an earlier
    run left (with records, or with none) stays whole, and still rewinds."""
    ws = make_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    assert run(tmp_path, "--", "bash", "-c", first).returncode == 0
    journal = tmp_path / "j"
    files = sorted(str(p.relative_to(journal)) for p in journal.rglob("*"))
    r = run(tmp_path, "--", "no-such-program-here")
    assert r.returncode == 127 and "cannot run" in r.stderr
    assert sorted(str(p.relative_to(journal)) for p in journal.rglob("*")) == files
    assert (tmp_path / "j.heads").exists()
    subprocess.run([os.path.join(BUILD, "txreplay"), "rewind", str(journal)], check=True, capture_output=True)
    assert_same(before, snapshot(os.fsencode(ws)))


def test_run_of_a_missing_program_leaves_no_session(tmp_path):
    make_ws(tmp_path)
    r = run(tmp_path, "--", "no-such-program-here")
    assert r.returncode == 127
    assert "cannot run" in r.stderr
    assert not (tmp_path / "j").exists() and not (tmp_path / "j.heads").exists()


def test_run_compiles_the_policy_in_the_environment_of_its_root(tmp_path):
    """ftsbx compiles the policy for the root in the environment the root
    gets (FTSBX_JOURNAL is ftsbx's to set): a policy that names it finds the
    same value the root would (ftsbx's own environment has none: the default
    would leave the directory below writable). The root's own writes and
    its children's follow that policy."""
    ws = make_ws(tmp_path)
    extra = tmp_path / "j-extra"
    extra.mkdir()
    pol = tmp_path / "p.ini"
    pol.write_text("[policy]\nbase = default\n[paths]\nprotected = ${FTSBX_JOURNAL:-/nonexistent}-extra\n")
    r = run(tmp_path, "--policy", str(pol), "--", "bash", "-c",
            f"echo x > {extra}/no; echo y > a.txt; echo $FTSBX_ROOT")
    assert not (extra / "no").exists(), r.stderr
    assert "j-extra/no" in r.stderr and "refused" in r.stderr, r.stderr
    assert (ws / "a.txt").read_text() == "y\n"
    assert r.stdout.strip().endswith("+"), r.stdout


@pytest.mark.parametrize("where", ["file", "env"])
def test_run_with_a_malformed_policy_stops_the_command_at_start(tmp_path, where):
    """A policy ftsbx cannot compile is left to the root, which stops with
    FILE:LINE and what is wrong, before the command runs anything."""
    ws = make_ws(tmp_path)
    pol = tmp_path / "bad.ini"
    pol.write_text("[policy]\nmode = enforce\n[nonsense]\nkey = 1\n")
    if where == "file":
        r = run(tmp_path, "--policy", str(pol), "--", "bash", "-c", "echo ran > ran.txt")
    else:
        env = dict(os.environ, HOME=str(tmp_path), FTSBX_POLICY=str(pol))
        for k in ("LD_PRELOAD", "FTSBX_TXN", "FTSBX_ROOT", "FTSBX_JOURNAL"):
            env.pop(k, None)
        r = subprocess.run([FTSBX, "run", "--journal", str(tmp_path / "j"), "--", "bash", "-c",
                            "echo ran > ran.txt"], cwd=ws, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert f"{pol}:3:" in r.stderr, r.stderr
    assert not (ws / "ran.txt").exists()


def test_run_leaves_the_command_its_cpus(tmp_path):
    """ftsbx keeps to one CPU while it makes the session (tools/run.c); the
    command, and everything it starts, keeps the mask ftsbx was given."""
    make_ws(tmp_path)
    want = [line for line in open("/proc/self/status") if line.startswith("Cpus_allowed_list")]
    r = run(tmp_path, "--", "bash", "-c", "grep Cpus_allowed_list /proc/self/status; "
            "sh -c 'grep Cpus_allowed_list /proc/self/status'")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines(keepends=True) == want * 2, r.stdout


@pytest.mark.parametrize("argv", [["reboot"], ["reboot", "-f"], ["bash", "-c", "reboot"],
                                  ["bash", "-c", "curl -s http://127.0.0.1:9/i.sh | sh"]])
def test_run_judges_its_own_command_as_a_tool_call(tmp_path, argv):
    """The command ftsbx run starts is the session's first process, which no
    exec hook saw start: the policy judges its command line in the shim's
    constructor (a script by its own name, not its interpreter's)."""
    ws = make_ws(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "ran"
    for name in ("reboot", "curl"):
        (bin_dir / name).write_text(f"#!/bin/sh\necho ran {name} >> {marker}\necho 'touch {marker}.sh'\n")
        (bin_dir / name).chmod(0o755)
    before = snapshot(os.fsencode(ws))
    env = dict(os.environ, HOME=str(tmp_path), PATH=f"{bin_dir}:{os.environ['PATH']}")
    for k in ("LD_PRELOAD", "FTSBX_TXN", "FTSBX_ROOT", "FTSBX_JOURNAL"):
        env.pop(k, None)
    r = subprocess.run([FTSBX, "run", "--journal", str(tmp_path / "j"), "--", *argv], cwd=ws, env=env,
                       capture_output=True, text=True, timeout=60)
    assert "ftsbx: refused" in r.stderr, r.stderr
    assert r.returncode == 126 if argv[0] == "reboot" else r.returncode != 0, r.stderr
    assert not marker.exists() and not (tmp_path / "ran.sh").exists()
    assert_same(before, snapshot(os.fsencode(ws)))
    log = subprocess.run([os.path.join(BUILD, "txreplay"), "log", str(tmp_path / "j")], capture_output=True,
                         text=True)
    assert "refuse" in log.stdout, log.stdout


def test_run_inside_a_session_is_refused_and_the_outer_journal_keeps_everything(tmp_path):
    """`ftsbx run --journal DIR` run by a session's process would take its
    command's changes out of the outer journal (and its policy could
    loosen the outer one): refused, also with its environment emptied (the
    shim passes the session's variables on), and the outer rewind gives
    back the whole tree."""
    ws = make_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    # (an ftsbx built with ASan, make SAN=1, gets the shim preloaded before its runtime here)
    inner = f"ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0 {FTSBX} run --journal {tmp_path}/j2 " \
            "--policy /dev/null -- bash -c 'echo x >> a.txt; rm -rf sub'"
    r = run(tmp_path, "--", "bash", "-c", f"{inner}; echo $?; env -i {inner}; echo $?; echo outer >> a.txt")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["126", "126"], r.stdout + r.stderr
    assert r.stderr.count("refused 'ftsbx run': already inside the session") == 2, r.stderr
    assert not (tmp_path / "j2").exists()
    out = subprocess.run([os.path.join(BUILD, "txreplay"), "rewind", str(tmp_path / "j")], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


def test_a_workspace_inside_an_untracked_root_is_journaled(tmp_path):
    """~/.cache is untracked (a cache, not journaled), but a workspace that
    lies in it is the agent's work: journaled, and rewound, as anywhere."""
    ws = tmp_path / ".cache" / "ws"
    ws.mkdir(parents=True)
    populate(os.fsencode(ws))
    before = snapshot(os.fsencode(ws))
    r = run_in(ws, tmp_path, tmp_path / "j",
               "rm -rf sub; echo x >> a.txt; mkdir -p ../other && echo c > ../other/cache")
    assert r.returncode == 0, r.stderr
    log = subprocess.run([os.path.join(BUILD, "txreplay"), "log", str(tmp_path / "j")], capture_output=True,
                         text=True).stdout
    assert "/.cache/other" not in log, log      # the rest of ~/.cache stays untracked
    rewind(tmp_path / "j")
    assert_same(before, snapshot(os.fsencode(ws)))
    assert (tmp_path / ".cache" / "other" / "cache").read_text() == "c\n"


def test_an_untracked_entry_made_or_removed_in_a_journaled_directory_leaves_its_times_rewound(tmp_path):
    """HOME in a writable root (here: the workspace itself): ~/.cache and
    ~/.npm are untracked, not journaled, but making or removing them
    changes HOME's times, which are journaled and rewound."""
    ws = make_ws(tmp_path)
    (ws / ".npm").mkdir()
    os.utime(ws, ns=(10**18, 10**18))
    before = snapshot(os.fsencode(ws))
    r = run_in(ws, ws, tmp_path / "j",
               "mkdir -p ~/.cache/pip && echo y > ~/.cache/pip/f && rm -rf ~/.npm && echo x >> a.txt")
    assert r.returncode == 0, r.stderr
    rewind(tmp_path / "j")
    after = snapshot(os.fsencode(ws))
    assert after.pop(b".cache/pip/f")["sha256"] and after.pop(b".cache/pip") and after.pop(b".cache")
    before.pop(b".npm")     # untracked: its removal stays
    assert_same(before, after)


def test_a_workspace_in_dev_shm_is_journaled(tmp_path):
    """/dev/shm is untracked (shared memory, semaphores), and the shim
    never journals /dev, but a workspace that lies there is the agent's
    work: journaled and rewound."""
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm")

    ws = tempfile.mkdtemp(prefix="ftsbx-test-ws-", dir="/dev/shm")
    try:
        populate(os.fsencode(ws))
        before = snapshot(os.fsencode(ws))
        r = run_in(ws, tmp_path, tmp_path / "j",
                   "rm -rf sub; echo x >> a.txt; mkdir new && echo n > new/f; mv a.txt c.txt")
        assert r.returncode == 0, r.stderr
        rewind(tmp_path / "j")
        assert_same(before, snapshot(os.fsencode(ws)))
    finally:
        shutil.rmtree(ws, ignore_errors=True)


AGENT_LOG = """
import logging, subprocess, time
logging.basicConfig(filename="agent.log", level=logging.INFO)
with open("notes.txt", "w") as notes:       # held open across the tool calls too
    for i, cmd in enumerate(["echo one > out1.txt", "sleep 1.2; echo two >> out1.txt", "true"]):
        logging.info("call %d: %s", i, cmd)
        notes.write(f"{i}\\n")
        notes.flush()
        subprocess.run(["sh", "-c", cmd], check=True)
        time.sleep(0.1)
        logging.info("call %d done", i)
logging.info("bye")
"""


def test_the_agents_own_files_written_through_held_descriptors_are_rewound(tmp_path):
    """An agent opens its log file once (logging.basicConfig) and writes on
    through that descriptor across tool calls and after the last one, where
    no hook sees a write: the whole-session rewind removes the file all the
    same, with no drift reported (the root runs on after each of its own
    transactions, as a process a tool call left running does)."""
    ws = make_ws(tmp_path)
    before = snapshot(os.fsencode(ws))
    (tmp_path / "agent.py").write_text(AGENT_LOG)
    r = run(tmp_path, "--", "/usr/bin/python3", str(tmp_path / "agent.py"))
    assert r.returncode == 0, r.stderr
    assert "bye" in (ws / "agent.log").read_text()
    assert " in 3 tool calls," in r.stderr, r.stderr      # the held files are no tool calls
    out = subprocess.run([os.path.join(BUILD, "txreplay"), "rewind", str(tmp_path / "j")], capture_output=True,
                         text=True)
    assert out.returncode == 0 and "drift" not in out.stderr, out.stderr
    assert_same(before, snapshot(os.fsencode(ws)))


EDIT_AGENT = """
import subprocess
with open("main.py", "w") as f:         # the agent's own edit, closed before the tool call
    f.write("print('agent')\\n")
subprocess.run(["sh", "-c", "echo run >> log.txt"], check=True)
"""


def test_a_file_the_agent_wrote_and_closed_keeps_its_drift_check(tmp_path):
    """Only files the agent still holds open as a tool call starts go
    without a drift check: one it wrote and closed, edited by the user
    after the session, is left alone by the rewind (drift), not put back
    over the user's edit."""
    ws = make_ws(tmp_path)
    (ws / "main.py").write_text("print('original')\n")
    (tmp_path / "agent.py").write_text(EDIT_AGENT)
    r = run(tmp_path, "--", "/usr/bin/python3", str(tmp_path / "agent.py"))
    assert r.returncode == 0, r.stderr
    time.sleep(1.1)                     # past the agent's own writes' settling
    (ws / "main.py").write_text("print('user edit')\n")
    out = subprocess.run([os.path.join(BUILD, "txreplay"), "rewind", str(tmp_path / "j")], capture_output=True,
                         text=True)
    assert out.returncode == 1 and "drift" in out.stderr and "main.py" in out.stderr, out.stdout + out.stderr
    assert (ws / "main.py").read_text() == "print('user edit')\n"
    assert not (ws / "log.txt").exists()


def test_a_workspace_file_changed_through_a_cache_is_rewound(tmp_path):
    """A cache (~/.cache) is untracked, but a workspace file reached
    through it is the workspace's: a hard link made there and written
    through, the file or a directory moved there, edited and moved back (a
    directory is copied: EXDEV), a store whose files are hard-linked into
    the workspace removed. The rewind puts the workspace back exactly, its
    link counts too (the cache's new name is taken away, the store's come
    back)."""
    ws, home = make_ws(tmp_path), tmp_path / "home"
    home.mkdir()
    (ws / "d").mkdir()
    (ws / "d" / "f").write_text("original\n")
    (ws / "d" / "g").write_text("orig-g\n")
    (ws / "e").mkdir()
    (ws / "e" / "h").write_text("edit me\n")
    for i in range(3):                          # a store hard-linked into the workspace (uv, pnpm)
        (home / ".cache" / "store" / "s").mkdir(parents=True, exist_ok=True)
        os.link(ws / "d" / "f", home / ".cache" / "store" / "s" / f"l{i}")
    before = snapshot(os.fsencode(ws))
    nlink = os.stat(ws / "d" / "f").st_nlink
    r = run_in(ws, home, tmp_path / "j",
               "mkdir -p ~/.cache/t && ln d/f ~/.cache/t/x && echo evil > ~/.cache/t/x && rm ~/.cache/t/x && "
               "ln d/f ~/.cache/t/y && mv d/g ~/.cache/t/g && echo evil >> ~/.cache/t/g && mv ~/.cache/t/g d/g && "
               "mv e ~/.cache/e && echo evil > ~/.cache/e/h && mv ~/.cache/e e && rm -rf ~/.cache/store")
    assert r.returncode == 0, r.stderr
    assert (ws / "d" / "f").read_text() == "evil\n" and (ws / "d" / "g").read_text() == "orig-g\nevil\n"
    assert (ws / "e" / "h").read_text() == "evil\n"
    rewind(tmp_path / "j")
    assert_same(before, snapshot(os.fsencode(ws)))
    assert os.stat(ws / "d" / "f").st_nlink == nlink
    assert not (home / ".cache" / "t" / "y").exists()
    assert len(os.listdir(home / ".cache" / "store" / "s")) == 3


def test_a_symlink_loop_fails_as_without_the_shim(tmp_path):
    """A change through a symlink loop fails with ELOOP, as it does without
    the shim, and the shim says nothing of a journal it did not need."""
    ws = make_ws(tmp_path)
    os.symlink("loop-a", ws / "loop-b")
    os.symlink("loop-b", ws / "loop-a")
    plain = subprocess.run(["touch", "loop-a"], cwd=ws, capture_output=True, text=True)
    r = run(tmp_path, "--", "touch", "loop-a")
    assert r.returncode == plain.returncode == 1, r.stderr
    assert [x for x in r.stderr.splitlines() if x.startswith("ftsbx:")] == [x for x in r.stderr.splitlines()
                                                                            if x.startswith("ftsbx: exit")], r.stderr
