"""Rewind gives the tree back exactly: for every change jdrive can make, and
for the combinations real programs make (rename over, sed -i, rm -rf, ...),
on populate()'s tree: snapshot, change inside one transaction, rewind,
snapshot again, and the two are identical."""
import os
import re

import pytest

from conftest import ODD_NAMES, assert_changed, assert_same, begun_txn, snapshot

# One case per behaviour of every change op; paths are relative to the workspace.
SINGLE = {
    "write-in-place": [["write", "a.txt", "2", "XY"]],
    "write-past-end-leaves-hole": [["write", "a.txt", "5000", "tail"]],
    "write-creates-file": [["write", "new.txt", "0", "fresh"]],
    "write-big-file-pre-image-in-objects": [["write", "big.bin", "1000", "patch"]],
    "write-into-sparse-file": [["write", "sparse", "4096", "data"]],
    "write-hard-linked-file": [["write", "hard1", "0", "X"]],
    "write-suid-file": [["write", "suid", "0", "Y"]],
    "write-odd-name": [["write", b"bad\xffname", "0", "Z"]],
    "put-over-file": [["put", "a.txt", "replaced\n"]],
    "put-creates-file": [["put", "src/deep/new.c", "int x;\n"]],
    "put-over-big-file": [["put", "big.bin", "small now"]],
    "put-odd-name": [["put", b"new\nline", "other"]],
    "append-to-file": [["append", "a.txt", "more\n"]],
    "append-creates-file": [["append", "appended", "first\n"]],
    "append-to-big-file": [["append", "big.bin", "tail"]],
    "fill-new-large-file": [["fill", "filled", "400000"]],
    "fill-over-small-file": [["fill", "a.txt", "300000"]],
    "fill-over-big-file": [["fill", "big.bin", "10"]],
    "truncate-to-zero": [["truncate", "a.txt", "0"]],
    "truncate-grows": [["truncate", "a.txt", "100000"]],
    "truncate-big-file": [["truncate", "big.bin", "1"]],
    "truncate-sparse-file": [["truncate", "sparse", "10"]],
    "mkdir": [["mkdir", "newdir"]],
    "mkdir-with-mode": [["mkdir", "src/deep/new", "700"]],
    "mkdir-odd-name": [["mkdir", b"odd\xffdir"]],
    "rmdir-empty-dir": [["rmdir", "emptydir"]],
    "unlink-file": [["unlink", "a.txt"]],
    "unlink-hard-link": [["unlink", "hard1"]],
    "unlink-big-file": [["unlink", "big.bin"]],
    "unlink-sparse-file": [["unlink", "sparse"]],
    "unlink-suid-file": [["unlink", "suid"]],
    "unlink-file-with-xattrs": [["unlink", "xattr.txt"]],
    "unlink-symlink": [["unlink", "sym"]],
    "unlink-dangling-symlink": [["unlink", "dangling"]],
    "unlink-fifo": [["unlink", "fifo"]],
    "unlink-private-file": [["unlink", "private/notes"]],
    "rename-file": [["rename", "a.txt", "renamed.txt"]],
    "rename-file-to-other-dir": [["rename", "a.txt", "src/deep/moved.txt"]],
    "rename-symlink": [["rename", "sym", "sym2"]],
    "rename-fifo": [["rename", "fifo", "fifo2"]],
    "rename-noreplace": [["rename", "a.txt", "fresh", "noreplace"]],
    "rename-exchange-files": [["rename", "a.txt", "secret", "exchange"]],
    "rename-exchange-dir-and-file": [["rename", "src", "a.txt", "exchange"]],
    "link": [["link", "a.txt", "alias"]],
    "link-third-name": [["link", "hard1", "src/deep/hard3"]],
    "symlink": [["symlink", "a.txt", "newlink"]],
    "symlink-dangling-odd-target": [["symlink", b"../no\xffwhere", "src/up"]],
    "mkfifo": [["mkfifo", "newfifo"]],
    "mkfifo-with-mode": [["mkfifo", "newfifo", "600"]],
    "chmod-file": [["chmod", "a.txt", "600"]],
    "chmod-drops-suid": [["chmod", "suid", "755"]],
    "chmod-sets-suid": [["chmod", "script.sh", "4755"]],
    "chmod-dir": [["chmod", "src", "700"]],
    "chown-file": [["chown", "a.txt", "1000", "1000"]],
    "chown-suid-file": [["chown", "suid", "1000", "1000"]],
    "chown-dir": [["chown", "src", "123", "456"]],
    "utime-file": [["utime", "a.txt", "1", "2"]],
    "utime-symlink": [["utime", "sym", "5", "6"]],
    "utime-dir": [["utime", "src", "7", "8"]],
    "utime-fifo": [["utime", "fifo", "9", "999999999"]],
    "setxattr-new": [["setxattr", "a.txt", "user.new", "value"]],
    "setxattr-replace": [["setxattr", "xattr.txt", "user.comment", "replaced"]],
    "setxattr-dir": [["setxattr", "src", "user.dir", "dirval"]],
    "rmxattr": [["rmxattr", "xattr.txt", "user.comment"]],
    "rmxattr-empty-value": [["rmxattr", "xattr.txt", "user.empty"]],
}


def rm_rf(root, rel):
    """What `rm -rf REL` does: remove every entry, children first."""
    ops, dirs = [], []
    for top, subdirs, files in os.walk(os.path.join(root, rel), topdown=True):
        for name in files + [d for d in subdirs if os.path.islink(os.path.join(top, d))]:
            ops.append(["unlink", os.path.relpath(os.path.join(top, name), root)])
        if os.path.relpath(top, root) != b".":
            dirs.append(os.path.relpath(top, root))
    return ops + [["rmdir", d] for d in reversed(dirs)]


COMBINED = {
    "rename-over-existing-file": [["rename", "a.txt", "secret"]],
    "rename-over-hard-link": [["rename", "a.txt", "hard1"]],
    "rename-symlink-over-file": [["rename", "sym", "script.sh"]],
    "rename-directory": [["rename", "src", "newsrc"]],
    "rename-directory-over-empty-dir": [["rename", "src", "emptydir"]],
    "rename-directory-into-another": [["rename", "src/deep", "private/deep"]],
    "exchange-directories": [["rename", "src", "private", "exchange"]],
    "rm-rf-subtree": lambda ws: rm_rf(ws, b"src"),
    "rm-rf-whole-tree": lambda ws: rm_rf(ws, b"."),
    "sed-i-replace": [["put", ".a.txt.sed1", "hello sed\n"],
                      ["rename", ".a.txt.sed1", "a.txt"]],
    "sed-i-replace-hard-link": [["put", ".sedtmp", "unlinked now\n"],
                                ["rename", ".sedtmp", "hard1"]],
    "sed-i-replace-odd-name": [["put", ".sedtmp", "x"], ["chmod", ".sedtmp", "600"],
                               ["rename", ".sedtmp", b"bad\xffname"]],
    "chmod-then-write": [["chmod", "secret", "644"], ["write", "secret", "0", "K"]],
    "write-then-unlink": [["write", "a.txt", "0", "gone"], ["unlink", "a.txt"]],
    "unlink-then-recreate": [["unlink", "a.txt"], ["put", "a.txt", "new file\n"]],
    "unlink-then-mkdir-same-name": [["unlink", "a.txt"], ["mkdir", "a.txt"],
                                    ["put", "a.txt/inner", "x"]],
    "unlink-hard-link-then-relink": [["unlink", "hard1"], ["link", "src/hard2", "hard1"]],
    "many-writes-one-file": [["write", "a.txt", "0", "1"], ["append", "a.txt", "2"],
                             ["truncate", "a.txt", "3"], ["put", "a.txt", "4"],
                             ["write", "a.txt", "9", "5"]],
    "big-file-rewritten-then-moved": [["write", "big.bin", "0", "A"],
                                      ["rename", "big.bin", "src/big"],
                                      ["append", "src/big", "B"]],
    "new-dir-filled-then-moved": [["mkdir", "nd"], ["put", "nd/f", "x"],
                                  ["symlink", "f", "nd/l"], ["rename", "nd", "src/nd"]],
    "dir-replaced-by-new-one": [["rename", "src", "src.old"], ["mkdir", "src"],
                                ["put", "src/main.c", "new\n"]],
    "create-then-remove": [["put", "tmpfile", "x"], ["unlink", "tmpfile"],
                           ["mkdir", "tmpdir"], ["rmdir", "tmpdir"]],
    "metadata-pile-up": [["setxattr", "a.txt", "user.k", "v"], ["chmod", "a.txt", "4711"],
                         ["chown", "a.txt", "7", "8"], ["utime", "a.txt", "100", "5"]],
    "odd-names-shuffled": [["rename", ODD_NAMES[0], "tmp1"], ["rename", ODD_NAMES[1], ODD_NAMES[0]],
                           ["rename", "tmp1", ODD_NAMES[1]], ["unlink", ODD_NAMES[2]]],
    "rename-chain": [["rename", "a.txt", "b"], ["rename", "secret", "a.txt"],
                     ["rename", "b", "secret"]],
    "truncate-then-append": [["truncate", "sparse", "0"], ["append", "sparse", "after"]],
}


def ops_for(case, ws):
    return case(ws) if callable(case) else case


@pytest.mark.parametrize("ops", SINGLE.values(), ids=SINGLE.keys())
def test_rewind_undoes_each_change(populated, ops):
    s = populated
    before = s.snap()
    s.txn(*ops)
    assert_changed(before, s.snap())
    s.rewind()
    assert_same(before, s.snap())


@pytest.mark.parametrize("case", COMBINED.values(), ids=COMBINED.keys())
def test_rewind_undoes_combined_changes(populated, case):
    s = populated
    before = s.snap()
    s.txn(*ops_for(case, s.ws))
    assert_changed(before, s.snap())
    s.rewind()
    assert_same(before, s.snap())


def test_rewind_undoes_changes_made_by_several_processes_of_one_txn(populated):
    s = populated
    before = s.snap()
    n = str(begun_txn(s.jd(["begin", "make"], ["put", "a.txt", "p1"])))
    s.jd(["txn", n], ["unlink", "hard1"], ["rename", "src", "src2"])
    s.jd(["txn", n], ["put", "a.txt", "p3"], ["mkdir", "src"], ["end", "0"])
    s.rewind()
    assert_same(before, s.snap())


# Two transactions running at once change the same file (or two names of one
# inode), each coming back to it after the other's record (an agent's tool call and a background job
# it left running). A transaction's change after another's record of the
# path needs a record of its own: without it, the rewind finds the file
# shorter than the other's J_APPEND said (the concurrency stress test's
# failure, made deterministic).
INTERLEAVED = {
    "truncate-append-truncate": [("A", ["truncate", "a.txt", "5"]), ("B", ["append", "a.txt", "BBB"]),
                                 ("A", ["truncate", "a.txt", "2"])],
    "append-append-truncate": [("A", ["append", "a.txt", "aa"]), ("B", ["append", "a.txt", "bb"]),
                               ("A", ["truncate", "a.txt", "1"]), ("B", ["append", "a.txt", "b2"])],
    "put-append-put": [("A", ["put", "a.txt", "first"]), ("B", ["append", "a.txt", "+b"]),
                       ("A", ["put", "a.txt", "x"]), ("B", ["append", "a.txt", "+b2"])],
    "new-file-append-truncate": [("A", ["put", "n.txt", "made by A"]), ("B", ["append", "n.txt", "+B"]),
                                 ("A", ["truncate", "n.txt", "0"]), ("B", ["append", "n.txt", "+B2"])],
    "meta-then-content": [("A", ["chmod", "a.txt", "600"]), ("B", ["append", "a.txt", "tail"]),
                          ("A", ["chmod", "a.txt", "640"]), ("A", ["truncate", "a.txt", "3"])],
    # Two names of one inode are two paths to the table but one file: a
    # change through either is recorded, even in one transaction.
    "hard-links-one-txn": [("A", ["truncate", "hard1", "5"]), ("A", ["append", "src/hard2", "+a"]),
                           ("A", ["truncate", "hard1", "2"]), ("A", ["chmod", "src/hard2", "600"])],
    "hard-links-two-txns": [("A", ["truncate", "hard1", "5"]), ("B", ["append", "src/hard2", "+b"]),
                            ("A", ["put", "hard1", "1"]), ("B", ["append", "src/hard2", "+b2"])],
    "hard-link-made-later": [("A", ["put", "a.txt", "abcdef"]), ("B", ["link", "a.txt", "a2"]),
                             ("B", ["append", "a2", "+b"]), ("A", ["truncate", "a.txt", "1"])],
}


@pytest.mark.parametrize("steps", INTERLEAVED.values(), ids=INTERLEAVED.keys())
def test_rewind_undoes_two_transactions_taking_turns_on_one_file(populated, steps):
    s = populated
    before = s.snap()
    txn = {t: str(begun_txn(s.jd(["begin", "tool", t]))) for t in ("A", "B")}
    for t, op in steps:
        s.jd(["txn", txn[t]], op)
    for t in ("A", "B"):
        s.jd(["txn", txn[t]], ["end", "0"])
    assert_changed(before, s.snap())
    s.rewind()
    assert_same(before, s.snap())


def test_rewind_undoes_a_durable_session(populated):
    s = populated
    before = s.snap()
    s.txn(["write", "big.bin", "7", "x"], ["unlink", "a.txt"], ["mkdir", "d"], durable=True)
    s.rewind()
    assert_same(before, s.snap())


def test_rewind_touches_nothing_the_journal_did_not_record(populated):
    s = populated
    s.txn(["put", "a.txt", "changed"])
    with open(s.p("bystander"), "wb") as f:
        f.write(b"made outside the journal\n")
    os.utime(s.p("bystander"), ns=(1, 3))
    bystander = snapshot(s.ws)[b"bystander"]
    s.rewind()
    assert snapshot(s.ws).get(b"bystander") == bystander


def test_second_rewind_changes_nothing_and_says_so(populated):
    s = populated
    before = s.snap()
    s.txn(["put", "a.txt", "x"], ["unlink", "big.bin"], ["rename", "src", "s2"])
    s.rewind()
    assert_same(before, s.snap())
    log = s.log()
    again = s.rewind()
    assert_same(before, s.snap())
    said = (again.stdout + again.stderr).decode(errors="replace")
    assert re.search(r"nothing|already|no record|0 undone", said, re.I), \
        f"the second rewind did not say it had nothing to do: {said!r}"
    assert [r for r in s.log() if r["op"] == "rewound"] == \
        [r for r in log if r["op"] == "rewound"], "the second rewind marked records again"


def test_dry_run_changes_nothing(populated):
    s = populated
    before = s.snap()
    s.txn(["put", "a.txt", "x"], ["unlink", "big.bin"], ["chmod", "suid", "700"],
          ["rename", "src", "s2"])
    changed = s.snap()
    journal = snapshot(s.sess)
    dry = s.rewind("--dry-run")
    assert dry.stdout.strip(), "--dry-run did not say what it would do"
    assert_same(changed, s.snap())
    assert_same(journal, snapshot(s.sess), "the journal")
    s.rewind()
    assert_same(before, s.snap())


def test_every_undo_record_is_marked_rewound(populated):
    s = populated
    s.txn(["put", "a.txt", "x"], ["unlink", "big.bin"], ["mkdir", "nd"])
    s.rewind()
    recs = s.log()
    undo_ops = {"create", "content", "append", "remove", "rename", "meta"}
    marked = {r["seqref"] for r in recs if r["op"] == "rewound"}
    undo = [r for r in recs if r["op"] in undo_ops]
    assert undo, "no undo records in the log"
    assert {r["seq"] for r in undo} <= marked
    assert all(r.get("rewound") for r in undo)
