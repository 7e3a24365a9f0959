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
 * pending descriptor of the file, or, once that is closed, by the file's
 * name at the mmap (or the name the kernel has for the mapping, in
 * /proc/self/map_files, where the file moved since). mremap of one takes
 * it first (the range moves), and so do madvise(MADV_REMOVE), which
 * punches a hole in the file, and a userfaultfd registration of its range
 * (UFFDIO_COPY fills a shared mapping's holes: hooks.c); munmap forgets
 * it. Where no slot is free, the mmap takes it at once; a vfork becomes a
 * fork while one is kept.
 *
 * Every mprotect looks at one word (how many are kept) unless it adds
 * PROT_WRITE; JITs' mprotects of anonymous memory pass at that cost.
 */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "shim.h"

#define MAPPED_N 32

/* The slots; each one's file name (as its descriptor had it at the mmap)
 * is among the large arrays (layout.ld): read only to take it. */
static struct kept_map { uintptr_t lo, hi; dev_t dev; ino_t ino; } kept[MAPPED_N];
static char kept_path[MAPPED_N][PATH_MAX];
static unsigned kept_n;         /* slots in use */
/* held only to read or write slots, with signals blocked (a handler's
 * mprotect must not wait for the code it interrupted); a fork child's is
 * free (state.c's atfork handler: another thread may have held it) */
HIDDEN int mapped_lock_word;

static void lock(sigset_t *old)
{
	shim_spin_lock(&mapped_lock_word, old);
}

static void unlock(const sigset_t *old)
{
	shim_spin_unlock(&mapped_lock_word, old);
}

static inline bool any(void)
{
	return __atomic_load_n(&kept_n, __ATOMIC_ACQUIRE) != 0;
}

HIDDEN bool mapped_any(void)
{
	return any();
}

static uintptr_t page_up(uintptr_t x)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);

	return (x + page - 1) & ~(page - 1);
}

static void drop(unsigned i)
{
	kept[i].hi = 0;
	__atomic_sub_fetch(&kept_n, 1, __ATOMIC_RELEASE);
}

/* Keep the read-only mapping M (N bytes) of FD's file DEV:INO; false: no
 * slot. */
static bool keep(void *m, size_t n, int fd, dev_t dev, ino_t ino)
{
	char p[PATH_MAX];
	bool kept_it = false;
	sigset_t old;

	if (txn_vfork_child() || path_fd(p, fd))
		return false;
	lock(&old);
	for (unsigned i = 0; i < MAPPED_N && !kept_it; i++)
		if (!kept[i].hi) {
			kept[i] = (struct kept_map){ (uintptr_t)m, page_up((uintptr_t)m + n), dev, ino };
			memcpy(kept_path[i], p, strlen(p) + 1);
			__atomic_add_fetch(&kept_n, 1, __ATOMIC_RELEASE);
			kept_it = true;
		}
	unlock(&old);
	return kept_it;
}

HIDDEN void mapped_forget(dev_t dev, ino_t ino)
{
	sigset_t old;

	if (!any())
		return;
	lock(&old);
	for (unsigned i = 0; i < MAPPED_N; i++)
		if (kept[i].hi && kept[i].dev == dev && kept[i].ino == ino)
			drop(i);
	unlock(&old);
}

/* Forget the mappings wholly inside [LO, LO + N) (unmapped). */
static void forget_range(uintptr_t lo, size_t n)
{
	uintptr_t hi = page_up(lo + n);
	sigset_t old;

	lock(&old);
	for (unsigned i = 0; i < MAPPED_N; i++)
		if (kept[i].hi && kept[i].lo >= lo && kept[i].hi <= hi)
			drop(i);
	unlock(&old);
}

/* Take the file of the kept mapping K (its name at the mmap: P): through a
 * pending descriptor of it, by that name if the file still has it, else by
 * the mapping's own name in /proc (which only a privileged process may
 * read). 0 or the errno of a refusal (said). */
static int take_one(const struct kept_map *k, char p[PATH_MAX])
{
	char link[64];
	struct stat st;
	bool found;
	ssize_t len;
	int err = pend_take_id(k->dev, k->ino, &found);

	if (err || found)
		return err;
	if (stat(p, &st) < 0 || st.st_dev != k->dev || st.st_ino != k->ino) {
		snprintf(link, sizeof(link), "/proc/self/map_files/%lx-%lx", (unsigned long)k->lo,
			 (unsigned long)k->hi);
		len = readlink(link, p, PATH_MAX - 1);
		if (len < 0 || stat(link, &st) < 0 || st.st_dev != k->dev || st.st_ino != k->ino) {
			shim_say("cannot journal", "(a shared mapping)", EACCES,
				 "its file was moved and cannot be found again");
			return EACCES;
		}
		p[len] = 0;
	}
	err = pre_pending_at(p, &st);
	shim_unlock();
	return err;
}

/* Inside a hook: the kept mappings that [LO, LO + N) reaches are taken
 * and forgotten. 0 or the errno of a refusal. */
static int take_range(uintptr_t lo, size_t n)
{
	if (!n)
		n = 1;          /* mremap's old size 0: a copy of the mapping at LO */
	for (;;) {
		struct kept_map k = { 0, 0, 0, 0 };
		char p[PATH_MAX];
		sigset_t old;
		int err;

		lock(&old);
		for (unsigned i = 0; i < MAPPED_N && !k.hi; i++)
			if (kept[i].hi && kept[i].lo < lo + n && lo < kept[i].hi) {
				k = kept[i];
				memcpy(p, kept_path[i], strlen(kept_path[i]) + 1);
			}
		unlock(&old);
		if (!k.hi)
			return 0;
		if ((err = take_one(&k, p)))
			return err;
		mapped_forget(k.dev, k.ino);
	}
}

HIDDEN int mapped_take_range(uintptr_t lo, size_t n)
{
	return any() ? take_range(lo, n) : 0;
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
		dev_t dev;                                                                \
		ino_t ino;                                                                \
		if (__builtin_expect(!pend_has_fd(fd), 1) || !SHARED_FILE(f)) {           \
			m = REAL(name)(a, n, p, f, fd, o);                                \
			/* MAP_FIXED over a kept one replaces it */                       \
			if (__builtin_expect(any(), 0) && (f & MAP_FIXED) && m != MAP_FAILED) \
				forget_range((uintptr_t)m, n);                            \
			return m;                                                         \
		}                                                                         \
		if (!(p & PROT_WRITE) && pend_id_of(fd, &dev, &ino)) {                    \
			m = REAL(name)(a, n, p, f, fd, o);                                \
			if (m == MAP_FAILED || keep(m, n, fd, dev, ino))                  \
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

/* MADV_REMOVE frees a shared mapping's pages and the file's blocks with
 * them: a hole punched through a read-only mapping of a read-write
 * descriptor */
EXPORT int madvise(void *a, size_t n, int adv)
{
	if (adv == MADV_REMOVE && any() && take_range_hook((uintptr_t)a, n))
		return -1;
	return REAL(madvise)(a, n, adv);
}

EXPORT int posix_madvise(void *a, size_t n, int adv)
{
	if (adv == MADV_REMOVE && any() && take_range_hook((uintptr_t)a, n))
		return errno;
	return REAL(posix_madvise)(a, n, adv);
}

EXPORT ssize_t process_madvise(int pidfd, const struct iovec *v, size_t vn, int adv, unsigned fl)
{
	for (size_t i = 0; adv == MADV_REMOVE && any() && i < vn; i++)
		if (take_range_hook((uintptr_t)v[i].iov_base, v[i].iov_len))
			return -1;
	return REAL(process_madvise)(pidfd, v, vn, adv, fl);
}

/* glibc's private names of the same (dlsym finds them) */
EXPORT void *__mmap(void *a, size_t n, int p, int f, int fd, off_t o) { return mmap(a, n, p, f, fd, o); }
EXPORT int __mprotect(void *a, size_t n, int p) { return mprotect(a, n, p); }
EXPORT int __munmap(void *a, size_t n) { return munmap(a, n); }
EXPORT int __madvise(void *a, size_t n, int adv) { return madvise(a, n, adv); }

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
	case SYS_madvise:
		return a[2] == MADV_REMOVE && any() ? take_range((uintptr_t)a[0], (size_t)a[1]) : 0;
	case SYS_process_madvise:
		for (size_t i = 0; a[3] == MADV_REMOVE && any() && i < (size_t)a[2]; i++) {
			const struct iovec *v = (const struct iovec *)a[1] + i;
			int err = take_range((uintptr_t)v->iov_base, v->iov_len);
			if (err)
				return err;
		}
		return 0;
	}
	return 0;
}
