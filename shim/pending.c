/*
 * pending.c - an in-place write's pre-image, taken at the first write.
 *
 * An open that may write a file in place (O_RDWR or O_WRONLY, neither
 * O_TRUNC nor a write-only O_APPEND) needs the whole file as its pre-image,
 * and most such opens write nothing: sqlite opens its database O_RDWR for
 * every SELECT, flock(1) and lockfile users open to lock, editors and
 * package tools open to read a header. The open is judged as before (the
 * policy's verdict cannot wait), but the capture waits: the descriptor is
 * marked pending here, and the first call that can change the file through
 * it takes the pre-image, in the transaction it runs in. A pending file that
 * is never written costs an fstat.
 *
 * What writes through a descriptor, and so takes the pre-image first:
 * write, pwrite, writev, pwritev(2), sendfile, splice, copy_file_range,
 * a writable shared mapping (mapped.c: a read-only one when mprotect
 * makes it writable), ftruncate and fallocate (hooks.def), FICLONE into it (ioctl),
 * POSIX AIO, and syscall() of each; io_submit takes every pending file. The
 * C library writes some descriptors past every hook (stdio's internal
 * write): a stream made on one (fdopen for writing, dprintf) takes it first,
 * and a pending descriptor that becomes 1 or 2 (stdout's, stderr's) is
 * taken at once. A descriptor may leave this memory: one sent in SCM_RIGHTS, and
 * those a program starts with (exec keeps the ones without FD_CLOEXEC;
 * posix_spawn's file actions, and vfork's child, can keep any) are taken
 * before; a vfork becomes a fork while any is pending, so that the child
 * has a table of its own. A descriptor above PEND_N, or opened where this
 * memory cannot follow it (a vfork child, a table shared with another
 * memory), is taken at the open, as every one was before.
 *
 * Each entry keeps the file's device and inode: a descriptor closed past
 * the hooks and reused for another file is found out by an fstat, and
 * forgotten. A capture that fails (the journal cannot be written) refuses
 * the write, and the descriptor stays pending.
 */
#include <aio.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include "shim.h"

#define PEND_N 1024

/* The marks, a bit per descriptor: every write looks at one word, on the
 * page of small variables every process touches anyway. Each mark's file,
 * looked at only by a capture, is among the large arrays (layout.ld). */
static uint64_t pend_bits[PEND_N / 64];
static struct {
	dev_t dev;
	ino_t ino;
	bool append;            /* O_APPEND: every write lands at the end */
	uint64_t named;         /* the copy-on-write generation its cached name was last checked at, + 1 */
} pend_id[PEND_N];
static unsigned pend_n;         /* how many are marked */
static unsigned pend_hi;        /* no fd at or above it is marked */

static inline bool pend_has(int fd)
{
	return (unsigned)fd < PEND_N && (__atomic_load_n(&pend_bits[(unsigned)fd / 64], __ATOMIC_ACQUIRE) >>
					 ((unsigned)fd % 64)) & 1;
}

/* A descriptor that can stay pending: not stdout's or stderr's (their
 * streams write past the hooks), not above the table. */
static bool pend_markable(int fd)
{
	return (fd == 0 || fd > 2) && fd < PEND_N;
}

HIDDEN bool pend_has_fd(int fd)
{
	return pend_has(fd);
}

HIDDEN bool pend_any(void)
{
	return __atomic_load_n(&pend_n, __ATOMIC_ACQUIRE) != 0;
}

static inline uint64_t bit(int fd)
{
	return 1ull << ((unsigned)fd % 64);
}

static void pend_set(int fd, dev_t dev, ino_t ino, bool append)
{
	unsigned hi = __atomic_load_n(&pend_hi, __ATOMIC_RELAXED);

	pend_id[fd].dev = dev;
	pend_id[fd].ino = ino;
	pend_id[fd].append = append;
	pend_id[fd].named = 0;
	while ((unsigned)fd >= hi &&
	       !__atomic_compare_exchange_n(&pend_hi, &hi, (unsigned)fd + 1, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	if (!(__atomic_fetch_or(&pend_bits[fd / 64], bit(fd), __ATOMIC_ACQ_REL) & bit(fd)))
		__atomic_add_fetch(&pend_n, 1, __ATOMIC_RELEASE);
}

static void pend_clear(int fd)
{
	if (__atomic_fetch_and(&pend_bits[fd / 64], ~bit(fd), __ATOMIC_ACQ_REL) & bit(fd))
		__atomic_sub_fetch(&pend_n, 1, __ATOMIC_RELEASE);
}

/* FD's file's name (ST its fstat) for its lock: the cached one, checked
 * against the inode (and read afresh) when a rename or a removal in the
 * session came since the last check (the copy-on-write generation). */
HIDDEN bool pend_named(int fd, const struct stat *st, char p[PATH_MAX])
{
	uint64_t gen = shim.session_open ? __atomic_load_n(&shim.s.ctr[2], __ATOMIC_ACQUIRE) + 1 : 0;

	if ((unsigned)fd >= PEND_N || path_fd(p, fd))
		return false;
	if (gen && pend_id[fd].named == gen)
		return true;
	if (fd_name_now(p, fd, st))
		return false;
	pend_id[fd].named = gen;
	return true;
}

/* fcntl(F_SETFL) of FD: whether its writes land at the end. */
HIDDEN void pend_setfl(int fd, int newfl)
{
	if (pend_has(fd))
		pend_id[fd].append = newfl & O_APPEND;
}

/* FD is closed or replaced (after the call did it). Not where another
 * table shares this memory (a vfork child; a clone or thread with a table
 * of its own, for which the descriptor cache is distrusted): the number
 * may be open there still. A mark left behind is found out by its fstat. */
HIDDEN void pend_drop(int fd)
{
	if (pend_has(fd) && !txn_vfork_child() && !fdcache_distrusted())
		pend_clear(fd);
}

HIDDEN void pend_drop_range(unsigned lo, unsigned hi)
{
	unsigned top = __atomic_load_n(&pend_hi, __ATOMIC_ACQUIRE);

	if (!pend_any() || txn_vfork_child() || fdcache_distrusted())
		return;
	for (unsigned fd = lo; fd <= hi && fd < top; fd++)
		if (pend_has((int)fd))
			pend_clear((int)fd);
}

/* The read descriptor a capture through FD reads the pre-image from
 * (jcap_read_through): FD itself where it reads; for a write-only one, or
 * one opened O_DIRECT (whose reads must be aligned to the device's blocks,
 * which a file's last bytes are not: EINVAL), a
 * read-only descriptor of the same file, kept open (parked) until FD is
 * closed, since its close would drop the process's POSIX locks on the
 * file as an open and close of the path would. -1: none (the capture opens
 * the path). */
static int park[PEND_N];        /* the parked descriptor + 1, by FD */
static struct { dev_t dev; ino_t ino; } park_id[PEND_N];       /* its file: a number the program closed
								   and reused is not closed again */
static bool parked_any;
HIDDEN int park_lock_word;      /* free in a fork child (state.c) */

/* A read-only description of FD's file of its own (parked until FD is
 * closed), or -1. */
static int pend_parked(int fd)
{
	char proc[32];
	struct stat a, b;
	int r;

	if ((unsigned)fd >= PEND_N || txn_vfork_child())
		return -1;
	/* one thread parks at a time: a second reader opened at once and
	 * closed again would drop the process's POSIX locks on the file */
	shim_spin(&park_lock_word);
	r = park[fd] - 1;
	if (r >= 0 && fstat(r, &a) == 0 && fstat(fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
		shim_unspin(&park_lock_word);
		return r;
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	r = open(proc, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (r >= 0) {
		if (fstat(r, &a) < 0 && fstat(fd, &a) < 0)
			a.st_dev = 0, a.st_ino = 0;
		park_id[fd].dev = a.st_dev;
		park_id[fd].ino = a.st_ino;
		park[fd] = r + 1;
		__atomic_store_n(&parked_any, true, __ATOMIC_RELAXED);
	}
	shim_unspin(&park_lock_word);
	return r;
}

HIDDEN int pend_reader(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -1;
	if ((fl & O_ACCMODE) != O_WRONLY && !(fl & O_DIRECT))
		return fd;
	return pend_parked(fd);
}

/* FD is closed or replaced (after the call): its parked reader goes. */
HIDDEN void pend_unpark(unsigned lo, unsigned hi)
{
	if (txn_vfork_child() || !__atomic_load_n(&parked_any, __ATOMIC_RELAXED))
		return;
	for (unsigned fd = lo; fd <= hi && fd < PEND_N; fd++)
		if (park[fd]) {
			struct stat st;
			int r = park[fd] - 1;
			park[fd] = 0;
			if (fstat(r, &st) == 0 && st.st_dev == park_id[fd].dev && st.st_ino == park_id[fd].ino)
				REAL(close)(r);
		}
}

/* Inside a hook: take FD's pre-image if it is pending. 0, or the errno
 * that refuses the write (FD stays pending). The path locks the capture
 * took stay held for the caller's real call (shim_unlock after). */
/* FD's file (ST) while FD is pending: an fstat finds out a number closed
 * past the hooks and reused for another file, whose mark goes. */
static bool pend_stat(int fd, struct stat *st)
{
	if (!pend_has(fd) || txn_vfork_child())
		return false;
	if (fstat(fd, st) < 0 || st->st_dev != pend_id[fd].dev || st->st_ino != pend_id[fd].ino) {
		pend_clear(fd);
		return false;
	}
	return true;
}

/* FD's whole file (ST) is saved: nothing more to wait for, through it or
 * its mappings. */
static void pend_done(int fd, const struct stat *st)
{
	pend_clear(fd);
	mapped_forget(st->st_dev, st->st_ino);
}

static int pend_take_whole(int fd, const struct stat *st)
{
	int err = pre_fd_pending(fd, st);

	if (!err)
		pend_done(fd, st);
	return err;
}

HIDDEN int pend_take(int fd)
{
	struct stat st;

	return pend_stat(fd, &st) ? pend_take_whole(fd, &st) : 0;
}

/* Inside a hook: take this process's pending descriptors of the file
 * DEV:INO. 0 (none, or taken) or the errno of a refusal; *FOUND: one was. */
HIDDEN int pend_take_id(dev_t dev, ino_t ino, bool *found)
{
	unsigned top = __atomic_load_n(&pend_hi, __ATOMIC_ACQUIRE);
	int err = 0;

	*found = false;
	for (unsigned fd = 0; fd < top && !err && pend_any(); fd++)
		if (pend_has((int)fd) && pend_id[fd].dev == dev && pend_id[fd].ino == ino) {
			*found = true;
			err = pend_take((int)fd);
			shim_unlock();
		}
	return err;
}

/* FD's file, marked pending (mapped.c's read-only mappings) */
HIDDEN bool pend_id_of(int fd, dev_t *dev, ino_t *ino)
{
	if (!pend_has(fd))
		return false;
	*dev = pend_id[fd].dev;
	*ino = pend_id[fd].ino;
	return true;
}

/* Inside a hook, before PATH is removed or replaced: this process's
 * pending descriptors of its file are taken while it still has its name
 * (the removal may keep the inode itself as its pre-image, which a write
 * through them would then change). 0 or the errno of a refusal. */
HIDDEN int pend_take_inode(const char *path)
{
	struct stat st;
	bool found;

	if (!pend_any() || txn_vfork_child() || lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
		return 0;
	return pend_take_id(st.st_dev, st.st_ino, &found);
}

/* Inside a hook: take every pending descriptor, or (INHERITED) those an
 * exec keeps. 0 or the first errno; the locks are released. */
HIDDEN int pend_take_all(bool inherited)
{
	unsigned top = __atomic_load_n(&pend_hi, __ATOMIC_ACQUIRE);
	int err = 0;

	for (unsigned fd = 0; fd < top && pend_any() && !err; fd++) {
		if (!pend_has((int)fd))
			continue;
		if (inherited) {
			int fl = fcntl((int)fd, F_GETFD);
			if (fl >= 0 && (fl & FD_CLOEXEC))
				continue;
		}
		err = pend_take((int)fd);
		shim_unlock();
	}
	return err;
}

/* Outside a hook: pend_take_all's answer, said and refused as a hook
 * refuses (errno set), or 0. */
HIDDEN int pend_flush_all(bool inherited)
{
	struct hook_ctx c;
	int err;

	if (!pend_any() || !hook_enter(&c))
		return 0;
	if ((err = pend_take_all(inherited))) {
		hook_refuse(&c, err);
		return err;
	}
	hook_leave(&c);
	return 0;
}

/* ---- the parts of a large file ------------------------------------------ */

/* A write through a pending descriptor of a large file (above RANGE_MIN)
 * saves only the part it is about to change (jcap_range: a J_CONTENT of
 * those bytes), and the descriptor stays pending: each later write saves
 * what no earlier record of this process in the same transaction saved.
 * sqlite's UPDATE of one row in a 30 MB database wrote 30 MB of journal
 * when the first write saved the whole file. Undo goes in decreasing seq,
 * so each byte ends as the earliest record that saved it had it, whichever
 * process wrote that one; a record also covers everything from the file's
 * end then (undo cuts the file there). The parts saved are kept by file
 * (RF_N files, RF_SPANS disjoint spans each, merged where they touch) with
 * the transaction they were saved in; when it ends (a job left running
 * writes on) or a rewind undoes something, every file starts afresh.
 * Another transaction's record of the file in between starts nothing
 * afresh, as a whole file taken once is not taken again for a descriptor
 * another transaction wrote through too. A part that goes on where a span
 * ends grows (a sequential writer saves up to RANGE_RUN at once). Saved
 * whole, and no longer pending, as any other file: a file whose spans run
 * out, one a write changes half of or more, a sparse one (its holes would
 * come back filled), and a file in a session without JI_RANGES. */
#define RANGE_MIN  ((off_t)J_INLINE_MAX)
#define RANGE_PAGE 4096u
#define RANGE_RUN  (1u << 20)
#define RF_N       8
#define RF_SPANS   1024

struct rkey {
	uint8_t salt[J_SALT_LEN];
	uint32_t txn;
	bool late;
	uint64_t rewinds;
};
static struct rfile {
	dev_t dev;
	ino_t ino;
	struct rkey key;
	unsigned n;
	struct { uint64_t lo, hi; } span[RF_SPANS];    /* sorted, apart */
} rfile[RF_N];                  /* among the large arrays (layout.ld) */
static unsigned rfile_next;     /* the slot a new file takes */
HIDDEN int range_lock_word;     /* free in a fork child (state.c) */

/* Held for a few loads and stores, only inside a hook: a signal handler's
 * call, which the hook it interrupts lets through unhooked, never waits
 * for it (no signals blocked: two system calls a write saved). */
static void range_lock(void)
{
	shim_spin(&range_lock_word);
}

static void range_unlock(void)
{
	shim_unspin(&range_lock_word);
}

static bool rkey_now(struct rkey *k)
{
	if (!shim.session_open)
		return false;
	memset(k, 0, sizeof(*k));
	memcpy(k->salt, shim.s.salt, J_SALT_LEN);
	k->txn = shim_txn();
	k->late = jtxn_late(&shim.s, k->txn);
	k->rewinds = __atomic_load_n(&shim.s.ctr[JL_REWINDS_AT / 8], __ATOMIC_ACQUIRE);
	return true;
}

/* The file's spans, still valid at K; NEW: made (or started afresh) when not. */
static struct rfile *rfile_of(dev_t dev, ino_t ino, const struct rkey *k, bool make)
{
	struct rfile *f = NULL;

	for (unsigned i = 0; i < RF_N && !f; i++)
		if (rfile[i].n && rfile[i].dev == dev && rfile[i].ino == ino)
			f = &rfile[i];
	if (f && memcmp(&f->key, k, sizeof(*k)))
		f->n = 0;       /* saved in another transaction, or before a turn */
	if (!make)
		return f && f->n ? f : NULL;
	if (!f) {
		f = &rfile[rfile_next++ % RF_N];
		f->n = 0;       /* another file's, forgotten */
	}
	if (!f->n) {
		f->dev = dev;
		f->ino = ino;
		f->key = *k;
	}
	return f;
}

/* Is [LO, HI) inside one span of F? Else *RUN: where the span that ends
 * at LO begins (a sequential writer's), or LO. */
static bool rfile_covers(const struct rfile *f, uint64_t lo, uint64_t hi, uint64_t *run)
{
	unsigned a = 0, b = f ? f->n : 0;

	*run = lo;
	while (a < b) {                 /* a: the first span that starts after LO */
		unsigned m = a + (b - a) / 2;
		if (f->span[m].lo <= lo)
			a = m + 1;
		else
			b = m;
	}
	if (!a)
		return false;
	if (hi <= f->span[a - 1].hi)
		return true;
	if (f->span[a - 1].hi == lo)
		*run = f->span[a - 1].lo;
	return false;
}

/* Add [LO, HI) to F, merged with every span it touches. false: no room. */
static bool rfile_add(struct rfile *f, uint64_t lo, uint64_t hi)
{
	unsigned a = 0, b = f->n, e;

	while (a < b) {                 /* a: the first span that reaches LO */
		unsigned m = a + (b - a) / 2;
		if (f->span[m].hi < lo)
			a = m + 1;
		else
			b = m;
	}
	for (e = a; e < f->n && f->span[e].lo <= hi; e++)
		;                       /* [a, e): the spans it touches */
	if (a < e) {
		lo = f->span[a].lo < lo ? f->span[a].lo : lo;
		hi = f->span[e - 1].hi > hi ? f->span[e - 1].hi : hi;
	} else if (f->n == RF_SPANS) {
		return false;
	}
	memmove(&f->span[a + 1], &f->span[e], (f->n - e) * sizeof(f->span[0]));
	f->span[a].lo = lo;
	f->span[a].hi = hi;
	f->n = f->n - (e - a) + 1;
	return true;
}

/* Is [LO, HI) of ST's file, written through FD, saved by this process in
 * this transaction? Else *RUN: where the span that ends at LO begins, or
 * LO. */
static bool range_saved(const struct stat *st, uint64_t lo, uint64_t hi, uint64_t *run)
{
	struct rkey k;
	bool covered;

	*run = lo;
	if (!rkey_now(&k))
		return false;
	range_lock();
	covered = rfile_covers(rfile_of(st->st_dev, st->st_ino, &k, false), lo, hi, run);
	range_unlock();
	return covered;
}

/* [LO, HI) of ST's file is saved now (KEY: the transaction it was saved
 * in, as it was before the capture; or, unkeyed, now), and from END on
 * (the file's size then: undo cuts it there). false: no room left. */
static bool range_note(const struct stat *st, const struct rkey *key, uint64_t lo, uint64_t hi, uint64_t end)
{
	struct rkey now;
	struct rfile *f;
	bool ok;

	if (!key) {
		if (!rkey_now(&now))
			return true;
		key = &now;
	}
	range_lock();
	f = rfile_of(st->st_dev, st->st_ino, key, true);
	ok = (lo >= hi || rfile_add(f, lo, hi)) && rfile_add(f, end, UINT64_MAX);
	range_unlock();
	return ok;
}

/* Might [LO, HI) of FD's file (ST) hold a hole? Written back at a rewind,
 * it would come back filled. A file with all its blocks has none; one
 * without, asked of a description of its own (SEEK_HOLE moves the
 * offset it is asked of). */
static bool range_holed(int fd, const struct stat *st, uint64_t lo, uint64_t hi)
{
	uint64_t end = hi < (uint64_t)st->st_size ? hi : (uint64_t)st->st_size;
	int r;
	off_t h;

	if ((uint64_t)st->st_blocks * 512 >= (uint64_t)st->st_size || lo >= end)
		return false;
	if ((r = pend_parked(fd)) < 0)
		return true;
	h = lseek(r, (off_t)lo, SEEK_HOLE);
	return h < 0 ? errno != ENXIO : (uint64_t)h < end;
}

/* Does a write of LEN bytes at OFF to the file ST save a part of it? */
static bool range_fits(const struct stat *st, uint64_t len)
{
	return S_ISREG(st->st_mode) && st->st_size > RANGE_MIN && (!shim.session_open || (shim.s.features & JI_RANGES)) &&
	       len < (uint64_t)st->st_size / 2;
}

/* Inside a hook: a write of LEN bytes at OFF (-1: FD's offset) through FD
 * is about to happen. pend_take's, for the part it changes of a large
 * file. The path locks a capture took stay held (shim_unlock after). *AT:
 * where a write at FD's offset must be made (pwrite, then the offset moved
 * past it), the offset the part saved is of: another thread, or a process
 * sharing the descriptor, may move the offset meanwhile with no lock of
 * ours (lseek, read); -1: as the program asked. */
static int pend_take_range(int fd, off_t off, uint64_t len, off_t *at)
{
	struct stat st;
	struct rkey k;
	struct jrange want;
	uint64_t lo, hi, run;
	bool keyed;
	int err;

	if (!pend_stat(fd, &st))
		return 0;
	/* (an O_APPEND descriptor's bytes, pwrite's too, land at the end,
	 * which the record's size covers: what it saves at OFF is more than
	 * needed, never less) */
	*at = -1;
	if (off < 0 && pend_id[fd].append) {
		off = st.st_size;       /* lands at the end */
	} else if (off < 0) {
		shim_lock_fd(fd, &st);  /* no writer of ours moves the offset until the write */
		if ((off = lseek(fd, 0, SEEK_CUR)) < 0)
			return pend_take_whole(fd, &st);
		*at = off;
	}
	lo = (uint64_t)off & ~(uint64_t)(RANGE_PAGE - 1);
	hi = len > UINT64_MAX - (uint64_t)off - RANGE_PAGE ? UINT64_MAX
	     : ((uint64_t)off + len + RANGE_PAGE - 1) & ~(uint64_t)(RANGE_PAGE - 1);
	if (range_saved(&st, lo, hi, &run))
		return 0;
	if (!range_fits(&st, len) || range_holed(fd, &st, lo, hi)) {
		*at = -1;
		return pend_take_whole(fd, &st);
	}
	keyed = rkey_now(&k);
	want.off = lo;
	want.len = hi - lo;
	if (run < lo && hi - lo < RANGE_RUN) {  /* goes on from a span: save ahead */
		uint64_t ahead = lo - run < RANGE_RUN ? (lo - run > hi - lo ? lo - run : hi - lo) : RANGE_RUN;
		if (!range_holed(fd, &st, lo, lo + ahead))
			want.len = ahead;
	}
	err = pre_fd_range(fd, &st, &want);
	if (err)
		return err;
	if (want.whole) {               /* saved whole after all */
		*at = -1;
		pend_done(fd, &st);
		return 0;
	}
	/* nothing saved: none needed in this transaction (the whole file
	 * is its already, or not journaled) */
	if (want.saved ? range_note(&st, keyed ? &k : NULL, want.off, want.off + want.len, want.size)
		       : range_note(&st, keyed ? &k : NULL, 0, 0, 0))
		return 0;
	shim_unlock();                  /* no room to say more: the whole file */
	*at = -1;
	return pend_take(fd);
}

/* Outside a hook, before a call that writes through FD: its whole
 * pre-image taken, or (PART) the part a write of LEN bytes at OFF (-1: FD's
 * offset, *AT: where to make it, pend_take_range) changes. 0 (go on;
 * shim_unlock after the real call), or -1 with errno set (refused, said). */
static int pend_around(int fd, off_t off, uint64_t len, off_t *at, bool part)
{
	struct hook_ctx c;
	int err;

	*at = -1;
	if (!hook_enter(&c))
		return 0;
	if ((err = part ? pend_take_range(fd, off, len, at) : pend_take(fd))) {
		*at = -1;
		shim_unlock();
		hook_refuse(&c, err);
		return -1;
	}
	hook_leave(&c);
	return 0;
}

/* Before a write of LEN bytes at OFF (-1: FD's offset) through FD, as
 * pend_before. */
static int pend_before_range(int fd, off_t off, uint64_t len, off_t *at)
{
	return pend_around(fd, off, len, at, true);
}

/* ftruncate's check (hooks.def): a file it makes longer needs only its
 * old size (J_APPEND: undo cuts it there; the journal decides under the
 * path's lock, jcap_cut_to: another writer may make it longer first);
 * a large one it cuts by less than half, the bytes from N on (to its end
 * as the capture finds it). Where this process's parts hold every byte
 * from N on (shred's overwrite, then its cut), an empty part: the size
 * the file has under the lock, no bytes (the parts have them), so that
 * the undo of a later record of a larger size (a J_APPEND) finds the file
 * that long again. */
HIDDEN int pre_ftruncate(int fd, off_t n)
{
	struct stat st;
	struct jrange want = { .off = (uint64_t)n, .len = UINT64_MAX - (uint64_t)n };
	uint64_t run, sized;
	int err;

	if (n < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return pre_fd(fd, JC_TRUNC);    /* fails alike, or no file to cut */
	if (range_saved(&st, (uint64_t)n, UINT64_MAX, &run))
		want.len = 0;
	if (!want.len || (n < st.st_size && range_fits(&st, (uint64_t)(st.st_size - n)) &&
			  !range_holed(fd, &st, (uint64_t)n, (uint64_t)st.st_size))) {
		err = pre_fd_range(fd, &st, &want);
		if (!err && want.whole && pend_has(fd))
			pend_done(fd, &st);
		else if (!err && want.saved)
			range_note(&st, NULL, want.off, want.off + want.len, want.size);
		return err;
	}
	pre_cut(n);
	err = pre_fd(fd, JC_TRUNC);
	sized = jcap_cut_sized();
	pre_cut(-1);
	if (!err && sized != JCUT_ANY)  /* a J_APPEND of that size: undo cuts there */
		range_note(&st, NULL, 0, 0, sized);
	return err;
}

/* truncate's: a file it makes longer needs only its old size. */
HIDDEN int pre_truncate(const char *path, off_t n)
{
	int err;

	pre_cut(n);
	err = pre_path(AT_FDCWD, path, JC_TRUNC, 1);
	pre_cut(-1);
	return err;
}

/* The bytes N iovecs at V write, read as the kernel will (a bad pointer
 * fails the call, not the shim); UINT64_MAX where they cannot be read or N
 * is out of range: the whole file is saved then, if the call goes on. */
static uint64_t iov_bytes(const struct iovec *v, int n)
{
	struct iovec part[64];
	uint64_t sum = 0;

	if (n < 0 || n > IOV_MAX)
		return UINT64_MAX;
	for (int i = 0; i < n; i += 64) {
		int k = n - i < 64 ? n - i : 64;
		if (!user_bytes(v + i, part, (size_t)k * sizeof(*part)))
			return UINT64_MAX;
		for (int j = 0; j < k; j++)
			sum = part[j].iov_len > UINT64_MAX - sum ? UINT64_MAX : sum + part[j].iov_len;
	}
	return sum;
}

/* Before a call that writes through FD: 0 (go on; shim_unlock after the
 * real call), or -1 with errno set (refused, said). */
HIDDEN int pend_before(int fd)
{
	off_t at;

	return pend_around(fd, -1, 0, &at, false);
}

/* The open hook's: FD was opened to write in place and its capture put
 * off. Marked, or taken now where it cannot wait. 0, or the errno that
 * refuses the open (the caller closes FD). */
HIDDEN int pend_opened(int fd, int flags)
{
	struct hook_ctx c;
	struct stat st;
	int err;

	if (pend_markable(fd) && !txn_vfork_child() && !fdcache_distrusted() && fstat(fd, &st) == 0 &&
	    S_ISREG(st.st_mode)) {
		pend_set(fd, st.st_dev, st.st_ino, flags & O_APPEND);
		return 0;
	}
	if (!hook_enter(&c))
		return 0;
	err = pre_fd(fd, JC_WRITE);
	shim_unlock();
	if (err) {
		hook_refuse(&c, err);
		return err;
	}
	hook_leave(&c);
	return 0;
}

/* Before dup2 or dup3 of FROM onto TO: a pending FROM that becomes 1 or 2
 * (stdout's and stderr's streams write past the hooks; stdin's only
 * reads), or a number above the table, is taken now. 0, or -1 with errno
 * set (refused, said). */
HIDDEN int pend_dup_before(int from, int to)
{
	if (!pend_has(from) || txn_vfork_child() || from == to || pend_markable(to))
		return 0;
	if (pend_before(from) < 0)
		return -1;
	shim_unlock();
	return 0;
}

/* After a dup of FROM onto TO (dup, dup2, dup3, F_DUPFD): TO is pending as
 * FROM is, or, where it cannot be (1, 2, above the table: dup and F_DUPFD
 * say where only now), FROM is taken. 0, or -1 with errno set and TO
 * closed again (refused, said). */
HIDDEN int pend_dup(int from, int to)
{
	if (txn_vfork_child() || from == to || to < 0)
		return 0;
	pend_drop(to);
	if (!pend_has(from))
		return 0;
	if (pend_markable(to)) {
		pend_set(to, pend_id[from].dev, pend_id[from].ino, pend_id[from].append);
		return 0;
	}
	if (pend_before(from) < 0) {
		int e = errno;
		REAL(close)(to);
		errno = e;
		return -1;
	}
	shim_unlock();
	return 0;
}

/* ---- the calls that write through a descriptor ---------------------------- */

/* The path locks the capture took are held across the real call, as for
 * every change (shim.h), except by calls that may wait on their input (a
 * pipe's, a socket's): a writer of that input may need the same locks. */
#define WRITES_(ret, name, params, args, fd, cond, fail, hold)   \
	HOT EXPORT ret name params                               \
	{                                                        \
		if (__builtin_expect(pend_has(fd), 0) && (cond)) {     \
			ret r;                                   \
			if (pend_before(fd) < 0)                 \
				return fail;                     \
			if (!(hold))                             \
				shim_unlock();                   \
			r = REAL(name) args;                     \
			shim_unlock();                           \
			return r;                                \
		}                                                \
		return REAL(name) args;                          \
	}
#define WRITES(ret, name, params, args, fd, cond, fail) WRITES_(ret, name, params, args, fd, cond, fail, true)
/* the same where the call says which bytes it writes: OFF (-1: the
 * descriptor's offset) and LEN */
#define WRITES_AT(ret, name, params, args, fd, off, len)         \
	HOT EXPORT ret name params                               \
	{                                                        \
		if (__builtin_expect(pend_has(fd), 0)) {         \
			off_t at_;                               \
			ret r;                                   \
			if (pend_before_range(fd, off, len, &at_) < 0) \
				return -1;                       \
			r = REAL(name) args;                     \
			shim_unlock();                           \
			return r;                                \
		}                                                \
		return REAL(name) args;                          \
	}
/* a write at the descriptor's offset: made at the offset its part was
 * saved of (PNAME, PARGS: the positional call, at AT_), and the offset
 * moved past what it wrote */
#define WRITES_HERE(ret, name, params, args, fd, len, pname, pargs)  \
	HOT EXPORT ret name params                               \
	{                                                        \
		if (__builtin_expect(pend_has(fd), 0)) {         \
			off_t at_;                               \
			ret r;                                   \
			if (pend_before_range(fd, -1, len, &at_) < 0) \
				return -1;                       \
			if (at_ < 0) {                           \
				r = REAL(name) args;             \
			} else {                                 \
				r = REAL(pname) pargs;           \
				if (r > 0)                       \
					lseek(fd, at_ + (off_t)r, SEEK_SET); \
			}                                        \
			shim_unlock();                           \
			return r;                                \
		}                                                \
		return REAL(name) args;                          \
	}
#define WRITES_WAITING(ret, name, params, args, fd, fail) WRITES_(ret, name, params, args, fd, true, fail, false)

WRITES_HERE(ssize_t, write, (int fd, const void *b, size_t n), (fd, b, n), fd, n, pwrite, (fd, b, n, at_))
WRITES_AT(ssize_t, pwrite, (int fd, const void *b, size_t n, off_t o), (fd, b, n, o), fd, o, n)
WRITES_AT(ssize_t, pwrite64, (int fd, const void *b, size_t n, off64_t o), (fd, b, n, o), fd, o, n)
WRITES_HERE(ssize_t, writev, (int fd, const struct iovec *v, int n), (fd, v, n), fd, iov_bytes(v, n), pwritev,
	    (fd, v, n, at_))
WRITES_AT(ssize_t, pwritev, (int fd, const struct iovec *v, int n, off_t o), (fd, v, n, o), fd, o,
	  iov_bytes(v, n))
WRITES_AT(ssize_t, pwritev64, (int fd, const struct iovec *v, int n, off64_t o), (fd, v, n, o), fd, o,
	  iov_bytes(v, n))
WRITES_WAITING(ssize_t, sendfile, (int out, int in, off_t *o, size_t n), (out, in, o, n), out, -1)
WRITES_WAITING(ssize_t, sendfile64, (int out, int in, off64_t *o, size_t n), (out, in, o, n), out, -1)
WRITES(ssize_t, copy_file_range, (int in, off64_t *oi, int out, off64_t *oo, size_t n, unsigned fl),
       (in, oi, out, oo, n, fl), out, true, -1)
WRITES_WAITING(ssize_t, splice, (int in, off64_t *oi, int out, off64_t *oo, size_t n, unsigned fl),
	       (in, oi, out, oo, n, fl), out, -1)
/* a stream that writes ("w", "a", "r+"): stdio writes past the hooks */
WRITES(FILE *, fdopen, (int fd, const char *m), (fd, m), fd, !m || strpbrk(m, "wa+"), NULL)
WRITES(int, vdprintf, (int fd, const char *fmt, va_list ap), (fd, fmt, ap), fd, true, -1)
WRITES(int, __vdprintf_chk, (int fd, int fl, const char *fmt, va_list ap), (fd, fl, fmt, ap), fd, true, -1)
WRITES(int, aio_write, (struct aiocb *cb), (cb), cb->aio_fildes, true, -1)
WRITES(int, aio_write64, (struct aiocb64 *cb), (cb), cb->aio_fildes, true, -1)

/* A copy of another process's descriptor (pidfd_getfd, judged by the
 * guard): whether it was pending there is that process's to know, so one
 * that can write a regular file in place is pending here too, and its
 * first write takes it (once more, at worst). */
EXPORT int pidfd_getfd(int pidfd, int fd, unsigned fl)
{
	struct hook_ctx c;
	struct stat st;
	int err, r, mode;

	if (!hook_enter(&c))
		return REAL(pidfd_getfd)(pidfd, fd, fl);
	if ((err = guard_pidfd_getfd(pidfd))) {
		hook_refuse(&c, err);
		return -1;
	}
	hook_leave(&c);
	r = REAL(pidfd_getfd)(pidfd, fd, fl);
	if (r < 0 || (mode = fcntl(r, F_GETFL)) < 0 || (mode & O_ACCMODE) == O_RDONLY ||
	    ((mode & O_APPEND) && (mode & O_ACCMODE) == O_WRONLY) || fstat(r, &st) < 0 || !S_ISREG(st.st_mode))
		return r;
	if ((err = pend_opened(r, mode))) {
		REAL(close)(r);
		errno = err;
		return -1;
	}
	return r;
}

/* glibc's other exported names of the same, and a writer inside it */
EXPORT ssize_t __write(int fd, const void *b, size_t n) { return write(fd, b, n); }
EXPORT ssize_t __pwrite64(int fd, const void *b, size_t n, off64_t o) { return pwrite64(fd, b, n, o); }
EXPORT ssize_t __libc_pwrite(int fd, const void *b, size_t n, off_t o) { return pwrite(fd, b, n, o); }
EXPORT ssize_t __write_nocancel(int fd, const void *b, size_t n) { return write(fd, b, n); }
EXPORT FILE *_IO_fdopen(int fd, const char *m) { return fdopen(fd, m); }
EXPORT void backtrace_symbols_fd(void *const *a, int n, int fd)
{
	if (pend_has(fd) && pend_before(fd) < 0)
		return;
	REAL(backtrace_symbols_fd)(a, n, fd);
	shim_unlock();
}

EXPORT int dprintf(int fd, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vdprintf(fd, fmt, ap);
	va_end(ap);
	return r;
}

EXPORT int __dprintf_chk(int fd, int fl, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = __vdprintf_chk(fd, fl, fmt, ap);
	va_end(ap);
	return r;
}

/* lio_listio: each LIO_WRITE's descriptor */
#define LIO_HOOK(name, cbtype)                                                             \
	EXPORT int name(int mode, cbtype *const list[], int n, struct sigevent *sig)         \
	{                                                                                 \
		if (pend_any())                                                           \
			for (int i = 0; i < n; i++)                                       \
				if (list[i] && list[i]->aio_lio_opcode == LIO_WRITE &&     \
				    pend_has(list[i]->aio_fildes) &&                      \
				    (pend_before(list[i]->aio_fildes) < 0 || (shim_unlock(), 0))) \
					return -1;                                        \
		return REAL(name)(mode, list, n, sig);                                    \
	}
LIO_HOOK(lio_listio, struct aiocb)
LIO_HOOK(lio_listio64, struct aiocb64)

/* A descriptor sent to another process (SCM_RIGHTS) leaves this memory:
 * every pending one is taken first (a message with control data). */
EXPORT ssize_t sendmsg(int fd, const struct msghdr *m, int fl)
{
	if (__builtin_expect(pend_any(), 0) && m && m->msg_controllen && pend_flush_all(false))
		return -1;
	return REAL(sendmsg)(fd, m, fl);
}

EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned n, int fl)
{
	if (__builtin_expect(pend_any(), 0) && pend_flush_all(false))
		return -1;
	return REAL(sendmmsg)(fd, v, n, fl);
}
