/*
 * fdguard.c - keep the shim's own descriptors (the session directories and
 * this process's segment, all at or above a high floor) alive through a
 * program's close, dup2, dup3, close_range and closefrom: a close of one of
 * ours fails with EBADF as if it were not open, a dup onto one moves ours
 * out of the way first, and a range close skips ours. The calls that close
 * or replace a descriptor, glibc's own closes inside libc among them
 * (closedir, fclose, pclose, endmntent, fcloseall, daemon, login_tty), drop
 * its path from the descriptor cache (path.c); those that part the
 * descriptor table from this memory make the cache check each entry.
 */
#include <dirent.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <utmp.h>
#include "shim.h"

static int *const ours[] = { &shim.g.fd, &shim.s.dirfd, &shim.s.logfd, &shim.s.objfd };
#define NOURS (sizeof(ours) / sizeof(ours[0]))

/* Compared field by field (every close asks): no table of pointers to
 * load first. */
static inline __attribute__((always_inline)) bool is_ours(int fd)
{
	_Static_assert(NOURS == 4, "is_ours compares each descriptor of ours[]");
	return fd >= 0 && ((shim.seg_open && fd == shim.g.fd) ||
			   (shim.session_open && (fd == shim.s.dirfd || fd == shim.s.logfd || fd == shim.s.objfd)));
}

/* Move our descriptor FD elsewhere (before a dup2 onto its number). */
static void move_ours(int fd)
{
	int n = fcntl(fd, F_DUPFD_CLOEXEC, fd + 1);

	if (n < 0)
		return;
	for (size_t i = 0; i < NOURS; i++)
		if (*ours[i] == fd)
			*ours[i] = n;
	REAL(close)(fd);
}

HOT EXPORT int close(int fd)
{
	shim_ensure();
	if (shim_ready && is_ours(fd)) {
		errno = EBADF;
		return -1;
	}
	fdcache_drop(fd);
	pend_drop(fd);          /* closed even when close fails (EINTR, EIO) */
	fetched_closing(fd);
	int r = REAL(close)(fd), e = errno;
	if (fd >= 0)
		pend_unpark((unsigned)fd, (unsigned)fd);
	errno = e;
	return r;
}

/* Before a dup of A onto B: move ours away from B, forget B's path. */
static void before_dup_onto(int a, int b)
{
	shim_ensure();
	/* not in a vfork child (its guard is up): ours are numbers in the
	 * parent's table too, and the child has only copies */
	if (shim_ready && !shim_busy && a != b && is_ours(b)) {
		int e = errno;
		move_ours(b);
		errno = e;
	}
	fdcache_drop(b);
}

EXPORT int dup2(int a, int b)
{
	int r;

	if (pend_dup_before(a, b))
		return -1;
	before_dup_onto(a, b);
	r = REAL(dup2)(a, b);
	if (r >= 0 && r != a)
		pend_unpark((unsigned)r, (unsigned)r);
	if (r >= 0 && pend_dup(a, r))
		return -1;
	return r;
}

EXPORT int dup3(int a, int b, int fl)
{
	int r;

	if (pend_dup_before(a, b))
		return -1;
	before_dup_onto(a, b);
	r = REAL(dup3)(a, b, fl);
	if (r >= 0)
		pend_unpark((unsigned)r, (unsigned)r);
	if (r >= 0 && pend_dup(a, r))
		return -1;
	return r;
}

/* Close [lo, hi] but our descriptors, in the pieces between them. */
EXPORT int close_range(unsigned lo, unsigned hi, int fl)
{
	unsigned from = lo;

	shim_ensure();
	if (fl & CLOSE_RANGE_UNSHARE)   /* this thread's table becomes its own */
		fdcache_distrust();
	if (!(fl & CLOSE_RANGE_CLOEXEC))        /* which closes nothing yet */
		fdcache_drop_range(lo, hi);
	if (!shim_ready)
		return REAL(close_range)(lo, hi, fl);
	for (;;) {
		unsigned next = hi;
		bool found = false;
		for (size_t i = 0; i < NOURS; i++) {
			int fd = *ours[i];
			if (is_ours(fd) && (unsigned)fd >= from && (unsigned)fd <= next) {
				next = (unsigned)fd;
				found = true;
			}
		}
		if (!found) {
			int r = REAL(close_range)(from, hi, fl);
			if (r == 0 && !(fl & CLOSE_RANGE_CLOEXEC)) {
				pend_drop_range(lo, hi);
				pend_unpark(lo, hi);
			}
			return r;
		}
		if (next > from && REAL(close_range)(from, next - 1, fl) < 0)
			return -1;
		if (next == hi) {
			if (!(fl & CLOSE_RANGE_CLOEXEC)) {
				pend_drop_range(lo, hi);
				pend_unpark(lo, hi);
			}
			return 0;
		}
		from = next + 1;
	}
}

EXPORT void closefrom(int fd)
{
	if (fd >= 0)
		close_range((unsigned)fd, ~0u, 0);
}

/* glibc closes these descriptors with its internal close. */
EXPORT int closedir(DIR *d)
{
	__asm__("" : "+r"(d));  /* declared nonnull; glibc's own says EINVAL */
	if (d)
		fdcache_drop(dirfd(d));
	return REAL(closedir)(d);
}

static void stream_closing(FILE *f)
{
	if (f) {
		int fd = fileno_unlocked(f);
		fdcache_drop(fd);
		pend_drop(fd);
		fetched_closing(fd);
	}
}

EXPORT int fclose(FILE *f)
{
	stream_closing(f);
	popen_forget(f);
	return REAL(fclose)(f);
}

/* The other calls that close a stream's descriptor inside libc: endmntent,
 * and libio's exported insides. */
#define STREAM_CLOSE_HOOK(name)                           \
	EXPORT int name(FILE *f)                          \
	{                                                 \
		stream_closing(f);                        \
		return REAL(name)(f);                     \
	}
STREAM_CLOSE_HOOK(endmntent)
STREAM_CLOSE_HOOK(_IO_proc_close)
STREAM_CLOSE_HOOK(_IO_file_close)
STREAM_CLOSE_HOOK(_IO_file_close_it)

/* pclose reaps popen's child inside libc: a tool call popen started ends
 * there (exec.c), and is rewound on failure before the caller sees the
 * status. */
EXPORT int pclose(FILE *f)
{
	uint32_t key = popen_forget(f);
	int r, e;

	stream_closing(f);
	r = REAL(pclose)(f);
	e = errno;
	txn_system_done(key, r);
	errno = e;
	return r;
}

EXPORT void _IO_file_finish(FILE *f, int dealloc)
{
	stream_closing(f);
	REAL(_IO_file_finish)(f, dealloc);
}

/* glibc's exported names for close, dup2 and fclose */
EXPORT int __close(int fd) { return close(fd); }
EXPORT int __dup2(int a, int b) { return dup2(a, b); }
EXPORT int _IO_fclose(FILE *f) { return fclose(f); }

EXPORT int mq_close(mqd_t q)
{
	fdcache_drop(q);
	return REAL(mq_close)(q);
}

/* One side shares the descriptor table, or the working directory, and not
 * the memory, or the other way round: the descriptor cache, or the cached
 * cwd (path.c), is checked from then on. */
static void parting(uint64_t clone_flags)
{
	if ((clone_flags & CLONE_FILES) && !(clone_flags & CLONE_VM))
		(void)pend_flush_all(false);    /* its writes pass a table of its own */
	if (!(clone_flags & CLONE_VM) != !(clone_flags & CLONE_FILES))
		fdcache_distrust();
	if (!(clone_flags & CLONE_VM) != !(clone_flags & CLONE_FS))
		cwd_distrust();
}

/* unshare: a new mount or user namespace unshares the working directory
 * too. */
static void unsharing(long fl)
{
	if (fl & CLONE_FILES)
		fdcache_distrust();
	if (fl & (CLONE_FS | CLONE_NEWNS | CLONE_NEWUSER))
		cwd_distrust();
}

EXPORT int unshare(int fl)
{
	unsharing(fl);
	return REAL(unshare)(fl);
}

static int clone_parting(int (*fn)(void *), void *stack, int fl, void *arg, va_list ap)
{
	pid_t *ptid = va_arg(ap, pid_t *);
	void *tls = va_arg(ap, void *);
	pid_t *ctid = va_arg(ap, pid_t *);

	parting((unsigned)fl);
	return REAL(clone)(fn, stack, fl, arg, ptid, tls, ctid);
}

/* clone and glibc's other name for it. ptid, tls and ctid are read
 * whether passed or not, as glibc's clone does: only the flags say which
 * it uses. */
#define CLONE_HOOK(name)                                                  \
	EXPORT int name(int (*fn)(void *), void *stack, int fl, void *arg, ...) \
	{                                                                 \
		va_list ap;                                               \
		int r;                                                    \
		va_start(ap, arg);                                        \
		r = clone_parting(fn, stack, fl, arg, ap);                \
		va_end(ap);                                               \
		return r;                                                 \
	}
CLONE_HOOK(clone)
CLONE_HOOK(__clone)

/* syscall() of the same: the entries it closes or replaces dropped, the
 * cache distrusted where it parts, whether or not the hook runs. */
HIDDEN void fdcache_syscall(long n, const long a[6])
{
	switch (n) {
	case SYS_close:
		fdcache_drop((int)a[0]);
		pend_drop((int)a[0]);
		break;
	case SYS_dup2:
	case SYS_dup3:
		fdcache_drop((int)a[1]);
		break;
	case SYS_close_range:
		if (a[2] & CLOSE_RANGE_UNSHARE)
			fdcache_distrust();
		if (!(a[2] & CLOSE_RANGE_CLOEXEC))
			fdcache_drop_range((unsigned)a[0], (unsigned)a[1]);
		break;
	case SYS_unshare:
		unsharing(a[0]);
		break;
	case SYS_clone:
		parting((uint64_t)a[0]);
		break;
	case SYS_clone3:        /* its flags behind a pointer the kernel checks, not us */
	case SYS_vfork:         /* a child in this memory, with a table of its own */
		fdcache_distrust();
		cwd_distrust();
		break;
	}
}

EXPORT int fcloseall(void)
{
	fdcache_drop_range(0, ~0u);
	return REAL(fcloseall)();
}

/* and dup2 /dev/null or the terminal onto 0-2 */
EXPORT int daemon(int nochdir, int noclose)
{
	int r;

	if (!noclose)
		fdcache_drop_range(0, 2);
	r = REAL(daemon)(nochdir, noclose);
	if (r == 0 && !noclose)
		pend_drop_range(0, 2);
	return r;
}

EXPORT int login_tty(int fd)
{
	int r;

	fdcache_drop_range(0, 2);
	fdcache_drop(fd);
	r = REAL(login_tty)(fd);
	if (r == 0) {
		pend_drop_range(0, 2);
		pend_drop(fd);
	}
	return r;
}

static void dup_cached(int from, int to)
{
	char p[PATH_MAX];

	if (to >= 0 && path_fd_cached(from, p))
		fdcache_put(to, p);
}

EXPORT int dup(int fd)
{
	shim_ensure();
	int r = REAL(dup)(fd);
	if (r >= 0 && shim_ready) {
		int e = errno;
		dup_cached(fd, r);
		if (pend_dup(fd, r))
			return -1;      /* closed again: refused (pending.c) */
		errno = e;
	}
	return r;
}

static int fcntl_hook(int (*real)(int, int, ...), int fd, int cmd, void *arg)
{
	int r;

	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) {
		r = real(fd, cmd, arg);
		if (r >= 0 && shim_ready) {
			int e = errno;
			dup_cached(fd, r);
			if (pend_dup(fd, r))
				return -1;
			errno = e;
		}
		return r;
	}
	if (cmd == F_SETFL) {   /* clearing O_APPEND: hooks.c, pre_setfl */
		struct hook_ctx c;
		int err;

		if (!hook_enter(&c))
			return real(fd, cmd, arg);
		if ((err = pre_setfl(fd, (int)(intptr_t)arg))) {
			shim_unlock();
			hook_refuse(&c, err);
			return -1;
		}
		hook_leave(&c);
		r = real(fd, cmd, arg);
		shim_unlock();
		return r;
	}
	return real(fd, cmd, arg);
}

/* fcntl and fcntl64: the third argument, when there is one, is an int or a
 * pointer; passing it on as a pointer is what glibc's own wrapper does. */
#define FCNTL_HOOK(name)                                          \
	EXPORT int name(int fd, int cmd, ...)                     \
	{                                                         \
		va_list ap;                                       \
		void *arg;                                        \
		va_start(ap, cmd);                                \
		arg = va_arg(ap, void *);                         \
		va_end(ap);                                       \
		shim_ensure();                                    \
		return fcntl_hook(REAL(name), fd, cmd, arg);      \
	}
FCNTL_HOOK(fcntl)
FCNTL_HOOK(fcntl64)
EXPORT int __fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return fcntl(fd, cmd, arg);
}

/* ioctl: only the requests that set a file's inode flags are judged
 * (hooks.c, pre_ioctl); glibc's own ioctls (tcgetattr ...) do not come
 * here. The third argument is passed on as a pointer, as glibc's is. */
EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;
	struct hook_ctx c;
	int err, r;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	shim_ensure();
	if ((req & 0xff00ul) != 0x6600ul && (req & 0xff00ul) != 0x5800ul &&  /* neither an 'f' nor an 'X' */
	    (req & 0xff00ul) != 0x9400ul &&    /* nor a clone into FD (FICLONE) */
	    (req & 0xff00ul) != 0xaa00ul)      /* nor a userfaultfd's (mapped.c) */
		return REAL(ioctl)(fd, req, arg);
	if (!hook_enter(&c))
		return REAL(ioctl)(fd, req, arg);
	if ((err = pre_ioctl(fd, req, arg))) {
		shim_unlock();
		hook_refuse(&c, err);
		return -1;
	}
	hook_leave(&c);
	r = REAL(ioctl)(fd, req, arg);
	shim_unlock();
	return r;
}
