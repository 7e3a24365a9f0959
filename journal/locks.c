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
#include <unistd.h>
#include "internal.h"

#define JL_MUTEX_SIZE (JL_STRIPES * sizeof(pthread_mutex_t))
#define JL_LANES_OFF  ((JL_MUTEX_SIZE + 4095) & ~(size_t)4095)
#define JL_FILE_SIZE  (JL_LANES_OFF + JL_LANES * sizeof(struct jlane))

size_t jlocks_size(void)
{
	return JL_FILE_SIZE;
}

/* The file is written (not made sparse and mapped): a full filesystem then
 * fails the creation with ENOSPC instead of a SIGBUS at a later lock. An
 * all-zero mutex is neither robust nor process-shared, so each one is an
 * initialised copy; a page of them at a time. */
int jlocks_create(int dfd)
{
	enum { PER = 4096 / sizeof(pthread_mutex_t) };
	pthread_mutexattr_t a;
	pthread_mutex_t m[PER];
	int fd, err = 0;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	memset(m, 0, sizeof(m));
	for (unsigned i = 0; i < PER; i++)
		pthread_mutex_init(&m[i], &a);
	pthread_mutexattr_destroy(&a);
	fd = openat(dfd, "locks", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	for (unsigned i = 0; i < JL_STRIPES && !err; i += PER) {
		unsigned k = JL_STRIPES - i < PER ? JL_STRIPES - i : PER;
		err = jwrite_all(fd, m, k * sizeof(m[0]));
	}
	/* the shared segments' table, all free (zero), on a page of its own */
	memset(m, 0, sizeof(m));
	for (size_t off = JL_MUTEX_SIZE; off < JL_FILE_SIZE && !err;) {
		size_t k = JL_FILE_SIZE - off < sizeof(m) ? JL_FILE_SIZE - off : sizeof(m);
		err = jwrite_all(fd, m, k);
		off += k;
	}
	close(fd);
	return err;
}

/* A locks file of an older session has no table of shared segments: its
 * processes each write a segment of their own. */
int jlocks_map(struct jsession *s)
{
	int fd = openat(s->dirfd, "locks", O_RDWR | O_CLOEXEC);
	struct stat st;
	void *m;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || st.st_size < (off_t)JL_MUTEX_SIZE) {
		close(fd);
		return -EPROTO;
	}
	m = mmap(NULL, JL_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -errno;
	s->locks = m;
	s->lanes = (s->features & JI_LANES) && st.st_size >= (off_t)JL_FILE_SIZE ?
		   (struct jlane *)((char *)m + JL_LANES_OFF) : NULL;
	return 0;
}

static unsigned stripe(const char *p, size_t n)
{
	uint32_t h = 2166136261u;       /* FNV-1a */

	while (n--)
		h = (h ^ (uint8_t)*p++) * 16777619u;
	return h % JL_STRIPES;
}

/* Add the stripes of P and of its parent directory to L. */
static void add_path(struct jlockset *l, const char *p)
{
	const char *slash;
	unsigned k[2];

	if (!p)
		return;
	slash = strrchr(p, '/');
	k[0] = stripe(p, strlen(p));
	k[1] = stripe(p, slash && slash != p ? (size_t)(slash - p) : 1);
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
