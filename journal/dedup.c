/*
 * dedup.c - copy on first write (DESIGN.md invariant 2). A table in
 * SESSION/dedup3, mapped shared by every process of the session, remembers
 * for each (generation, path) the transaction that wrote its last record
 * and at which level, so that later changes in that transaction cost no
 * record. Open addressing (a directory's pages first, see DD_SPP), no
 * lock: a slot is claimed by a compare-and-swap on its state word and
 * marked done only after its record is written, so no process ever skips
 * a capture whose record is not yet on disk. Whenever the table cannot
 * answer, it says "capture": capturing twice is always safe, skipping
 * never is.
 *
 * A path has one slot for all transactions, not one each: when transaction
 * B records a path after A did, A's next change of it needs a record again.
 * Two transactions running at once (a tool call and a job an earlier one
 * left running) may take turns on one file; with a slot each, A's later
 * truncation went unrecorded after B's J_APPEND, and a rewind of both then
 * found the file shorter than B's record said. With one owner per slot,
 * the records of a path, in seq order, always describe the state each
 * change started from (the path locks keep record and change together).
 * Parent directories' weak keys keep one slot per transaction: their
 * records restore times only, in any order. (An older shim's keys all
 * include the transaction, so its slots and these never match: a session
 * shared by both only captures more.)
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>              /* snprintf only */
#include <sodium.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "dedup.h"

#define DD_FILE   "dedup3"      /* "dedup" had the slots of one flat array,
                                   "dedup2" a directory's page at each generation */
#define DD_SIZE   (4u << 20)    /* allocated whole */
#define DD_PAGE   4096u         /* page 0: unused (older tables kept the session's salt there) */
#define DD_PAGES  (DD_SIZE / DD_PAGE - 1)
#define DD_PROBE  512           /* a longer chain counts as a full table */
#define DD_KEY    16
#define DD_DIRPAGES 4          /* a directory's own pages, tried in turn */

/* A slot's state word: busy, pid << 32 | old state << 8 | 1 (a record
 * being written by pid; old is the state to go back to); done, txn << 32 |
 * 1 + level (the transaction of the last record and its level); 0 empty.
 * The key is written before the word leaves busy and never changes
 * afterwards. A claimer that fails puts back the whole word it found; one
 * that takes over a dead writer's slot knows only the old state, and puts
 * back a done word of no transaction (DD_NOBODY: everyone captures). */
#define DD_EMPTY  0u
#define DD_BUSY   1u
#define DD_NOBODY 0xffffffffu

struct dslot {
	uint64_t word;
	uint8_t key[DD_KEY];
};

/* Slots are laid out page by page (DD_SPP to a page, none across two), and
 * a path's probe sequence starts with the pages of its directory (a weak
 * key's at its transaction too; never at its generation, which every
 * rename and remove moves on: sed -i's next file then started on a new
 * page, a page fault per file). The entries that a cp -r, a tar x or a
 * sed -i adds in one directory, in every generation, share its pages, so a
 * process makes a page or a few of the table its own, not one per file (a
 * page fault each; a write fault on a shared file mapping is the dearest
 * kind). A directory whose DD_DIRPAGES pages are full goes on in the table
 * at large, from a place of its key's. The sequence of a key is fixed and
 * slots are never emptied, so every process finds a key's slot at the
 * same place, as with one array. */
#define DD_SPP    (DD_PAGE / sizeof(struct dslot))
#define DD_SLOTS  (DD_PAGES * DD_SPP)

static struct dslot *slot_at(uint8_t *base, size_t page, size_t i)
{
	return (struct dslot *)(void *)(base + (1 + page) * DD_PAGE + i * sizeof(struct dslot));
}

/* This process's mappings of its sessions' tables, each with the salt of
 * its session (kept here: a look at the mapping's first page would be a
 * page fault in every process). Entries are written once and published by
 * dd_cur; a process that has mapped DD_TABS tables captures everything in
 * a further session (tests run many sessions in one process, programs one). */
#define DD_TABS 64
static struct dtab {
	uint8_t *map;
	uint8_t salt[J_SALT_LEN];
} dd_tabs[DD_TABS];
static unsigned dd_ntabs;
static struct dtab *dd_cur;    /* the table used last */
static uint64_t dd_failed;     /* salt prefix of a session whose table could not be had */

static unsigned st_of(uint64_t w) { return (unsigned)(w & 0xff); }
static uint32_t txn_of(uint64_t w) { return (uint32_t)(w >> 32); }
static unsigned old_of(uint64_t w) { return (unsigned)((w >> 8) & 0xff); }

static uint64_t busy_word(unsigned old)
{
	return (uint64_t)(uint32_t)getpid() << 32 | (uint64_t)old << 8 | DD_BUSY;
}

uint64_t dedup_generation(struct jsession *s)
{
	return 1 + __atomic_load_n(&s->ctr[2], __ATOMIC_ACQUIRE);
}

void dedup_bump(struct jsession *s)
{
	__atomic_add_fetch(&s->ctr[2], 1, __ATOMIC_SEQ_CST);
}

static uint64_t *rewinds_word(const struct jsession *s)
{
	return (uint64_t *)(void *)((char *)s->ctr + JL_REWINDS_AT);
}

uint64_t dedup_rewinds(const struct jsession *s)
{
	return s->ctr ? __atomic_load_n(rewinds_word(s), __ATOMIC_ACQUIRE) : 0;
}

void dedup_rewound(struct jsession *s)
{
	if (!s->ctr)
		return;
	__atomic_add_fetch(rewinds_word(s), 1, __ATOMIC_SEQ_CST);
	dedup_bump(s);
}

/* Create SESSION/dedup3 whole: allocated under a temporary name (a page
 * fault on a sparse shared mapping of a full disk would be a SIGBUS in the
 * host), then linked into place; losing the race to another process is
 * fine. Returns an open descriptor or -errno. */
static int create_table(struct jsession *s)
{
	char tmp[32];
	int fd, err;

	snprintf(tmp, sizeof(tmp), DD_FILE ".%d", (int)getpid());
	unlinkat(s->dirfd, tmp, 0);
	fd = openat(s->dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	err = -posix_fallocate(fd, 0, DD_SIZE);
	if (!err && linkat(s->dirfd, tmp, s->dirfd, DD_FILE, 0) < 0 && errno != EEXIST)
		err = -errno;
	unlinkat(s->dirfd, tmp, 0);
	close(fd);
	if (err)
		return err;
	fd = openat(s->dirfd, DD_FILE, O_RDWR | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* Map SESSION/dedup3, creating it on first use. NULL when it cannot be had. */
static uint8_t *map_table(struct jsession *s)
{
	struct stat st;
	uint8_t *m;
	int fd = openat(s->dirfd, DD_FILE, O_RDWR | O_CLOEXEC);

	if (fd < 0 && errno == ENOENT)
		fd = create_table(s);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || st.st_size != (off_t)DD_SIZE) {
		close(fd);
		return NULL;
	}
	m = mmap(NULL, DD_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return m == MAP_FAILED ? NULL : m;
}

/* This process's mapping of S's table, set up once. A process that moves to
 * another session (tests do) maps that one's and leaves the old mapping in
 * place, since another thread may still be probing it. */
static uint8_t *table(struct jsession *s)
{
	struct dtab *cur = __atomic_load_n(&dd_cur, __ATOMIC_ACQUIRE), *t;
	unsigned n = __atomic_load_n(&dd_ntabs, __ATOMIC_ACQUIRE), k;
	uint64_t id;
	uint8_t *m;

	if (cur && !memcmp(cur->salt, s->salt, J_SALT_LEN))
		return cur->map;
	for (unsigned i = 0; i < n && i < DD_TABS; i++) {
		t = &dd_tabs[i];
		if (__atomic_load_n(&t->map, __ATOMIC_ACQUIRE) && !memcmp(t->salt, s->salt, J_SALT_LEN)) {
			__atomic_store_n(&dd_cur, t, __ATOMIC_RELEASE);
			return t->map;
		}
	}
	memcpy(&id, s->salt, sizeof(id));
	if (__atomic_load_n(&dd_failed, __ATOMIC_RELAXED) == id)
		return NULL;    /* tried once (a full disk): capture everything */
	m = map_table(s);
	if (!m) {
		__atomic_store_n(&dd_failed, id, __ATOMIC_RELAXED);
		return NULL;
	}
	k = __atomic_fetch_add(&dd_ntabs, 1, __ATOMIC_ACQ_REL);
	if (k >= DD_TABS) {
		munmap(m, DD_SIZE);
		__atomic_store_n(&dd_failed, id, __ATOMIC_RELAXED);
		return NULL;
	}
	/* two threads may map one session's table twice: both mappings
	 * are of the same file, and either answers alike */
	t = &dd_tabs[k];
	memcpy(t->salt, s->salt, J_SALT_LEN);
	__atomic_store_n(&t->map, m, __ATOMIC_RELEASE);
	__atomic_store_n(&dd_cur, t, __ATOMIC_RELEASE);
	return m;
}

/* The key of a path at GEN; a weak key is the transaction's own, until
 * the next rewind (REWINDS); a strong key of a transaction that ended
 * (LATE: a job it left running) is another than before its end. */
static void make_key(uint8_t key[DD_KEY], uint32_t txn, uint64_t gen, uint64_t rewinds, bool late,
		     const char *path)
{
	crypto_generichash_blake2b_state h;

	crypto_generichash_blake2b_init(&h, NULL, 0, DD_KEY);
	if (gen == DEDUP_WEAK_GEN)
		crypto_generichash_blake2b_update(&h, (const uint8_t *)&txn, sizeof(txn));
	if (gen == DEDUP_WEAK_GEN && rewinds)
		crypto_generichash_blake2b_update(&h, (const uint8_t *)&rewinds, sizeof(rewinds));
	if (late)
		crypto_generichash_blake2b_update(&h, (const uint8_t *)"late", 4);
	crypto_generichash_blake2b_update(&h, (const uint8_t *)&gen, sizeof(gen));
	crypto_generichash_blake2b_update(&h, (const uint8_t *)path, strlen(path));
	crypto_generichash_blake2b_final(&h, key, DD_KEY);
}

/* The Nth page of a path's directory (and TXN for a weak key): placement
 * only, the key decides what matches. */
static size_t dir_page(uint32_t txn, uint64_t gen, const char *path, unsigned n)
{
	const char *end = strrchr(path, '/');
	uint64_t h = 0xcbf29ce484222325ull ^ (gen == DEDUP_WEAK_GEN ? (uint64_t)txn << 32 | 1 : 0);

	for (const char *p = path; p < end; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	h += n * 0x9e3779b97f4a7c15ull;
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 32;
	return (size_t)(h % DD_PAGES);
}

static bool writer_dead(uint64_t w)
{
	pid_t pid = (pid_t)(w >> 32);

	return pid > 0 && kill(pid, 0) < 0 && errno == ESRCH;
}

/* Wait politely for a busy slot: yield first, then sleep, since the
 * writer may be compressing a large file. */
static void backoff(unsigned *spins)
{
	struct timespec ts = { 0, 1000000 };

	if (++*spins < 64)
		sched_yield();
	else
		nanosleep(&ts, NULL);
}

static bool cas(uint64_t *p, uint64_t *expect, uint64_t want)
{
	return __atomic_compare_exchange_n(p, expect, want, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

enum { SLOT_OTHER, SLOT_SKIP, SLOT_MINE };

/* OLD: the whole word to put back if the record fails. */
static int take(struct dslot *sl, const uint8_t *key, uint64_t old, struct dclaim *c)
{
	if (old == DD_EMPTY)
		memcpy(sl->key, key, DD_KEY);
	c->word = &sl->word;
	c->old = old;
	return SLOT_MINE;
}

/* A dead writer's busy slot: take it over. If it was claimed for another
 * key, put it back the way it was and let the caller look again. */
static void take_over(struct dslot *sl, uint64_t w, const uint8_t *key, struct dclaim *c, int *res)
{
	unsigned old = old_of(w);
	uint64_t back = old == DD_EMPTY ? DD_EMPTY : (uint64_t)DD_NOBODY << 32 | old;

	if (!cas(&sl->word, &w, busy_word(old)))
		return;
	if (old == DD_EMPTY || !memcmp(sl->key, key, DD_KEY)) {
		*res = take(sl, key, back, c);
		return;
	}
	__atomic_store_n(&sl->word, back, __ATOMIC_RELEASE);
}

/* Settle one slot for KEY: someone else's, ours already at LEVEL in
 * C->txn (skip), or claimed by us (write the record). */
static int probe_slot(struct dslot *sl, const uint8_t *key, struct dclaim *c, bool first)
{
	unsigned spins = 0;
	int res = -1;
	uint64_t w = DD_EMPTY;

	/* The first slot a claim looks at in a page is most likely the first
	 * touch of that page by this process: a compare-and-swap is one write
	 * fault, where a load and then a swap are a read fault (which maps
	 * the pages around it too) and a write fault. */
	if (first && cas(&sl->word, &w, busy_word(DD_EMPTY)))
		return take(sl, key, DD_EMPTY, c);
	while (res < 0) {
		unsigned st;

		if (!first)
			w = __atomic_load_n(&sl->word, __ATOMIC_ACQUIRE);
		first = false;
		st = st_of(w);

		if (st == DD_EMPTY) {
			if (cas(&sl->word, &w, busy_word(DD_EMPTY)))
				res = take(sl, key, DD_EMPTY, c);
		} else if (st == DD_BUSY) {
			if (writer_dead(w))
				take_over(sl, w, key, c, &res);
			else
				backoff(&spins);
		} else if (memcmp(sl->key, key, DD_KEY)) {
			res = SLOT_OTHER;
		} else if (txn_of(w) == c->txn && st >= 1 + c->level) {
			res = SLOT_SKIP;
		} else if (cas(&sl->word, &w, busy_word(st))) {
			res = take(sl, key, w, c);
		}
	}
	return res;
}

/* C settled at the slot R came back with: true when the claim is over. */
static bool settled(struct jsession *s, int r, struct dclaim *c, bool *skip)
{
	if (r == SLOT_MINE && st_of(c->old) > DD_BUSY && txn_of(c->old) != c->txn)
		__atomic_add_fetch(&s->ctr[J_CTR_TURNS], 1, __ATOMIC_SEQ_CST);
	*skip = r == SLOT_SKIP;
	return r != SLOT_OTHER;
}

bool dedup_claim(struct jsession *s, uint32_t txn, uint64_t gen, const char *path,
		 unsigned level, struct dclaim *c)
{
	uint8_t *t = table(s);
	uint8_t key[DD_KEY];
	uint64_t h, g;
	bool skip;

	c->word = NULL;
	c->level = level;
	c->txn = txn;
	if (!t)
		return false;
	make_key(key, txn, gen, gen == DEDUP_WEAK_GEN ? dedup_rewinds(s) : 0,
		 gen != DEDUP_WEAK_GEN && jtxn_late(s, txn), path);
	memcpy(&h, key, sizeof(h));
	memcpy(&g, key + 8, sizeof(g));
	for (unsigned n = 0; n < DD_DIRPAGES; n++) {
		size_t page = dir_page(txn, gen, path, n);
		for (size_t i = 0; i < DD_SPP; i++)
			if (settled(s, probe_slot(slot_at(t, page, (h + i) % DD_SPP), key, c, i == 0), c, &skip))
				return skip;
	}
	for (size_t i = 0; i < DD_PROBE; i++) {
		size_t k = (g + i) % DD_SLOTS;

		if (settled(s, probe_slot(slot_at(t, k / DD_SPP, k % DD_SPP), key, c, i == 0), c, &skip))
			return skip;
	}
	return false;
}

void dedup_done(struct dclaim *c, bool ok)
{
	if (!c->word)
		return;
	__atomic_store_n(c->word, ok ? (uint64_t)c->txn << 32 | (1 + c->level) : c->old, __ATOMIC_RELEASE);
	c->word = NULL;
}
