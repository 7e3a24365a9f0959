"""Many writers at once: every process has its own segment and takes its
numbers from the shared counter, so nothing is lost, nothing is numbered
twice, and the reader puts it all in one order."""
import collections
import subprocess

from conftest import (assert_no_crash, assert_same, begun_txn, jdrive_argv, populate,
                      snapshot)

SPAMMERS = 8
SPAM = 3000
CHANGERS = 4


def run_all(argvs):
    """Start every ARGV at once, wait for all; their pids, in order."""
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for argv in argvs]
    for p in procs:
        _, err = p.communicate(timeout=120)
        done = subprocess.CompletedProcess(p.args, p.returncode, b"", err)
        assert_no_crash(done, "jdrive")
        assert done.returncode == 0, err
    return [p.pid for p in procs]


def test_concurrent_writers_lose_nothing(scratch):
    s = scratch
    populate(s.ws)
    before = snapshot(s.ws)
    n = begun_txn(s.jd(["begin", "parallel", "make"]))
    spam = [jdrive_argv(s.sess, [["txn", str(n)], ["spam", str(SPAM)]]) for _ in range(SPAMMERS)]
    change = [jdrive_argv(s.sess, [["txn", str(n)]] + [
        s.absolute(op) for k in range(20) for op in (
            ["put", f"c{i}-{k}", "x" * k], ["write", "a.txt", str(8 * i + k), "w"],
            ["mkdir", f"d{i}-{k}"], ["chmod", f"c{i}-{k}", "600"])])
        for i in range(CHANGERS)]
    pids = run_all(spam + change)
    s.jd(["txn", str(n)], ["end", "0"])

    s.tx("verify", s.sess)
    recs = s.log()
    seqs = [r["seq"] for r in recs]
    assert len(set(seqs)) == len(seqs), "duplicate seqs"
    assert seqs == sorted(seqs), "log is not in seq order"
    execs = collections.Counter(r["pid"] for r in recs if r["op"] == "exec")
    spam_pids = set(pids[:SPAMMERS])
    assert {pid: execs[pid] for pid in spam_pids} == {pid: SPAM for pid in spam_pids}
    for pid in pids[SPAMMERS:]:
        mine = [r for r in recs if r["pid"] == pid]
        assert len([r for r in mine if r["op"] == "create"]) >= 40, \
            "a changer's create records are missing"
    assert all(r["txn"] == n for r in recs if r["op"] not in ("session", "segment"))

    s.rewind()
    assert_same(before, snapshot(s.ws))


def test_concurrent_sessions_agree_on_one_session(scratch):
    s = scratch
    run_all([jdrive_argv(s.sess, [["exec", "true"]]) for _ in range(16)])
    s.tx("verify", s.sess)
    recs = s.log()
    assert len([r for r in recs if r["op"] == "session"]) == 1
    assert len([r for r in recs if r["op"] == "exec"]) == 16
