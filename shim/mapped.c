/*
 * mapped.c - shared mappings of files whose pre-image waits (pending.c).
 *
 * A writable shared mapping (MAP_SHARED or MAP_SHARED_VALIDATE with
 * PROT_WRITE) of a pending descriptor changes the file with no further
 * call: its pre-image is taken before the mmap. A read-only one changes
 * nothing until mprotect (or pkey_mprotect) gives it PROT_WRITE, which the
 * descriptor's access mode allows: sqlite reads its database through one
 * (PRAGMA mmap_size), Python's mmap ACCESS_READ and Java's READ_ONLY map
 * of a read-write channel make one. Those are kept here, their range and
 * file, and taken when an mprotect that writes reaches them, through a
 * pending descriptor of the file, or by the name the kernel has for the
 * mapping (/proc/self/map_files) once the descriptor is closed. mremap of
 * one takes it first (the range moves); munmap forgets it. Where no slot
 * is free, the mmap takes it at once.
 *
 * Every mprotect looks at one word (how many are kept) unless it adds
 * PROT_WRITE; JITs' mprotects of anonymous memory pass at that cost.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "shim.h"

#define MAPPED_N 32

static struct kept_map { uintptr_t lo, hi; dev_t dev; ino_t ino; } kept[MAPPED_N];
static unsigned kept_n;         /* slots in use */
/* held only to read or write slots; a fork child's is free (state.c's
 * atfork handler: another thread may have held it at the fork) */
HIDDEN int mapped_lock_word;

static void lock(void)
{
	while (__atomic_exchange_n(&mapped_lock_word, 1, __ATOMIC_ACQUIRE))
		sched_yield();
}

static void unlock(void)
{
	__atomic_store_n(&mapped_lock_word, 0, __ATOMIC_RELEASE);
}

static inline bool any(void)
{
	return __atomic_load_n(&kept_n, __ATOMIC_ACQUIRE) != 0;
}

static void drop(unsigned i)
{
	kept[i].hi = 0;
	__atomic_sub_fetch(&kept_n, 1, __ATOMIC_RELEASE);
}

/* Keep the read-only mapping M (N bytes) of FD's file; false: no slot. */
static bool keep(void *m, size_t n, int fd)
{
	long page = sysconf(_SC_PAGESIZE);
	dev_t dev;
	ino_t ino;
	bool kept_it = false;

	if (!pend_id_of(fd, &dev, &ino) || txn_vfork_child())
		return false;
	lock();
	for (unsigned i = 0; i < MAPPED_N && !kept_it; i++)
		if (!kept[i].hi) {
			kept[i] = (struct kept_map){ (uintptr_t)m, ((uintptr_t)m + n + (uintptr_t)page - 1) &
							       ~((uintptr_t)page - 1), dev, ino };
			__atomic_add_fetch(&kept_n, 1, __ATOMIC_RELEASE);
			kept_it = true;
		}
	unlock();
	return kept_it;
}

HIDDEN void mapped_forget(dev_t dev, ino_t ino)
{
	if (!any())
		return;
	lock();
	for (unsigned i = 0; i < MAPPED_N; i++)
		if (kept[i].hi && kept[i].dev == dev && kept[i].ino == ino)
			drop(i);
	unlock();
}

/* Forget the mappings wholly inside [LO, LO + N) (unmapped). */
static void forget_range(uintptr_t lo, size_t n)
{
	if (!any())
		return;
	lock();
	for (unsigned i = 0; i < MAPPED_N; i++)
		if (kept[i].hi && kept[i].lo >= lo && kept[i].hi <= lo + n)
			drop(i);
	unlock();
}

/* Take the file of the kept mapping K: through a pending descriptor of it,
 * or by the mapping's name. 0 or the errno of a refusal (said). */
static int take_one(const struct kept_map *k)
{
	char link[64], p[PATH_MAX];
	struct stat st, ls;
	bool found;
	ssize_t len;
	int err = pend_take_id(k->dev, k->ino, &found);

	if (err || found)
		return err;
	snprintf(link, sizeof(link), "/proc/self/map_files/%lx-%lx", (unsigned long)k->lo, (unsigned long)k->hi);
	len = readlink(link, p, sizeof(p) - 1);
	if (len < 0 || stat(link, &st) < 0 || st.st_dev != k->dev || st.st_ino != k->ino) {
		shim_say("cannot journal", "(a shared mapping)", EACCES, "its file cannot be found again");
		return EACCES;
	}
	p[len] = 0;
	if (lstat(p, &ls) == 0 && (ls.st_dev != st.st_dev || ls.st_ino != st.st_ino))
		snprintf(p + len, sizeof(p) - (size_t)len, " (deleted)");      /* replaced: no name */
	err = pre_pending_at(p, &st);
	shim_unlock();
	return err;
}

/* Inside a hook: the kept mappings that [LO, LO + N) reaches are taken
 * and forgotten. 0 or the errno of a refusal. */
static int take_range(uintptr_t lo, size_t n)
{
	for (;;) {
		struct kept_map k = { 0, 0, 0, 0 };
		int err;

		lock();
		for (unsigned i = 0; i < MAPPED_N && !k.hi; i++)
			if (kept[i].hi && kept[i].lo < lo + n && lo < kept[i].hi)
				k = kept[i];
		unlock();
		if (!k.hi)
			return 0;
		if ((err = take_one(&k)))
			return err;
		mapped_forget(k.dev, k.ino);
	}
}

/* Outside a hook: take_range, refused as a hook refuses. 0 or -1. */
static int take_range_hook(uintptr_t lo, size_t n)
{
	struct hook_ctx c;
	int err;

	if (!hook_enter(&c))
		return 0;
	if ((err = take_range(lo, n))) {
		hook_refuse(&c, err);
		return -1;
	}
	hook_leave(&c);
	return 0;
}

/* a shared mapping of a file (MAP_SHARED, MAP_SHARED_VALIDATE) */
#define SHARED_FILE(f) (!((f) & MAP_ANONYMOUS) && ((f) & MAP_TYPE) != MAP_PRIVATE)

#define MMAP_HOOK(name, off_type)                                                          \
	HOT EXPORT void *name(void *a, size_t n, int p, int f, int fd, off_type o)          \
	{                                                                                 \
		void *m;                                                                  \
		if (__builtin_expect(!pend_has_fd(fd), 1) || !SHARED_FILE(f))             \
			return REAL(name)(a, n, p, f, fd, o);                             \
		if (!(p & PROT_WRITE)) {                                                  \
			m = REAL(name)(a, n, p, f, fd, o);                                \
			if (m == MAP_FAILED || keep(m, n, fd))                            \
				return m;                                                 \
			if (pend_before(fd) < 0) {   /* no slot: taken now */          \
				int e = errno;                                            \
				munmap(m, n);                                             \
				errno = e;                                                \
				return MAP_FAILED;                                        \
			}                                                                 \
			shim_unlock();                                                    \
			return m;                                                         \
		}                                                                         \
		if (pend_before(fd) < 0)                                               \
			return MAP_FAILED;                                                \
		m = REAL(name)(a, n, p, f, fd, o);                                        \
		shim_unlock();                                                            \
		return m;                                                                 \
	}
MMAP_HOOK(mmap, off_t)
MMAP_HOOK(mmap64, off64_t)

HOT EXPORT int mprotect(void *a, size_t n, int p)
{
	if (__builtin_expect(!(p & PROT_WRITE) || !any(), 1))
		return REAL(mprotect)(a, n, p);
	if (take_range_hook((uintptr_t)a, n))
		return -1;
	return REAL(mprotect)(a, n, p);
}

EXPORT int pkey_mprotect(void *a, size_t n, int p, int key)
{
	if ((p & PROT_WRITE) && any() && take_range_hook((uintptr_t)a, n))
		return -1;
	return REAL(pkey_mprotect)(a, n, p, key);
}

HOT EXPORT int munmap(void *a, size_t n)
{
	int r = REAL(munmap)(a, n);

	if (__builtin_expect(any(), 0) && r == 0)
		forget_range((uintptr_t)a, n);
	return r;
}

/* mremap moves or grows a mapping: a kept one is taken first */
EXPORT void *mremap(void *a, size_t n, size_t m, int fl, ...)
{
	va_list ap;
	void *to;

	va_start(ap, fl);
	to = va_arg(ap, void *);
	va_end(ap);
	if (any() && take_range_hook((uintptr_t)a, n))
		return MAP_FAILED;
	return REAL(mremap)(a, n, m, fl, to);
}

/* syscall() of the same, inside its hook: 0 or the errno of a refusal */
HIDDEN int mapped_syscall(long nr, const long a[6])
{
	switch (nr) {
	case SYS_mmap:          /* read-only or not: taken at once */
		return SHARED_FILE((int)a[3]) ? pend_take((int)a[4]) : 0;
	case SYS_mprotect:
	case SYS_pkey_mprotect:
		return (a[2] & PROT_WRITE) && any() ? take_range((uintptr_t)a[0], (size_t)a[1]) : 0;
	case SYS_mremap:
		return any() ? take_range((uintptr_t)a[0], (size_t)a[1]) : 0;
	}
	return 0;
}
