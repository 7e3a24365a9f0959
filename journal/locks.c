/*
 * locks.c - path locks shared by every process of a session, so that the
 * order of the records of one path is the order of its changes.
 *
 * Records take their seq before the change (undo before do). Two threads or
 * processes changing the same path at once could otherwise record in one
 * order and change in the other, and a rewind would then undo them in the
 * wrong order. A writer therefore holds the locks of the paths it changes,
 * and of their parent directories, from its capture until the change is
 * made. SESSION/locks holds JL_STRIPES robust, process-shared mutexes; a
 * path hashes to one of them. A process killed while holding one leaves it
 * to the next locker (EOWNERDEAD), never a deadlock.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include "internal.h"

#define JL_FILE_SIZE  (JL_LANES_OFF + JL_LANES * sizeof(struct jlane))
/* SESSION/shared (JI_SHARED): the counters' page (with the policy slot's
 * owner and length), then the locks file's layout, what a process maps;
 * then the policy's place, then the reserve to the end of the file. */
#define JL_SHARED_MAP ((J_SEQ_FILE_SIZE + JL_FILE_SIZE + 4095) & ~(size_t)4095)
#define JL_RESERVE_AT (JL_SHARED_MAP + JL_POLICY_MAX)

size_t jlocks_size(void)
{
	return JL_FILE_SIZE;
}

/* What a process maps of SESSION/shared: the policy's place starts there.
 * In .text.startup, with the shim's constructor that asks it: the pages
 * every process reads anyway. */
__attribute__((section(".text.startup"))) size_t jshared_size(void)
{
	return JL_SHARED_MAP;
}

/* The policy's place (a hole until a root writes its block there) and the
 * space kept for txreplay's rewind marks on a full filesystem, after what
 * is mapped: as much of J_RESERVE_SIZE as the filesystem spares (a small
 * one gets less). */
static int make_reserve(int fd, off_t at)
{
	int err = ENOSPC;

	for (off_t n = J_RESERVE_SIZE; n >= 8192 && err == ENOSPC; n /= 4)
		err = posix_fallocate(fd, at + JL_POLICY_MAX, n);
	if (err == ENOSPC || err == EOPNOTSUPP || err == EINVAL)
		err = ftruncate(fd, at + JL_POLICY_MAX) < 0 ? errno : 0;      /* the policy's place at least */
	return -err;
}

/* The file is written (not made sparse and mapped): a full filesystem then
 * fails the creation with ENOSPC instead of a SIGBUS at a later lock. An
 * all-zero mutex is neither robust nor process-shared, so each one is an
 * initialised copy; a page of them at a time. SHARED: SESSION/shared, with
 * the counters first and the reserve last (RESERVE: made now; else by the
 * writer that makes log/, jshared_make_reserve); else SESSION/locks. */
int jlocks_create(int dfd, bool shared, bool reserve)
{
	enum { PER = 4096 / sizeof(pthread_mutex_t), NIOV = 64 };
	static const uint8_t zero[4096];
	pthread_mutexattr_t a;
	pthread_mutex_t m[PER];
	struct iovec iov[NIOV];
	int fd, err = 0, n = 0;
	size_t end = shared ? JL_SHARED_MAP : JL_FILE_SIZE, at = shared ? J_SEQ_FILE_SIZE : 0;

	_Static_assert(J_SEQ_FILE_SIZE == sizeof(zero), "the counters are a page");
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	memset(m, 0, sizeof(m));
	for (unsigned i = 0; i < PER; i++)
		pthread_mutex_init(&m[i], &a);
	pthread_mutexattr_destroy(&a);
	fd = openat(dfd, shared ? "shared" : "locks", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	/* one writev: the counters (all zero), the mutexes (a page of
	 * initialised copies, as often as needed), the shared segments' table
	 * (all free, zero) on a page of its own */
	if (shared)
		iov[n++] = (struct iovec){ (void *)zero, sizeof(zero) };
	for (unsigned i = 0; i < JL_STRIPES && n < NIOV; i += PER) {
		unsigned k = JL_STRIPES - i < PER ? JL_STRIPES - i : PER;
		iov[n++] = (struct iovec){ m, k * sizeof(m[0]) };
	}
	for (size_t off = at + JL_MUTEX_SIZE; off < end && n < NIOV;) {
		size_t k = end - off < sizeof(zero) ? end - off : sizeof(zero);
		iov[n++] = (struct iovec){ (void *)zero, k };
		off += k;
	}
	_Static_assert((JL_STRIPES + PER - 1) / PER + (JL_SHARED_MAP - JL_MUTEX_SIZE) / 4096 + 2 <= NIOV,
		       "the file's parts fit the iovec array");
	err = jwritev_all(fd, iov, n);
	if (!err && shared && reserve)
		err = make_reserve(fd, (off_t)JL_SHARED_MAP);
	else if (!err && shared && ftruncate(fd, (off_t)JL_RESERVE_AT) < 0)
		err = -errno;   /* the policy's place: a hole */
	close(fd);
	return err;
}

/* The reserve of a JI_LAZYDIRS session, made with its log/: a session
 * nothing was written in has nothing to rewind either. */
int jshared_make_reserve(struct jsession *s)
{
	int fd = openat(s->dirfd, "shared", O_WRONLY | O_CLOEXEC), err;

	if (fd < 0)
		return -errno;
	err = make_reserve(fd, (off_t)JL_SHARED_MAP);
	if (!err && (s->flags & JS_DURABLE) && fsync(fd) < 0)
		err = -errno;
	close(fd);
	return err;
}

/* A locks file of an older session has no table of shared segments: its
 * processes each write a segment of their own. A JI_SHARED session maps
 * its counters from the same file. */
int jlocks_map(struct jsession *s)
{
	bool shared = s->features & JI_SHARED;
	int fd = openat(s->dirfd, shared ? "shared" : "locks", O_RDWR | O_CLOEXEC);
	size_t at = shared ? J_SEQ_FILE_SIZE : 0;
	struct stat st;
	char *m;

	if (fd < 0)
		return errno == ENOENT && shared ? -EPROTO : -errno;
	if (fstat(fd, &st) < 0 || st.st_size < (off_t)(at + JL_MUTEX_SIZE) ||
	    (shared && st.st_size < (off_t)JL_RESERVE_AT)) {
		close(fd);
		return -EPROTO;
	}
	m = mmap(NULL, shared ? JL_SHARED_MAP : JL_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -errno;
	if (shared)
		s->ctr = (uint64_t *)(void *)m;
	s->locks = (pthread_mutex_t *)(void *)(m + at);
	s->lanes = (s->features & JI_LANES) && st.st_size >= (off_t)(at + JL_FILE_SIZE) ?
		   (struct jlane *)(void *)(m + JL_LANE_AT(shared, 0)) : NULL;
	return 0;
}

/* Give the reserve back: SESSION/shared cut after the policy's place. */
int jshared_release_reserve(struct jsession *s)
{
	int fd = openat(s->dirfd, "shared", O_WRONLY | O_CLOEXEC);
	struct stat st;
	int err = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		err = -errno;
	else if (st.st_size <= (off_t)JL_RESERVE_AT)
		err = -ENOENT;          /* given back already */
	else if (ftruncate(fd, (off_t)JL_RESERVE_AT) < 0)
		err = -errno;
	close(fd);
	return err;
}

int jshared_policy_put(struct jsession *s, uint32_t root, const void *p, size_t n)
{
	struct jpolicy_slot *slot;
	uint64_t free_ = 0;
	int fd, err = 0;

	if (!(s->features & JI_SHARED) || !s->ctr)
		return -ENOTSUP;
	if (n == 0 || n > JL_POLICY_MAX)
		return -EFBIG;
	slot = (struct jpolicy_slot *)(void *)((char *)s->ctr + JL_POLICY_SLOT);
	if (!__atomic_compare_exchange_n(&slot->owner, &free_, JL_POLICY_CLAIMED | root, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return -EBUSY;
	fd = openat(s->dirfd, "shared", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (size_t done = 0; done < n && !err;) {
		ssize_t k = pwrite(fd, (const char *)p + done, n - done, (off_t)(JL_SHARED_MAP + done));
		if (k > 0)
			done += (size_t)k;
		else if (k == 0 || errno != EINTR)
			err = k == 0 ? -EIO : -errno;
	}
	close(fd);
	if (!err)
		__atomic_store_n(&slot->len, n, __ATOMIC_RELEASE);
	return err;
}

enum { FNV0 = 2166136261u, FNV_PRIME = 16777619u };
/* The mutexes on a page of the mapping, and the pages of them. */
enum { PER = 4096 / sizeof(pthread_mutex_t), PAGES = JL_STRIPES / PER };

static uint32_t fnv(const char *p, size_t n)
{
	uint32_t h = FNV0;              /* FNV-1a */

	while (n--)
		h = (h ^ (uint8_t)*p++) * FNV_PRIME;
	return h;
}

/* The stripe of the path P (N bytes): a page of mutexes chosen by its
 * directory, one of that page's by the whole path, so that the files a
 * process changes in one directory lock on one page of the mapping (a write
 * fault each page, the first time), not on as many as there are files. */
static unsigned stripe(const char *p, size_t n)
{
	size_t d = n;

	while (d > 1 && p[d - 1] != '/')
		d--;
	return fnv(p, d) % PAGES * PER + fnv(p, n) % PER;
}

/* Add the stripes of P and of its parent directory to L. One pass of FNV-1a
 * over an absolute P gives the four hashes stripe() would take apart: of
 * the parent's directory, the parent, P's directory and P. */
static void add_path(struct jlockset *l, const char *p)
{
	unsigned k[2];

	if (!p)
		return;
	if (p[0] == '/') {
		uint32_t h = FNV0, dir = FNV0, gdir = FNV0, par = FNV0;
		size_t last = 0;
		for (size_t i = 0; p[i]; i++) {
			bool slash = p[i] == '/';
			if (slash) {
				par = h;
				gdir = dir;
				last = i;
			}
			h = (h ^ (uint8_t)p[i]) * FNV_PRIME;
			if (slash)
				dir = h;
		}
		if (!last)              /* the parent is "/" */
			par = gdir = dir;
		k[0] = dir % PAGES * PER + h % PER;
		k[1] = gdir % PAGES * PER + par % PER;
	} else {
		const char *slash = strrchr(p, '/');
		k[0] = stripe(p, strlen(p));
		k[1] = stripe(p, slash && slash != p ? (size_t)(slash - p) : 1);
	}
	for (int i = 0; i < 2; i++) {
		bool seen = false;
		for (int j = 0; j < l->n; j++)
			seen |= l->stripe[j] == k[i];
		if (!seen && l->n < JL_MAX)
			l->stripe[l->n++] = k[i];
	}
}

void jlock_paths(struct jsession *s, struct jlockset *l, const char *a, const char *b)
{
	l->n = 0;
	if (!s->locks)
		return;
	add_path(l, a);
	add_path(l, b);
	/* one global order: ascending stripes, so two lockers never deadlock */
	for (int i = 1; i < l->n; i++)
		for (int j = i; j > 0 && l->stripe[j - 1] > l->stripe[j]; j--) {
			unsigned t = l->stripe[j];
			l->stripe[j] = l->stripe[j - 1];
			l->stripe[j - 1] = t;
		}
	for (int i = 0; i < l->n; i++)
		if (pthread_mutex_lock(&s->locks[l->stripe[i]]) == EOWNERDEAD)
			pthread_mutex_consistent(&s->locks[l->stripe[i]]);
	l->s = s;
}

void junlock(struct jlockset *l)
{
	for (int i = l->n; i-- > 0;)
		pthread_mutex_unlock(&l->s->locks[l->stripe[i]]);
	l->n = 0;
}
