"""What jdrive writes, txreplay reads back: every record type comes back in
`log --json` with its fields, `list` shows the transactions, and `show
--content` gives a pre-image back byte for byte."""
import json
import os
import struct
import time

import pytest

from conftest import F, assert_same, begun_txn, fsb, log_records, rewrite_file, salt_of, segments


def records(recs, op, path=None):
    return [r for r in recs if r["op"] == op and (path is None or fsb(r.get("path")) == path)]


def one(recs, op, path=None):
    found = records(recs, op, path)
    assert len(found) == 1, f"expected one {op} record for {path!r}, got {found!r}"
    return found[0]


@pytest.fixture
def journaled(populated):
    """One transaction with one record of every kind jdrive writes."""
    s = populated
    s.t0 = time.time_ns()
    s.begin_argv = ["agent", "--flag", b"arg\xff"]
    s.exec_argv = ["/bin/echo", "hi there", b"\xfe", ""]
    proc = s.jd(["pid"], ["begin", *s.begin_argv],
                ["exec", *s.exec_argv],
                ["refuse", "unlink", "journal is off limits", "secret"],
                ["put", "new", "x"],
                ["write", "a.txt", "0", "Z"],
                ["append", "secret", "y"],
                ["unlink", "big.bin"],
                ["rename", "sym", b"s\xffym"],
                ["chmod", "script.sh", "700"],
                ["end", "3"])
    s.t1 = time.time_ns()
    s.n = begun_txn(proc)
    s.recs = s.log()
    s.pid = int(proc.stdout.split()[1])       # "pid N"
    return s


def test_log_seqs_are_unique_and_in_order(journaled):
    seqs = [r["seq"] for r in journaled.recs]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_every_record_carries_time_and_the_writers_pid(journaled):
    s = journaled
    for r in s.recs:
        if r["op"] == "session":
            continue
        assert s.t0 <= r["time_ns"] <= s.t1, r
        assert r["time"], r
        assert r["pid"] == s.pid, r


def test_session_record_names_its_creator(journaled):
    r = one(journaled.recs, "session")
    assert r["pid"] > 0 and r["argv"] and r["cwd"]


def test_segment_record_names_the_process_and_its_parent(journaled):
    r = one(journaled.recs, "segment")
    assert r["pid"] == journaled.pid
    assert r["ppid"] == os.getpid()


def test_txn_begin_carries_the_txn_and_its_argv(journaled):
    s = journaled
    r = one(s.recs, "txn-begin")
    assert r["txn"] == s.n
    assert [fsb(a) for a in r["argv"]] == [os.fsencode(a) if isinstance(a, str) else a
                                           for a in s.begin_argv]


def test_txn_end_carries_the_status(journaled):
    r = one(journaled.recs, "txn-end")
    assert r["txn"] == journaled.n
    assert r["status"] == 3


def test_exec_carries_argv_and_cwd(journaled):
    s = journaled
    r = one(s.recs, "exec")
    assert r["txn"] == s.n
    assert [fsb(a) for a in r["argv"]] == [os.fsencode(a) if isinstance(a, str) else a
                                           for a in s.exec_argv]
    assert r["cwd"]


def test_refusal_carries_result_rule_and_path(journaled):
    s = journaled
    r = one(s.recs, "refuse")
    assert r["result"] == "denied"
    assert r["rule"] == "journal is off limits"
    assert fsb(r["path"]) == s.p("secret")
    assert r["txn"] == s.n
    assert isinstance(r["errno"], int) and r["errno"] > 0
    assert "unlink" in r.values(), f"the refused call's name is missing: {r!r}"


@pytest.mark.parametrize("op,rel", [("create", "new"), ("content", "a.txt"),
                                    ("append", "secret"), ("remove", "big.bin"),
                                    ("rename", "sym"), ("meta", "script.sh")])
def test_undo_record_carries_its_path(journaled, op, rel):
    s = journaled
    r = one(s.recs, op, s.p(rel))
    assert r["txn"] == s.n
    assert r["result"] == "ok"
    assert not r.get("rewound")


def test_rename_record_carries_the_odd_byte_target(journaled):
    s = journaled
    r = one(s.recs, "rename", s.p("sym"))
    assert fsb(r["path2"]) == s.p(b"s\xffym")


def test_log_txn_shows_only_that_transaction(journaled):
    s = journaled
    m = s.txn(["put", "other", "y"])
    mine = log_records(s.sess, "--txn", str(m))
    assert mine and all(r["txn"] == m for r in mine)
    assert records(mine, "create", s.p("other"))
    assert not records(mine, "content", s.p("a.txt"))


def test_log_without_json_prints_one_line_per_record(journaled):
    out = journaled.tx("log", journaled.sess).stdout
    assert len(out.splitlines()) >= len(journaled.recs)


def list_entries(out):
    """`list --json`: a JSON array, or one JSON object a line."""
    try:
        data = json.loads(out)
        return data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        return [json.loads(line) for line in out.decode().splitlines() if line.strip()]


def test_list_shows_the_transactions(journaled):
    s = journaled
    m = s.txn(["put", "other", "y"])
    out = s.tx("list", s.sess).stdout.decode()
    for n in (s.n, m):
        assert any(str(n) in line.split() for line in out.splitlines()), out


def test_list_json_shows_the_transactions(journaled):
    s = journaled
    m = s.txn(["put", "other", "y"])
    entries = list_entries(s.tx("list", s.sess, "--json").stdout)
    txns = {e["txn"]: e for e in entries}
    assert s.n in txns and m in txns, entries


def pre_image_seq(s, op, rel):
    return one(s.log(), op, s.p(rel))["seq"]


@pytest.mark.parametrize("rel", ["a.txt", "big.bin", "sparse", "empty", b"new\nline"],
                         ids=["small", "large-in-objects", "sparse", "empty", "odd-name"])
def test_show_content_gives_the_pre_image_back(populated, rel):
    s = populated
    with open(s.p(rel), "rb") as f:
        original = f.read()
    s.txn(["write", rel, "3", "changed"])
    seq = pre_image_seq(s, "content", rel)
    shown = s.tx("show", s.sess, str(seq), "--content").stdout
    assert shown == original


def test_large_pre_image_is_stored_in_objects(populated):
    """objects/D/S.gz, D = S // 100 (journal/format.h)."""
    s = populated
    s.txn(["write", "big.bin", "0", "x"])
    seq = pre_image_seq(s, "content", "big.bin")
    assert os.path.exists(os.path.join(s.sess, b"objects", b"%d" % (seq // 100), b"%d.gz" % seq))


def test_show_content_of_a_removed_file(populated):
    s = populated
    with open(s.p("src/main.c"), "rb") as f:
        original = f.read()
    s.txn(["unlink", "src/main.c"])
    seq = pre_image_seq(s, "remove", "src/main.c")
    assert s.tx("show", s.sess, str(seq), "--content").stdout == original


def test_show_describes_the_record(populated):
    s = populated
    s.txn(["write", "a.txt", "0", "x"])
    seq = pre_image_seq(s, "content", "a.txt")
    out = s.tx("show", s.sess, str(seq)).stdout
    assert s.p("a.txt") in out and b"content" in out


def test_show_unknown_seq_fails(populated):
    s = populated
    s.txn(["put", "a.txt", "x"])
    proc = s.tx("show", s.sess, "999999", rc=1)
    assert proc.stderr.startswith(b"txreplay: ")


# --- the flat objects/ of a journal written before its subdirectories ------------

JR_INODE_XATTRS = 0x02      # journal/format.h


def downgrade_to_flat_layout(sess, xattrs_of):
    """SESS as an ftsbx before the objects/ subdirectories wrote it: no
    features, objects/S.EXT, SESSION/seq, locks and reserve, and each removal that left the xattrs to the
    kept inode listing them instead (XATTRS_OF: path -> [(name, value)],
    as they were before the change)."""
    def old_record(fr):
        if not fr.flags & JR_INODE_XATTRS:
            return fr.flags, fr.fields
        listed = b"".join(struct.pack("<HI", len(n), len(v)) + n + v for n, v in xattrs_of[fr.field(F["PATH"])])
        return fr.flags & ~JR_INODE_XATTRS, fr.fields + ([(F["XATTRS"], listed)] if listed else [])

    salt = salt_of(sess)
    rewrite_file(os.path.join(sess, b"session"), salt, 0, lambda fr: (fr.flags, fr.fields))
    for seg in segments(sess):
        rewrite_file(seg, salt, 0, old_record)
    top = os.path.join(sess, b"objects")
    for d in os.listdir(top):
        for n in os.listdir(os.path.join(top, d)):
            os.rename(os.path.join(top, d, n), os.path.join(top, n))
        os.rmdir(os.path.join(top, d))
    # SESSION/shared as three files: the counters' page, the path locks (40
    # bytes each of 1024; no lanes' table) and the reserve
    with open(os.path.join(sess, b"shared"), "rb") as f:
        shared = f.read()
    for name, data in ((b"seq", shared[:4096]), (b"locks", shared[4096:4096 + 40 * 1024]), (b"reserve", b"")):
        with open(os.path.join(sess, name), "wb") as f:
            f.write(data)
    os.unlink(os.path.join(sess, b"shared"))


def xattr_list(path):
    return [(n.encode(), os.getxattr(path, n, follow_symlinks=False))
            for n in os.listxattr(path, follow_symlinks=False)]


def test_journal_of_the_flat_objects_layout_still_rewinds(populated):
    """A session without features (objects/SEQ.ino, xattrs listed in every
    removal record) is read and rewound as it was written: verify finds its
    kept inodes and pre-images, show names them flat, the rewind is exact."""
    s = populated
    before = s.snap()
    gone = ["xattr.txt", "a.txt", "hard1", "src/main.c"]
    xattrs_of = {s.p(rel): xattr_list(s.p(rel)) for rel in gone}
    assert xattrs_of[s.p("xattr.txt")]
    s.txn(*[["unlink", rel] for rel in gone], ["write", "big.bin", "0", "x"])
    downgrade_to_flat_layout(s.sess, xattrs_of)
    assert s.tx("verify", s.sess).stdout.splitlines()[-1].startswith(b"ok")
    for rel in gone:
        seq = pre_image_seq(s, "remove", rel)
        assert b"inode: objects/%d.ino " % seq in s.tx("show", s.sess, str(seq)).stdout
        assert os.path.exists(os.path.join(s.sess, b"objects", b"%d.ino" % seq))
    seq = pre_image_seq(s, "content", "big.bin")
    assert b"objects/%d.gz," % seq in s.tx("show", s.sess, str(seq)).stdout
    s.rewind()
    assert_same(before, s.snap())


def test_removal_record_leaves_xattrs_to_the_kept_inode(populated):
    """In a new session a removal that keeps the inode lists no xattrs and
    says so (JR_INODE_XATTRS): the rewind still gives them back exactly."""
    s = populated
    before = s.snap()
    s.txn(["unlink", "xattr.txt"])
    seq = pre_image_seq(s, "remove", "xattr.txt")
    shown = s.tx("show", s.sess, str(seq)).stdout
    assert b"xattrs kept with the inode" in shown and b"\nxattrs:" not in shown, shown
    s.rewind()
    assert_same(before, s.snap())
