"""The policy's decisions on the two corpora, through `ftsbx explain` (issue 6).

Every line of test/corpus/high_risk.txt must be refused by the decision its
check names (by default the shell-string check of `bash -c LINE`; a path,
signal, connect or inner-argv check where the line is dangerous only as
such: see the header of the corpus), and every line of ordinary.txt must be
allowed as `bash -c LINE`. The policy is policies/default.ini with the
writable roots narrowed to the scratch workspace and TMPDIR. The module
prints a table per category and the rates; the false-refusal rate must be 0.
"""
import os
import subprocess
import sys

import pytest

from test_policy_corpus import FTSBX, Scratch, ids, read_corpus, run_explain

HIGH = read_corpus("high_risk.txt")
ORDINARY = read_corpus("ordinary.txt")
RESULTS = {}            # (corpus, index) -> (category, check, ok, rule)


@pytest.fixture(scope="module")
def scratch(request):
    if not os.access(FTSBX, os.X_OK):
        pytest.fail(f"{FTSBX} is not built (make B=... {FTSBX}); set FTSBX_BUILD")
    s = Scratch()
    victim = subprocess.Popen(["sleep", "600"])
    s.victim = victim.pid
    yield s
    victim.kill()
    victim.wait()
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        report()
    s.cleanup()


def report():
    """The table and the rates (printed past pytest's capture)."""
    out = sys.stdout
    for corpus, want in (("high_risk", "refused"), ("ordinary", "allowed")):
        rows = [v for k, v in RESULTS.items() if k[0] == corpus]
        if not rows:
            continue
        print(f"\n{corpus}.txt through ftsbx explain: {want} per category and check", file=out)
        print(f"  {'category':44} {'check':8} {'lines':>5} {want:>8}", file=out)
        seen = {}
        for cat, check, ok, _ in rows:
            t = seen.setdefault((cat, check), [0, 0])
            t[0] += 1
            t[1] += ok
        for (cat, check), (n, good) in seen.items():
            print(f"  {cat:44} {check:8} {n:5} {good:8}", file=out)
        good = sum(r[2] for r in rows)
        if corpus == "high_risk":
            print(f"  refusal rate: {good}/{len(rows)} = {100.0 * good / len(rows):.1f}%", file=out)
        else:
            bad = len(rows) - good
            print(f"  false-refusal rate: {bad}/{len(rows)} = {100.0 * bad / len(rows):.1f}%", file=out)


def test_corpus_sizes():
    assert len(HIGH) >= 150
    assert len(ORDINARY) >= 100
    assert len({c for c, *_ in HIGH}) >= 10


@pytest.mark.parametrize("i", range(len(HIGH)), ids=ids(HIGH))
def test_high_risk_refused(scratch, i):
    cat, line, check, arg = HIGH[i]
    env = scratch.env(VICTIM=str(scratch.victim))
    rc, rule, err = run_explain(scratch, check, arg, line, env)
    RESULTS[("high_risk", i)] = (cat, check, rc == 1, rule)
    assert rc == 1, f"not refused ({check} {arg}): {line!r}\nrule: {rule}\n{err}"
    assert rule and rule != "none refuses it"


@pytest.mark.parametrize("i", range(len(ORDINARY)), ids=ids(ORDINARY))
def test_ordinary_allowed(scratch, i):
    cat, line, _, _ = ORDINARY[i]
    rc, rule, err = run_explain(scratch, "exec", "", line, scratch.env())
    RESULTS[("ordinary", i)] = (cat, "exec", rc == 0, rule)
    assert rc == 0, f"false refusal: {line!r}\nrule: {rule}\n{err}"
