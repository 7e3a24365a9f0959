/*
 * format.h - the ftsbx journal on disk. This header is the specification; the
 * writer (writer.c), the reader (reader.c) and every test follow it.
 *
 * A *session* is one directory holding everything one wrapped agent and all
 * its descendants changed. A *transaction* (txn) is the unit of rewind.
 *
 *   SESSION/
 *     session            file header + one J_SESSION record (who, when, argv)
 *     shared             (JI_SHARED) the page of shared counters below, then
 *                        the locks file's layout (mutexes, lanes' table),
 *                        mapped by every process (jshared_size() bytes);
 *                        then 128 KiB where the session's first root leaves
 *                        its compiled policy (a hole until then; its owner
 *                        and length at byte 256 of the counters' page:
 *                        struct jpolicy_slot, journal.h); then the reserve
 *                        to the end of the file (given back by cutting the
 *                        file after the policy's place). An older session
 *                        has the three files seq, locks and reserve instead.
 *     seq                shared counters: 4096 bytes, mmap(MAP_SHARED); u64 at
 *                        offset 0 is the next sequence number, u64 at offset 8
 *                        the next transaction id, u64 at offset 16 the
 *                        generation (bumped before every remove and rename:
 *                        ends copy-on-first-write dedup), u64 at
 *                        offset 24 the namespace generation (bumped by the shim
 *                        before every rmdir, rename and symlink: ends cached
 *                        path verdicts). All only grow (atomic add).
 *                        Bytes 32..35 (JI_LAZYDIRS): u32 bits, 1 once log/
 *                        was made, 2 once objects/ was (atomic or).
 *                        u64 at offset 40: bumped whenever a transaction
 *                        captures a path whose last record is another
 *                        transaction's (ends the shim's per-thread answers).
 *                        Bytes 48..143 and 144..239: 12 u64 slots each
 *                        of the pipes that fetchers write and that
 *                        interpreters read their program from, by inode:
 *                        the shim's fetch-and-run check of a pipeline
 *                        process by process. Each table is a ring of the
 *                        last 12 pipes put in it, looked up whole: the u32
 *                        at byte 240 (the fetchers') and 244 (the
 *                        interpreters') counts the pipes put in (slot
 *                        count % 12), so that a pipe is pushed out only by
 *                        12 newer ones, not by one whose inode falls on
 *                        its slot (a table by inode % 12 lost `curl URL |
 *                        tar x` when tar's own stdout pipe came second).
 *                        u64 at byte 248: the rewinds (bumped by every
 *                        rewind that undid a record, with the generation:
 *                        a transaction rewound while its processes live on
 *                        captures its paths and their directories afresh).
 *                        Bytes 256..271: the policy's slot (JI_SHARED).
 *                        Bytes 272..511: 60 u32 slots where a process
 *                        whose call the policy refused leaves its
 *                        transaction id (slot id % 60), for the root's
 *                        rewind on a refusal ([rewind] on_failure).
 *                        Bytes 512..4095: 896 u32 slots where a process that
 *                        is not a tool call leaves its transaction id
 *                        (slot id % 896) for the root to see at its reaping,
 *                        and where the root marks a tool call's id that
 *                        ended (id | 0x80000000, JL_ENDED): the processes of
 *                        that transaction still running capture each path
 *                        afresh (dedup.c: a late key).
 *     log/lane-K.ftj     shared segments (K = 000..255): each is written by
 *                        one process at a time, as a run of records that
 *                        begins with that process's J_SEGMENT record; a
 *                        process takes a free one at its first record and
 *                        gives it back before an exec and at exit (one that
 *                        dies holding it leaves it to the next taker, who
 *                        goes on with its chain only if its length is the
 *                        one the owner last left: else a torn tail stays at
 *                        its end and nobody appends to it again). Most
 *                        processes write a few records: a file of their own
 *                        each was most of what a short program cost.
 *     log/S-PID.ftj      a segment of one writer's own (all 256 lanes busy,
 *                        or a session made before lanes); S is its first seq.
 *     reserve            up to 128 KiB of allocated space (less on a small
 *                        filesystem), freed by txreplay to write its rewind
 *                        marks when the filesystem is full
 *     locks              1024 robust process-shared mutexes (locks.c): a
 *                        writer holds its paths' locks from capture to change;
 *                        then, from the next 4096-byte boundary, the lanes'
 *                        table: 256 x 32 bytes { u64 owner (its pid namespace's
 *                        inode << 32 | its pid; 0: free), u64 length after the
 *                        owner's last whole record, u32 state (0 no file yet,
 *                        1 open, 2 given up), 12 bytes zero }. A locks file
 *                        without the table, or a session without JI_LANES (an
 *                        older one), means no lanes.
 *                        A JI_LAZYDIRS session is created without log/ and
 *                        objects/: the first process that writes a record
 *                        (an object) makes it, so that a session nothing
 *                        changed in costs two inodes fewer; the reserve is
 *                        allocated by the process that makes log/. A session without
 *                        log/ has no records, unless its counters' page says
 *                        log/ was made: then it is damage, and a writer
 *                        refuses (EIO) rather than start a log/ anew.
 *     objects/D/S.gz     a large pre-image, gzip framed (zcat reads it)
 *     objects/D/S.ino    a preserved inode: a hard link to a removed file
 *
 * Objects are named by the seq S of the record that refers to them, in the
 * subdirectory D = S / 100 (S without its last two decimal digits: 1571.ino
 * is in objects/15/), made by the first writer that needs it (mkdir on
 * ENOENT; EEXIST is another writer's). No directory holds more than 100
 * objects however many files a session removes: ext4 searches a directory
 * block entry by entry at every link (for the name, then for room), and
 * one block of at most 100 entries costs half what the full hashed blocks
 * of a directory of ten thousand do. A subdirectory may also be a directory
 * the program removed (capture.c, keep_dir: renamed there, empty, in place
 * of its rmdir, for a D no seq has reached yet, by way of objects/.keep-TID
 * where it is looked at first; made mode 0700, its old xattrs kept):
 * nothing reads it but as D. A .keep-TID left by a process killed on the
 * way is an empty directory of no meaning; one that holds an entry is a
 * directory filled by a process outside the session while it was taken,
 * whose name was taken meanwhile (the shim said so). A session
 * without JI_OBJDIRS (below) keeps its objects flat: objects/S.gz,
 * objects/S.ino.
 *
 * Every file (session and segments) opens with a 32-byte file header:
 *
 *     0  magic    "FTSBXJNL"
 *     8  u16      version      (J_VERSION; a reader refuses any other)
 *    10  u16      kind         (J_KIND_SESSION or J_KIND_SEGMENT)
 *    12  u32      incompat     feature bits a reader must know (JI_*): one
 *                              it does not know refuses the file
 *    16  u8[12]   salt         the session's random salt (copied into segments)
 *    28  u32      crc32c       of bytes 0..27
 *
 * followed by records. All integers are little-endian. A record is framed:
 *
 *     0  u32      crc          masked crc32c, seeded with the salt, of bytes 4..(8+len)
 *     4  u32      len          length of the body that follows (J_REC_MIN..J_REC_MAX)
 *     8  body:
 *        u8       type         J_* below
 *        u8       flags        JR_* below
 *        u16      nfields
 *        u32      txn          transaction id (0: none)
 *        u64      seq          global sequence number (unique in the session)
 *        i64      time         CLOCK_REALTIME, nanoseconds
 *        fields   nfields x { u16 tag, u32 n, u8 value[n] }
 *        u8[32]   link         chain link (below)
 *
 * The crc is masked (rotated right 15 bits plus a constant, as LevelDB does)
 * so that a record which stores crcs does not confuse the framing, and seeded
 * with the salt so that a stale or zero-filled block never validates.
 *
 * Hash chain (tamper evidence). Each segment carries a running BLAKE2b-256
 * chain: link[0] = H(salt || file header), link[i] = H(link[i-1] || body of
 * record i without its link). A record edited, removed or reordered after the
 * fact breaks the chain from that record on, even when its crc was recomputed.
 * A writer running our own code could forge a consistent chain; the chain heads
 * are therefore also reported (txreplay verify) to be kept outside the agent's
 * reach.
 *
 * Ordering. Sequence numbers come from the shared counter (an atomic add, no
 * lock). A record's seq is taken before the change it undoes, so the order of
 * seqs is the order of changes. Within a segment seqs usually grow (a
 * pre-image stored in objects/ takes its seq before the record is appended,
 * so another thread's record may come between); the reader sorts all records
 * of all segments by seq. Gaps are legal (a process killed between taking a
 * number and writing). Duplicates are damage.
 *
 * Torn tails. A writer appends each record with one write(2) (O_APPEND), or
 * copies it into a mapped window of a lane it holds (writer.c): the file then
 * ends in zero bytes after the last record, which a reader takes as the end
 * of the segment, not as damage, and the lane's next taker cuts off. A
 * process killed mid-write leaves a short or corrupt tail: a reader reports
 * it with segment and offset, ignores the rest of that segment, and yields
 * every intact record before it. Records are never rewritten in place.
 *
 * Versioning. J_VERSION changes only for incompatible layout changes, and a
 * reader refuses other versions. Smaller incompatible changes are feature
 * bits (JI_*, as jbd2's incompat features): a reader refuses a file with a
 * bit it does not know, and reads every combination of those it knows. A
 * session's features are fixed at its creation (a writer creates sessions
 * with JI_NEW) and copied into its segments; a writer that opens an older
 * session writes what that session's features say. Record types below 128
 * must be understood (an unknown one is refused: "written by a newer
 * ftsbx"); types 128 and up may be skipped by readers that do not know
 * them. Unknown field tags are skipped.
 *
 * Undo before do (DESIGN.md invariant 1): the record that undoes a change is
 * written (and fsynced when the session is durable) before the change.
 */
#ifndef FTSBX_JOURNAL_FORMAT_H
#define FTSBX_JOURNAL_FORMAT_H

#include <stdint.h>

#define J_MAGIC         "FTSBXJNL"
#define J_VERSION       1
#define J_KIND_SESSION  1
#define J_KIND_SEGMENT  2
#define J_FILE_HDR      32
#define J_SALT_LEN      12
#define J_LINK_LEN      32
#define J_FRAME_HDR     8               /* crc + len */
#define J_BODY_FIXED    24              /* type..time */
#define J_REC_MIN       (J_BODY_FIXED + J_LINK_LEN)
#define J_REC_MAX       (1u << 28)      /* 256 MiB; larger pre-images go to objects/ */
#define J_FIELD_HDR     6               /* u16 tag + u32 n */
#define J_SEQ_FILE_SIZE 4096
#define J_INLINE_MAX    (256u << 10)    /* pre-images up to this many bytes stay in the record */
#define J_RESERVE_SIZE  (128u << 10)
#define J_OBJ_FANOUT    100             /* objects per subdirectory of objects/ (JI_OBJDIRS) */

/* Incompatible features (file header bytes 12..15). Bit 0 stays unused: the
 * test suite sets it as the feature of a newer ftsbx that must be refused. */
#define JI_OBJDIRS      0x00000002u     /* objects/D/S.EXT, D = S / J_OBJ_FANOUT (else objects/S.EXT) */
#define JI_INODE_XATTRS 0x00000004u     /* a J_REMOVE may carry JR_INODE_XATTRS */
#define JI_LANES        0x00000008u     /* log/lane-K.ftj: a segment may hold several writers' runs */
#define JI_SHARED       0x00000010u     /* SESSION/shared: the counters, the locks, the lanes and the
					   reserve in one file (else SESSION/seq, locks and reserve) */
#define JI_LAZYDIRS     0x00000020u     /* log/ and objects/ made by their first writer (with JI_SHARED):
					   no log/ is no record, unless the counters' page says made */
#define JI_RANGES       0x00000040u     /* a J_CONTENT may hold a part of the file (JR_RANGE, F_OFFSET) */
#define JI_KNOWN        (JI_OBJDIRS | JI_INODE_XATTRS | JI_LANES | JI_SHARED | JI_LAZYDIRS | JI_RANGES)
#define JI_NEW          JI_KNOWN        /* what a new session gets */

/* Record types. Each lists its fields; [opt] marks optional ones. */
enum jtype {
	J_SESSION   = 1,  /* ARGV CWD PID UID [HOST] [POLICY]: the session file's only record */
	J_SEGMENT   = 2,  /* PID PPID [ARGV]: first record of every segment */
	J_TXN_BEGIN = 3,  /* PID [ARGV] [CWD]: a transaction starts (txn in the header) */
	J_TXN_END   = 4,  /* PID STATUS (a wait(2) status): a transaction ended */
	J_EXEC      = 5,  /* PID PPID PATH ARGV CWD: a program was started */
	J_REFUSE    = 6,  /* OP RULE ERRNO [PATH] [PATH2] [ARGV] [CWD]: a call was refused */
	/* undo records: each is written before the change it undoes */
	J_CREATE    = 10, /* PATH: did not exist. Undo: remove what is there. */
	J_CONTENT   = 11, /* PATH STAT DATA|OBJECT [XATTRS]: bytes and metadata of a
	                     regular file changed in place. Undo: rewrite the same inode.
	                     With JR_RANGE (JI_RANGES sessions only) and OFFSET: only
	                     the bytes from OFFSET on (DATA's or OBJECT's size of
	                     them, none where the file ended before OFFSET) that a
	                     write was about to overwrite; STAT is the whole file's.
	                     Undo: write them back at OFFSET into the file at PATH
	                     (which must be a regular file), cut it to STAT.size,
	                     restore metadata. A file's records are undone in
	                     decreasing seq, so each byte ends as the earliest
	                     record that saved it had it. */
	J_APPEND    = 12, /* PATH STAT [XATTRS]: opened for append; STAT.size is the old size.
	                     Undo: truncate to it, restore metadata. */
	J_REMOVE    = 13, /* PATH STAT [INODE|DATA|OBJECT|TARGET] [XATTRS]: the path is about
	                     to be removed or replaced. Regular files keep their inode
	                     (INODE: objects/D/S.ino) or a copy (DATA/OBJECT, other
	                     filesystem); symlinks their TARGET; directories, fifos,
	                     sockets and devices are recreated from STAT. With
	                     JR_INODE_XATTRS (INODE only) no XATTRS are listed: the
	                     kept inode has its own, and undo leaves them as they are. */
	J_RENAME    = 14, /* PATH PATH2 STAT FLAGS: PATH is about to be renamed to PATH2
	                     (FLAGS: renameat2's); STAT is PATH's. Undo: rename back. */
	J_META      = 15, /* PATH STAT [XATTRS]: mode, owner, times, xattrs about to
	                     change. With JR_WEAK: a parent directory's times only. */
	J_REWOUND   = 16, /* SEQREF [INODE]: the record SEQREF was undone (written by
	                     txreplay); INODE: the inode the undo changed */
	J_UNDOING   = 17, /* SEQREF [INODE]: txreplay is about to undo SEQREF, which will
	                     change INODE (under every name it has). A run killed
	                     before the matching J_REWOUND leaves this behind, and
	                     the next run knows that inode's ctime is its own. */
	J_TYPE_MAX  = 17,
	J_SKIPPABLE = 128 /* types from here on may be skipped by old readers */
};

/* Record flags. */
#define JR_WEAK         0x01  /* J_META of a parent directory: no dependency, no drift */
#define JR_CUT          0x04  /* J_TXN_END of a starter's own writes, cut at a child's start:
                                 its other threads may write on through descriptors they opened */
#define JR_HELD         0x08  /* J_TXN_END of a starter's own writes with PATH (and no STATUS):
                                 a regular file it holds open for writing as it is cut, which
                                 it may write on through (its paths have no settle time) */
#define JR_INODE_XATTRS 0x02  /* J_REMOVE with INODE: the xattrs are the kept inode's own
                                 (written only in sessions with JI_INODE_XATTRS) */
#define JR_RANGE        0x10  /* J_CONTENT of a part of the file, from F_OFFSET (JI_RANGES) */

/* Field tags. */
enum jtag {
	F_PATH   = 1,  /* bytes: absolute path, no NUL */
	F_PATH2  = 2,  /* bytes: second absolute path (rename target) */
	F_ARGV   = 3,  /* bytes: NUL-terminated strings, one after another */
	F_CWD    = 4,  /* bytes */
	F_PID    = 5,  /* u32 */
	F_PPID   = 6,  /* u32 */
	F_UID    = 7,  /* u32 */
	F_STAT   = 8,  /* struct jstat */
	F_DATA   = 9,  /* struct jdata header then the (compressed) bytes */
	F_OBJECT = 10, /* struct jdata header only: the bytes are in objects/D/SEQ.gz */
	F_INODE  = 11, /* u64 dev, u64 ino: the inode kept as objects/D/SEQ.ino */
	F_TARGET = 12, /* bytes: symlink target */
	F_XATTRS = 13, /* repeated { u16 namelen, u32 vallen, name, value } */
	F_FLAGS  = 14, /* u32 */
	F_STATUS = 15, /* i32: wait(2) status */
	F_OP     = 16, /* bytes: operation name, e.g. "unlink", "exec" */
	F_RULE   = 17, /* bytes: the rule that refused, and why */
	F_ERRNO  = 18, /* i32 */
	F_SEQREF = 19, /* u64 */
	F_HOST   = 20, /* bytes */
	F_POLICY = 21, /* bytes: hash of the policy in force */
	F_OFFSET = 22, /* u64: where a JR_RANGE J_CONTENT's bytes start in the file */
	F_TAG_MAX = 22
};

/* F_STAT: the metadata a rewind restores, fixed layout, 80 bytes. */
struct jstat {
	uint64_t dev, ino, rdev, size;
	uint32_t mode, uid, gid, nlink;
	int64_t  atime_ns, mtime_ns, ctime_ns;
	uint64_t blocks;               /* 512-byte blocks: tells sparse files apart */
};

/* F_DATA / F_OBJECT header, 48 bytes; F_DATA's bytes follow it. */
#define JD_STORED 0     /* the bytes as they were */
#define JD_ZLIB   1     /* zlib stream (F_DATA) */
#define JD_GZIP   2     /* gzip file (F_OBJECT) */
struct jdata {
	uint32_t method;
	uint32_t reserved;
	uint64_t size;                 /* uncompressed size */
	uint8_t  hash[32];             /* BLAKE2b-256 of the uncompressed bytes */
};

#endif
