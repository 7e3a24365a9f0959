"""Every rule of the default policy's [commands] is exercised (issue 6).

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

import pytest

from test_policy_corpus import FTSBX, ROOT, Scratch, read_corpus, run_explain

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
