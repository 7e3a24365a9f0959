/*
 * journal.h - the journal library: writing (session, segment, records,
 * capture of pre-images), reading, undo and rewind. The format is in
 * format.h. The library depends on nothing of ours; it uses zlib and
 * libsodium (BLAKE2b), linked statically into the shim.
 *
 * The writing half (session.c, writer.c, capture.c) runs inside hooked host
 * processes: it never calls malloc or stdio, takes no lock across processes,
 * and reports failures as a negative errno. It calls libc by its public names;
 * the shim's re-entrancy guard passes such nested calls straight through.
 * The reading half (reader.c, undo.c, rewind.c) runs in txreplay and may
 * allocate.
 */
#ifndef FTSBX_JOURNAL_H
#define FTSBX_JOURNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "format.h"

/* ---- sessions ------------------------------------------------------- */

#define JS_DURABLE 0x1  /* fsync every record and object: survive power loss */

struct jsession {
	int dirfd;                     /* SESSION/ (O_CLOEXEC) */
	int logfd, objfd;              /* log/, objects/: -1 until jsession_logfd/_objfd */
	uint64_t *ctr;                 /* the seq file, mapped shared */
	uint8_t salt[J_SALT_LEN];
	uint32_t seed;                 /* crc32c seed derived from the salt */
	uint32_t features;             /* JI_* of the session file's header */
	unsigned flags;                /* JS_* */
	pthread_mutex_t *locks;        /* the path locks (locks.c), or NULL */
	struct jlane *lanes;           /* the shared segments' table (locks.c), or NULL */
	bool objdev_known;             /* objdev is objects/' device (capture.c, at its first need) */
	dev_t objdev;
	uint64_t dirs_taken;           /* the last subdirectory of objects/ taken by a removed directory */
};

/* What the session file records about its creator. */
struct jsession_info {
	char *const *argv;             /* may be NULL */
	const char *cwd;               /* may be NULL */
	const char *policy;            /* policy hash, may be NULL */
	uint32_t without;              /* JI_* left off JI_NEW: tests of older layouts */
};

/* Open the session in DIR, creating it (and DIR) atomically when absent and
 * INFO is not NULL. Concurrent creators agree on one session. Returns 0 or
 * -errno; -EPROTO when DIR holds something that is not a session of ours,
 * -EPROTONOSUPPORT for another format version. */
int  jsession_open(struct jsession *s, const char *dir, const struct jsession_info *info);
void jsession_close(struct jsession *s);
/* log/ and objects/, opened at the first need (and made, in a JI_LAZYDIRS
 * session: format.h), then kept: the descriptor, or -errno (-EIO: a
 * directory the session made is gone). Thread-safe. Not in a vfork child:
 * the descriptor would be the child's, in memory the parent keeps. */
int  jsession_logfd(struct jsession *s);
int  jsession_objfd(struct jsession *s);
/* The default session directory (when FTSBX_JOURNAL is unset):
 * XDG_STATE/ftsbx/sessions/YYYYmmdd-HHMMSS-PID, XDG_STATE defaulting to
 * HOME/.local/state. The caller passes the two variables. */
void jsession_default_dir(char *out, size_t n, const char *xdg_state, const char *home);
/* Make the session survive power loss: fsync its files, its directories and
 * its entry in the parent directory (creation itself does no fsync; a
 * durable session calls this before its first change). 0 or -errno. */
int  jsession_sync(struct jsession *s);
/* The name of the object of SEQ with extension EXT ("ino", "gz") relative
 * to objects/, in the layout FEATURES say (format.h): "D/SEQ.EXT", or
 * "SEQ.EXT" without JI_OBJDIRS. Returns the length of its directory part,
 * slash included (0: none). No snprintf: it is on the path of every unlink. */
#define JOBJ_NAME_MAX 48
size_t jobject_name(char out[JOBJ_NAME_MAX], uint32_t features, uint64_t seq, const char *ext);
/* V in decimal at OUT (no NUL; at most 20 bytes), without snprintf (for
 * paths in a fork or vfork child); returns its length. */
size_t jdecimal(char *out, uint64_t v);
/* The name of objects/' subdirectory D (JI_OBJDIRS), relative to objects/. */
void jobject_dir(char out[JOBJ_NAME_MAX], uint64_t d);
/* SESSION/shared (JI_SHARED) keeps the compiled policy of one root (the
 * first to claim it), so that a session's root creates no file for it: its
 * bytes at jshared_size(), at most JL_POLICY_MAX of them; the owner (the
 * root's pid, with JL_POLICY_CLAIMED) and the length on the counters' page,
 * at byte JL_POLICY_SLOT. The length is stored last: 0 until the bytes are
 * there. jshared_policy_put claims the place and writes the bytes: 0, or
 * -EBUSY (another root has it), -EFBIG, -ENOTSUP (an older session), -errno. */
struct jpolicy_slot { uint64_t owner, len; };
#define JL_DIRS_MADE      32      /* u32: JL_MADE_LOG, JL_MADE_OBJECTS (JI_LAZYDIRS) */
#define J_CTR_TURNS       5       /* ctr[5], byte 40: claims of a path another txn recorded last (dedup.c) */
#define JL_MADE_LOG       1u
#define JL_MADE_OBJECTS   2u
#define JL_FETCH_PIPES_AT 48      /* pipes fetchers write (format.h) */
#define JL_RUN_PIPES_AT   144     /* pipes interpreters read their program from */
#define JL_PIPE_SLOTS     12
#define JL_PIPES_NEXT     240     /* u32 each: the next slot of the two tables (a ring, format.h) */
#define JL_REWINDS_AT     248     /* u64: rewinds that undid something (dedup.c, format.h) */
#define JL_POLICY_SLOT    256
#define JL_REFUSED_AT     272     /* the slots of transactions with a refusal (format.h) */
#define JL_REFUSED_SLOTS  60
#define JL_RELEASED_AT    512     /* the released transactions' slots (txn.c, format.h) */
#define JL_RELEASED_SLOTS 896
#define JL_ENDED          0x80000000u   /* a slot's mark of a transaction that ended (format.h) */
#define JL_POLICY_MAX     (128u << 10)
#define JL_POLICY_CLAIMED (1ull << 63)
size_t jshared_size(void);
int  jshared_policy_put(struct jsession *s, uint32_t root, const void *p, size_t n);
/* Free the session's reserved space (for rewind marks on a full disk). */
int  jsession_release_reserve(struct jsession *s);
/* Fresh numbers from the shared counters. */
uint64_t jsession_next_seq(struct jsession *s);
uint32_t jsession_next_txn(struct jsession *s);

/* Path locks (locks.c): held from a capture until its change is made, so
 * that the records of one path are in the order of its changes. */
#define JL_STRIPES 1024
/* Shared segments (writer.c): log/lane-K.ftj, each written by one process
 * at a time; the table of their owners follows the path locks in the locks
 * file (format.h). */
#define JL_LANES 256
struct jlane {
	uint64_t owner;                /* pid namespace << 32 | pid of its writer; 0: free */
	uint64_t end;                  /* its length after the owner's last record */
	uint32_t state;                /* JL_NONE, JL_OPEN or JL_BROKEN */
	uint32_t pad[3];
};
enum { JL_NONE, JL_OPEN, JL_BROKEN };
/* where the lanes' table starts in the locks file's layout (after the mutexes) */
#define JL_MUTEX_SIZE (JL_STRIPES * sizeof(pthread_mutex_t))
#define JL_LANES_OFF  ((JL_MUTEX_SIZE + 4095) & ~(size_t)4095)
/* where lane K's entry is in its file: SESSION/shared (JI_SHARED: after the
 * counters' page) or SESSION/locks */
#define JL_LANE_AT(shared, k) (((shared) ? J_SEQ_FILE_SIZE : 0) + JL_LANES_OFF + (size_t)(k) * sizeof(struct jlane))
#define JL_MAX 4
struct jlockset {
	struct jsession *s;
	int n;
	unsigned stripe[JL_MAX];
};
/* Lock the stripes of A and B (either may be NULL) and of their parents. */
void jlock_paths(struct jsession *s, struct jlockset *l, const char *a, const char *b);
void junlock(struct jlockset *l);

/* ---- records -------------------------------------------------------- */

/* A record under construction, in a caller-supplied buffer (no malloc). */
struct jbuild {
	uint8_t *buf;
	size_t cap, len;
	uint16_t nfields;
	bool overflow;
};

void jb_init(struct jbuild *b, void *buf, size_t cap, enum jtype type, unsigned flags, uint32_t txn);
void jb_bytes(struct jbuild *b, enum jtag tag, const void *p, size_t n);
void jb_str(struct jbuild *b, enum jtag tag, const char *s);
void jb_u32(struct jbuild *b, enum jtag tag, uint32_t v);
void jb_u64(struct jbuild *b, enum jtag tag, uint64_t v);
void jb_argv(struct jbuild *b, enum jtag tag, char *const *argv);
/* Reserve N bytes of a field's value; returns where to write them, or NULL. */
void *jb_reserve(struct jbuild *b, enum jtag tag, size_t n);
/* Shrink the last field (after jb_reserve) to N bytes. */
void jb_trim_last(struct jbuild *b, size_t n);

/* ---- segments ------------------------------------------------------- */

struct jseg {
	struct jsession *s;
	int fd;
	pid_t pid;
	uint8_t link[J_LINK_LEN];
	pthread_mutex_t lock;          /* in-process only: orders seq, chain and write */
	uint64_t first_seq;
	uint64_t end;                  /* bytes written: where the next record goes */
	int lane;                      /* the shared segment it writes, -1: a file of its own */
	uint64_t owner;                /* its owner word in the lanes' table */
	uint32_t nrec;                 /* records appended since it was opened */
	bool nomap;                    /* a window could not be mapped: write(2) from now on */
	uint8_t *map;                  /* a lane's mapped window (writer.c), or NULL */
	uint64_t map_off;              /* the file offset of map[0] */
	size_t map_len;
};

/* Take a free shared segment (log/lane-K.ftj), or create this process's
 * own (log/SEQ-PID.ftj) when none is free, and write its J_SEGMENT record
 * (this process's runs of records in a shared segment each begin with one).
 * ARGV may be NULL. jseg_close gives a shared segment back when this
 * process holds it (not in a fork child that inherited it): call it before
 * an exec, since the new program knows nothing of it; a process that dies
 * holding one leaves it to the next taker, who checks its length. */
int  jseg_open(struct jseg *g, struct jsession *s, char *const *argv);
/* Find this process's pid namespace for the lanes' owners (PID: its pid)
 * now, before it forks: each fork child that writes takes it from here
 * instead of looking at /proc/self, which costs a new process some 50 us. */
void jseg_owner_warm(pid_t pid);
/* In a fork child, at once (SELF: its pid): the parent's, checked. */
void jseg_owner_forked(pid_t self);
void jseg_close(struct jseg *g);
/* Stamp B with a fresh seq and the time, frame it, chain it, append it (and
 * fsync when durable). On success *SEQ (if not NULL) is its seq. A record
 * that could not be written whole is never left readable as valid. */
int  jseg_append(struct jseg *g, struct jbuild *b, uint64_t *seq);
/* The same with the seq taken beforehand (capture.c names objects by it). */
int  jseg_append_seq(struct jseg *g, struct jbuild *b, uint64_t seq);
/* Append B with SEQ, then make the change it undoes, CHANGE(ARG) (0 or
 * -errno), before any other record of this process can follow it. When
 * the change fails, the record is cut off again as if never written (SEQ
 * stays unused: a legal gap) and CHANGE's error returned. *KEPT: the record
 * is in the segment (the change made, or the cut failed: then the change
 * was not made and the record's undo finds its pre-image in place, as it
 * does after a process killed between the two). */
int  jseg_append_then(struct jseg *g, struct jbuild *b, uint64_t seq, int (*change)(void *arg), void *arg,
		      bool *kept);

/* ---- capture: save the pre-image before a change --------------------- */

/* Each takes an absolute, normalised path and writes the undo record for the
 * change about to happen. 0 on success, or -errno (nothing may change then). */
int jcap_create(struct jseg *g, uint32_t txn, const char *path);
int jcap_content(struct jseg *g, uint32_t txn, const char *path);
int jcap_append(struct jseg *g, uint32_t txn, const char *path);
/* The part of the regular file PATH a write is about to change: OFF, LEN
 * in. A J_CONTENT of those bytes (JR_RANGE: fewer where the file ends,
 * none from its end on) unless the whole file is already this
 * transaction's; SAVED says whether it was written, and OFF, LEN and SIZE
 * (the file's) out say what it holds. -ENOTSUP: the session has no
 * JI_RANGES (save the whole file). */
struct jrange {
	uint64_t off, len, size;
	bool saved;
	bool whole;             /* the caller's own: it saved the whole file instead */
};
int jcap_range(struct jseg *g, uint32_t txn, const char *path, struct jrange *want);
/* The name (relative to the session) that objects/ keeps the removed
 * inode DEV:INO by, as the pre-image of its removal (objects/D/S.ino),
 * looked for from the newest subdirectory back: 0, or -ENOENT. */
int jkept_object(struct jsession *s, dev_t dev, ino_t ino, char out[PATH_MAX]);
int jcap_remove(struct jseg *g, uint32_t txn, const char *path);
/* The same, with a copy of a regular file's bytes in the record, never its
 * inode: the file lives on where no change is journaled (renamed into an
 * untracked cache), and a kept inode would change with it. */
int jcap_remove_copy(struct jseg *g, uint32_t txn, const char *path);
/* The same, with the program's own DIRFD and NAME for the system calls when
 * NAME is one component (PATH is what the record keeps). */
int jcap_removeat(struct jseg *g, uint32_t txn, const char *path, int dirfd, const char *name, bool keep);
/* An unlink (unlinkat without AT_REMOVEDIR, remove()) of NAME relative to
 * DIRFD, the program's own arguments: a regular file may be removed here
 * and now, after its record (renamed into objects/, capture.c); JCAP_DONE
 * then, and the program's call must not be made. 0: the program's call
 * goes on (the record written, or nothing to keep: it fails). */
#define JCAP_DONE 1
/* jcap_removeat's KEEP: a directory filled while the journal was taking
 * it, which could not be put back (its name was taken meanwhile): it is in
 * objects/, and the program's call must fail with ENOTEMPTY. */
#define JCAP_NOTEMPTY 2
int jcap_unlinkat(struct jseg *g, uint32_t txn, const char *path, int dirfd, const char *name);
/* *DIRS: a directory or a symlink may change its name (the lookup of other
 * paths may change); true when that cannot be ruled out. */
int jcap_rename(struct jseg *g, uint32_t txn, const char *from, const char *to, unsigned flags,
		bool *dirs);
int jcap_meta(struct jseg *g, uint32_t txn, const char *path, bool weak);
/* The weak J_META of PATH's directory alone (its times), once per
 * transaction: an entry that is not journaled itself (an untracked one) is
 * added, removed or renamed in a directory that is. */
int jcap_parent_meta(struct jseg *g, uint32_t txn, const char *path);
/* The change about to happen to PATH: the right record for its current state
 * (J_CREATE when absent). */
enum jcap_op { JC_WRITE, JC_TRUNC, JC_APPEND, JC_REMOVE, JC_META,
	       JC_RANGE };      /* a write of a part (jcap_range; elsewhere as JC_WRITE) */
/* Read the pre-images of this thread's next captures through FD where it
 * is the file captured, not through an open of its path, whose close would
 * drop the process's POSIX record locks on it; READER (NULL: FD reads)
 * gives a readable descriptor of FD's file not to be closed, or -1 (the
 * path is opened then), and is asked only when bytes are read. FD -1: open
 * the path again. */
void jcap_read_through(int fd, int (*reader)(int fd));
/* This thread's next JC_TRUNC captures are of a cut (truncate,
 * ftruncate) to LEN bytes: a regular file no longer than LEN, as the
 * capture finds it under its path's lock, needs only its size (J_APPEND).
 * JCUT_ANY (the default, which the caller sets again after): any. */
#define JCUT_ANY UINT64_MAX
void jcap_cut_to(uint64_t len);
/* The size the J_APPEND of this thread's last such capture saved since
 * jcap_cut_to, or JCUT_ANY (none written: its content, or nothing). */
uint64_t jcap_cut_sized(void);
int jcap_path(struct jseg *g, uint32_t txn, const char *path, enum jcap_op op);
/* The same, KNOWN being PATH's lstat just taken (st_mode 0: absent). */
int jcap_path_known(struct jseg *g, uint32_t txn, const char *path, enum jcap_op op,
		    const struct stat *known);

/* Transaction TXN ended while processes of it may live on (a job left
 * running): their next change of each path is captured afresh (its key
 * marked late), so that it leaves a record after the end, which is what
 * rewind's drift check goes by. The mark is TXN | JL_ENDED in its slot of
 * the released table: a later transaction on the same slot takes it away,
 * and its late changes then go by the records before the end (a drift
 * report at worst, never a change unjournaled). jtxn_late: marked. */
void jcap_txn_ended(struct jsession *s, uint32_t txn);
static inline bool jtxn_late(const struct jsession *s, uint32_t txn)
{
	return s->ctr && __atomic_load_n((const uint32_t *)(const void *)((const char *)s->ctr + JL_RELEASED_AT) +
					 txn % JL_RELEASED_SLOTS, __ATOMIC_ACQUIRE) == (txn | JL_ENDED);
}

/* ---- reading ---------------------------------------------------------- */

struct jfield { const uint8_t *p; uint32_t n; bool present; };

struct jrecord {
	uint8_t type, flags;
	uint32_t txn;
	uint64_t seq;
	int64_t time_ns;
	uint32_t pid, ppid;            /* of the segment that holds it */
	const char *segment;           /* segment file name */
	uint64_t offset;               /* of the frame in that file */
	const uint8_t *body;
	uint32_t len;
	struct jfield f[F_TAG_MAX + 1];
};

struct jdamage {
	char *file;                    /* name relative to the session */
	uint64_t offset;
	char *what;
	bool tail;                     /* a torn tail: what follows is unreadable */
};

struct jreader {
	char *dir;
	int dirfd;
	uint32_t features;             /* JI_* of the session */
	struct jrecord session;        /* the session file's record */
	struct jrecord *rec;           /* every intact record, sorted by seq */
	size_t nrec, caprec;
	struct jdamage *dmg;
	size_t ndmg;
	char **heads;                  /* "SEGMENT HEX" chain heads, one per segment */
	size_t nheads;
	void **maps; size_t *maplens; size_t nmaps;
};

/* Read DIR. Returns 0 with every intact record, damage listed in r->dmg, or
 * -errno with a message in ERR (missing, not a journal, newer version). */
int  jreader_open(struct jreader *r, const char *dir, char *err, size_t errlen);
void jreader_close(struct jreader *r);
const struct jrecord *jreader_find(const struct jreader *r, uint64_t seq);
/* The object of record SEQ with extension EXT, relative to the session
 * directory (r->dirfd): "objects/D/SEQ.EXT" or, in an older session,
 * "objects/SEQ.EXT". */
#define JOBJ_PATH_MAX (JOBJ_NAME_MAX + 8)
void jreader_object(const struct jreader *r, uint64_t seq, const char *ext, char out[JOBJ_PATH_MAX]);
/* Field accessors: false when absent or malformed. */
bool jrec_u32(const struct jrecord *c, enum jtag t, uint32_t *v);
bool jrec_u64(const struct jrecord *c, enum jtag t, uint64_t *v);
bool jrec_stat(const struct jrecord *c, enum jtag t, struct jstat *st);
/* A NUL-terminated copy of a byte field (malloc'd; NULL when absent). */
char *jrec_strdup(const struct jrecord *c, enum jtag t);
const char *jtype_name(unsigned type);

/* Write the pre-image bytes of C (F_DATA or F_OBJECT) to FD; checks the hash.
 * 0, or -errno (-EBADMSG: damaged) with a message in ERR. */
int  jrec_content(const struct jreader *r, const struct jrecord *c, int fd, char *err, size_t errlen);

/* ---- undo and rewind -------------------------------------------------- */

#define JW_DRY_RUN 0x1  /* say what would be done, change nothing */
#define JW_FORCE   0x2  /* undo even over drift */
#define JW_CASCADE 0x4  /* also rewind later transactions that depend */

struct jrewind_opts {
	unsigned flags;
	uint32_t txn;                  /* rewind this transaction (0: see to_seq) */
	uint64_t to_seq;               /* else rewind every record after this seq */
	/* called for each line of the report; level 0 info, 1 warning, 2 error */
	void (*say)(void *ctx, int level, const char *msg);
	void *ctx;
};

struct jrewind_stats { size_t undone, skipped, drift, failed, already; };

/* Rewind: select, check dependencies and drift, undo in decreasing seq,
 * mark each undone record. Returns 0 when everything selected is undone,
 * 1 when something was refused or failed (reported through say), -errno on
 * an error that stopped it early. */
int jrewind(const char *dir, const struct jrewind_opts *o, struct jrewind_stats *st);

/* Undo one record against the filesystem (idempotent). 0 done, 1 already in
 * the pre-image state, -errno on failure with a message in MSG. */
int jundo(const struct jreader *r, const struct jrecord *c, char *msg, size_t msglen);
/* What a rewind knows beyond one record, for jundo_hinted. A regular
 * file's pre-image on another filesystem than the journal's is a copy (no
 * hard link could keep its inode): its undo brings it back as a new inode.
 * ALIAS (dev, ino; ino 0: none): that new inode, where a J_RENAME finds
 * the file it moved. OTHER_NAME (NULL: none): a path, into OUT, that holds
 * the inode a removed file with other hard links (J: its metadata) was, or
 * the new one it came back as; false when none does. WAY (NULL: none):
 * the directory the last undo found no symlink on the way to, kept by the
 * caller for one rewind (an undo only ever brings a symlink back where no
 * record before it has a path through: the journal's paths are resolved). */
struct jundo_way {
	size_t len;
	char dir[PATH_MAX];
};
struct jundo_hints {
	uint64_t alias[2];
	bool (*other_name)(void *ctx, const struct jstat *j, char out[PATH_MAX]);
	void *ctx;
	struct jundo_way *way;
};
int jundo_hinted(const struct jreader *r, const struct jrecord *c, const struct jundo_hints *h, char *msg,
		 size_t msglen);

/* ---- helpers shared by both halves ------------------------------------ */

uint32_t jcrc32c(uint32_t crc, const void *p, size_t n);
void jhash(uint8_t out[32], const void *a, size_t an, const void *b, size_t bn);
void jstat_from(struct jstat *j, const struct stat *st);
int64_t jnow_ns(void);

#endif
