"""A damaged journal is reported, never trusted and never a crash: a torn
tail (cut at every byte of the last record), single bit flips, a record
edited with its crc recomputed, a record cut out, a damaged pre-image
object. Whatever is intact before the damage still rewinds."""
import os
import re
import shutil
import struct

import pytest

from conftest import (FILE_HDR, FRAME_HDR, Scratch, assert_same, begun_txn, flip,
                      frame_crc, frames, salt_of, segments, shrink, txreplay)


def small_tree(s):
    """A few files and directories (no hard links: the loops copy trees)."""
    os.makedirs(s.p("d/e"))
    for rel, data in ((b"f1", b"one\n"), (b"f2", b"two" * 50), (b"d/g", b"gee\n"),
                      (b"d/e/h", b"deep\n")):
        with open(s.p(rel), "wb") as f:
            f.write(data)
    for i, rel in enumerate((b"d/e/h", b"d/e", b"d/g", b"d", b"f1", b"f2", b"")):
        os.utime(s.p(rel), ns=(10**18 + i, 10**18 + 7 * i + 3))


def txn_ops():
    return [["write", "f1", "0", "XX"], ["put", "new", "y" * 30], ["mkdir", "d2"],
            ["chmod", "f2", "600"], ["rename", "d/g", "d/g2"], ["append", "f2", "z"],
            ["unlink", "d/e/h"]]


def torn_scenario(base):
    """A transaction whose last record was being written when the writer
    died: its change (rmdir of a non-empty directory, which fails) never
    happened. Returns (scratch, snapshot before the transaction, the segment
    holding the last record, that record's Frame)."""
    shutil.rmtree(base, ignore_errors=True)
    s = Scratch(base)
    small_tree(s)
    before = s.snap()
    n = begun_txn(s.jd(["begin", "agent"], *txn_ops()))
    known = {p: os.path.getsize(p) for p in segments(s.sess)}
    s.jd(["txn", str(n)], ["rmdir", "d"], rc=1)
    # the segment the last writer wrote: a new one, or a shared one it took
    (seg,) = [p for p in segments(s.sess) if os.path.getsize(p) != known.get(p)]
    last = frames(seg)[1][-1]
    return s, before, seg, last


def said(proc):
    return proc.stdout + proc.stderr


def test_cut_inside_the_last_record_is_reported_and_the_rest_rewinds(tmp_path):
    base = os.fsencode(tmp_path / "run")
    s, _, seg, last = torn_scenario(base)
    length = last.end - last.offset
    assert os.path.getsize(seg) == last.end
    for cut in range(last.offset, last.end):
        s, before, seg, last = torn_scenario(base)
        shrink(seg, cut)
        name = b"log/" + os.path.basename(seg)
        v = s.tx("verify", s.sess, rc=None)
        if cut == last.offset:
            assert v.returncode == 0, f"cut at the record boundary {cut}: {said(v)!r}"
        else:
            assert v.returncode == 1, \
                f"cut {cut - last.offset} bytes into a {length}-byte record: {said(v)!r}"
            assert name in said(v) and b"offset %d" % last.offset in said(v), \
                f"cut at {cut}: verify does not name {name!r} offset {last.offset}: {said(v)!r}"
        r = s.rewind(rc=None)
        assert r.returncode in (0, 1), said(r)
        assert_same(before, s.snap(), f"tree after rewind of a journal cut at {cut}")


@pytest.fixture
def damage_base(scratch):
    """A finished transaction over the small tree; the pristine session is
    kept in BASE/pristine so that each damage starts from a fresh copy."""
    s = scratch
    small_tree(s)
    s.before = s.snap()
    s.txn(*txn_ops())
    s.txn(["put", "f1", "second txn"], ["mkdir", "d3"])
    s.pristine = os.path.join(s.base, b"pristine")
    shutil.copytree(s.sess, s.pristine, symlinks=True)
    return s


def fresh_copy(s, k):
    """A copy of the pristine session at a new place; verify works anywhere."""
    dst = os.path.join(s.base, b"copy%d" % k)
    shutil.copytree(s.pristine, dst, symlinks=True)
    return dst


def biggest_segment(session):
    return max(segments(session), key=os.path.getsize)


def test_python_frame_parser_agrees_with_the_writer(damage_base):
    s = damage_base
    salt = salt_of(s.sess)
    for seg in segments(s.sess):
        header, fr = frames(seg)
        assert header[:8] == b"FTSBXJNL" and header[16:28] == salt
        assert fr and fr[-1].end == os.path.getsize(seg)
        with open(seg, "rb") as f:
            data = f.read()
        for x in fr:
            assert x.crc == frame_crc(salt, data[x.offset:x.end]), f"{seg!r} offset {x.offset}"


def flip_offsets(seg):
    """Sampled offsets: file header, and in each of a few records the crc,
    the length, the type, the seq, a field and the chain link."""
    _, fr = frames(seg)
    offs = [0, 7, 8, 10, 12, 16, 27, 28, 31]
    for x in fr[:2] + fr[-2:]:
        offs += [x.offset, x.offset + 3, x.offset + 4, x.offset + 6, x.offset + FRAME_HDR,
                 x.offset + FRAME_HDR + 2, x.offset + FRAME_HDR + 8, x.offset + FRAME_HDR + 20,
                 x.offset + FRAME_HDR + 24 + (x.len - 56) // 2, x.end - 32, x.end - 1]
    return sorted(set(offs))


def test_single_bit_flips_in_a_segment_are_reported(damage_base):
    s = damage_base
    seg_name = os.path.basename(biggest_segment(s.pristine))
    for k, off in enumerate(flip_offsets(biggest_segment(s.pristine))):
        copy = fresh_copy(s, k)
        seg = os.path.join(copy, b"log", seg_name)
        flip(seg, off, k % 8)
        v = txreplay_verify(copy)
        assert v.returncode == 1, f"bit {k % 8} of byte {off} flipped: verify said {said(v)!r}"
        shutil.rmtree(copy)


def test_single_bit_flips_in_the_session_file_are_reported(damage_base):
    s = damage_base
    size = os.path.getsize(os.path.join(s.pristine, b"session"))
    for k, off in enumerate([0, 8, 9, 12, 20, 28, FILE_HDR, FILE_HDR + 4, FILE_HDR + 9,
                             size // 2, size - 1]):
        copy = fresh_copy(s, k)
        flip(os.path.join(copy, b"session"), off, (k * 3) % 8)
        v = txreplay_verify(copy)
        assert v.returncode == 1, f"session byte {off} flipped: verify said {said(v)!r}"
        shutil.rmtree(copy)


def txreplay_verify(session):
    return txreplay("verify", session, rc=None)


def test_rewind_never_crashes_on_bit_flips(damage_base):
    """Rewinding the damaged journal (the real one, in place) may refuse or
    undo what is intact, but never crashes, whatever bit is flipped."""
    s = damage_base
    seg_name = os.path.basename(biggest_segment(s.pristine))
    for k, off in enumerate(flip_offsets(biggest_segment(s.pristine))[::2]):
        shutil.rmtree(s.sess)
        shutil.copytree(s.pristine, s.sess, symlinks=True)
        flip(os.path.join(s.sess, b"log", seg_name), off, (k + 5) % 8)
        r = s.rewind(rc=None)
        assert r.returncode in (0, 1), said(r)
        s.tx("log", s.sess, "--json", rc=None)
        s.tx("list", s.sess, rc=None)


def rewrite(seg, data):
    with open(seg, "wb") as f:
        f.write(data)


def test_edited_record_with_recomputed_crc_breaks_the_chain(damage_base):
    s = damage_base
    seg = biggest_segment(s.sess)
    salt = salt_of(s.sess)
    _, fr = frames(seg)
    with open(seg, "rb") as f:
        data = bytearray(f.read())
    victim = next(x for x in fr[1:-1] if x.field(1))          # a middle record with a PATH
    p = victim.body.index(victim.field(1)) + victim.offset + FRAME_HDR
    data[p + len(victim.field(1)) - 1] ^= 0x01                   # its path's last byte
    data[victim.offset:victim.offset + 4] = struct.pack(
        "<I", frame_crc(salt, bytes(data[victim.offset:victim.end])))
    rewrite(seg, data)
    assert frames(seg)[1][fr.index(victim)].crc == frame_crc(salt, bytes(data[victim.offset:victim.end]))
    v = s.tx("verify", s.sess, rc=1)
    assert os.path.basename(seg) in said(v)
    assert b"offset %d" % victim.offset in said(v), said(v)
    s.rewind(rc=None)


def test_deleted_middle_record_is_caught(damage_base):
    s = damage_base
    seg = biggest_segment(s.sess)
    _, fr = frames(seg)
    assert len(fr) >= 4
    victim = fr[len(fr) // 2]
    with open(seg, "rb") as f:
        data = f.read()
    rewrite(seg, data[:victim.offset] + data[victim.end:])
    v = s.tx("verify", s.sess, rc=1)
    assert os.path.basename(seg) in said(v)
    assert b"offset %d" % victim.offset in said(v), said(v)
    s.rewind(rc=None)


def test_duplicated_record_is_caught(damage_base):
    s = damage_base
    seg = biggest_segment(s.sess)
    _, fr = frames(seg)
    with open(seg, "rb") as f:
        data = f.read()
    rewrite(seg, data + data[fr[-1].offset:fr[-1].end])
    v = s.tx("verify", s.sess, rc=1)
    assert os.path.basename(seg) in said(v)
    s.rewind(rc=None)


def test_swapped_records_are_caught(damage_base):
    s = damage_base
    seg = biggest_segment(s.sess)
    _, fr = frames(seg)
    a, b = fr[1], fr[2]
    with open(seg, "rb") as f:
        data = f.read()
    rewrite(seg, data[:a.offset] + data[b.offset:b.end] + data[a.offset:a.end] + data[b.end:])
    s.tx("verify", s.sess, rc=1)
    s.rewind(rc=None)


def test_intact_journal_verifies(damage_base):
    s = damage_base
    assert not s.tx("verify", s.sess).stderr


@pytest.fixture
def with_object(scratch):
    """A transaction that rewrote a 300 KiB file: its pre-image is
    objects/D/S.gz (s.obj: D/S.gz)."""
    s = scratch
    with open(s.p("big"), "wb") as f:
        f.write(os.urandom(300 << 10))
    s.before = s.snap()
    s.txn(["write", "big", "100", "patched"])
    s.after = s.snap()
    top = os.path.join(s.sess, b"objects")
    (s.obj,) = [os.path.join(d, n) for d in os.listdir(top) for n in os.listdir(os.path.join(top, d))
                if n.endswith(b".gz")]
    return s


def names_object(out, obj):
    """Does OUT name the object OBJ (objects/D/S.gz), or the record seq S?"""
    seq = os.path.basename(obj).split(b".")[0]
    return b"objects/" + obj in out or re.search(rb"\bseq %s\b" % seq, out)


def test_damaged_pre_image_object_is_reported(with_object):
    s = with_object
    path = os.path.join(s.sess, b"objects", s.obj)
    flip(path, os.path.getsize(path) // 2, 3)
    v = s.tx("verify", s.sess, rc=1)
    assert names_object(said(v), s.obj), said(v)


def test_truncated_pre_image_object_is_reported(with_object):
    s = with_object
    path = os.path.join(s.sess, b"objects", s.obj)
    shrink(path, os.path.getsize(path) // 3)
    v = s.tx("verify", s.sess, rc=1)
    assert names_object(said(v), s.obj), said(v)


def test_rewind_never_writes_a_damaged_pre_image(with_object):
    s = with_object
    path = os.path.join(s.sess, b"objects", s.obj)
    flip(path, os.path.getsize(path) // 2, 3)
    r = s.rewind(rc=1)
    assert r.stderr, "the failed undo was not reported"
    now = s.snap()[b"big"]
    assert now["sha256"] in (s.before[b"big"]["sha256"], s.after[b"big"]["sha256"])
    assert now["sha256"] == s.after[b"big"]["sha256"], "rewind changed the file anyway"
