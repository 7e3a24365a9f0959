/*
 * open.c - the open family (variadic, and the fortified __open_2 kind) and
 * syscall(). An open that can write journals its pre-image first; a
 * read-only open costs a string check and no system call.
 *
 * syscall() dispatches the numbers that change files to the same checks as
 * the libc wrappers and forwards every other number with six long
 * arguments. libffi cannot do better here: a variadic callee cannot know how
 * many arguments it was given, and on x86-64 and aarch64 the kernel takes
 * at most six integer registers, which glibc's own syscall() passes on the
 * same way.
 */
#include <linux/openat2.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "shim.h"

/* Calls newer than this system's headers (one number on every ABI) */
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452       /* Linux 6.6 */
#endif
#ifndef SYS_file_setattr
#define SYS_file_setattr 469    /* Linux 6.17 */
#endif
#ifndef SYS_setxattrat
#define SYS_setxattrat 463      /* Linux 6.13 */
#define SYS_removexattrat 466
#endif

enum open_kind { K_OPEN, K_OPEN64, K_OPENAT, K_OPENAT64, K_OPEN_2, K_OPEN64_2, K_OPENAT_2, K_OPENAT64_2 };

static int call_real_open(enum open_kind k, int d, const char *p, int f, mode_t m)
{
	switch (k) {
	case K_OPEN:       return REAL(open)(p, f, m);
	case K_OPEN64:     return REAL(open64)(p, f, m);
	case K_OPENAT:     return REAL(openat)(d, p, f, m);
	case K_OPENAT64:   return REAL(openat64)(d, p, f, m);
	case K_OPEN_2:     return REAL(__open_2)(p, f);
	case K_OPEN64_2:   return REAL(__open64_2)(p, f);
	case K_OPENAT_2:   return REAL(__openat_2)(d, p, f);
	case K_OPENAT64_2: return REAL(__openat64_2)(d, p, f);
	}
	return -1;
}

/* An open that only reads: the hidden rules alone judge it. O_PATH ones
 * take the general way (they read nothing, and fts keeps their paths). */
static inline bool only_reads(int f)
{
	return (f & O_ACCMODE) == O_RDONLY && !(f & (O_CREAT | O_TRUNC | O_PATH));
}

/* openat2(D, P, {F, RESOLVE_NO_SYMLINKS}): the fd or -errno. Straight to
 * the kernel on x86-64: libc's syscall() is one more call and return, and
 * its variadic arguments moved about, on the path of every read. */
static long sys_openat2_nosym(int d, const char *p, int f)
{
	struct open_how how = { .flags = (uint64_t)(unsigned)f, .resolve = RESOLVE_NO_SYMLINKS };
#if defined(__x86_64__)
	register long r10 __asm__("r10") = (long)sizeof(how);
	long r;

	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"((long)SYS_openat2), "D"((long)d), "S"(p), "d"(&how), "r"(r10), "m"(how)
			 : "rcx", "r11", "memory");
	return r;
#else
	long r = REAL(syscall)(SYS_openat2, d, p, &how, sizeof(how));

	return r < 0 ? -errno : r;
#endif
}

/*
 * Judge the file the kernel resolves D/P to (symlinks followed, as the
 * real open will): its name read back from an O_PATH descriptor. -1 with
 * errno set (refused), or -2: do the real open (allowed, or the kernel
 * cannot resolve it or name it: the real open then fails, or reads a file
 * deeper than PATH_MAX, which no rule names either).
 */
static int open_resolved(int d, const char *p, int f)
{
	char real[PATH_MAX];
	int pfd, err;

	pfd = openat(d, p, O_PATH | O_CLOEXEC | (f & O_NOFOLLOW));
	if (pfd < 0)
		return -2;      /* the real open says why */
	err = path_fd(real, pfd);
	close(pfd);
	if (err == -ENAMETOOLONG && (err = guard_unnamed("read", p))) {
		errno = err;
		return -1;
	}
	if (!err && !shim_fd_of_removed(p, real) && (err = guard_read(real))) {
		errno = err;
		return -1;
	}
	return -2;
}

/* The kernel has no openat2 (before 5.6; valgrind; a seccomp profile that
 * answers ENOSYS): every read is judged as the kernel resolves it. */
static bool no_openat2;

/*
 * A read-only open in enforce mode: judged on its lexical path, then
 * opened with openat2(RESOLVE_NO_SYMLINKS), so that a symlink on the way
 * cannot lead where the lexical verdict did not look (a link in the
 * workspace to ~/.ssh/id_rsa). In the common case that is the open itself,
 * one system call as without the shim, and the lexical verdict was exact.
 * A path with a symlink in it (ELOOP), or one the shim cannot spell as an
 * absolute path of less than PATH_MAX bytes (a deep cwd joined to a path
 * with ".." in it), is judged again as the kernel resolves it, and so is
 * every read where openat2 cannot be used (no such system call, refused by
 * a seccomp filter, flags it does not take): the real open then follows
 * symlinks the lexical verdict never saw. Returns the fd, -1 with errno set
 * (refused, or the kernel's own failure), or -2: do the real open (judged).
 * *ABS: the lexical path (P itself, or BUF), or "".
 */
HOT static int open_read(int d, const char *p, int f, char buf[PATH_MAX], const char **abs)
{
	long fd;
	int err;

	if ((err = path_abs_ref(buf, d, p, abs))) {
		*abs = "";
		return open_resolved(d, p, f);
	}
	if ((err = guard_read(*abs))) {
		errno = err;
		return -1;
	}
	if (__builtin_expect(no_openat2, 0))
		return open_resolved(d, p, f);
	fd = sys_openat2_nosym(d, p, f);
	if (fd >= 0)
		return (int)fd;
	if (fd == -ENOSYS)
		no_openat2 = true;
	if (fd == -ELOOP || fd == -ENOSYS || fd == -EPERM || fd == -EINVAL || fd == -E2BIG || fd == -EXDEV)
		return open_resolved(d, p, f);
	errno = (int)-fd;
	return -1;
}

/* open_read's answer for D/P opened with F: the fd, -1 with errno set, or
 * -2 (the real open, judged). fopen's read opens so (hooks.c). */
HIDDEN int open_read_fd(int d, const char *p, int f)
{
	char buf[PATH_MAX];
	const char *abs;

	return open_read(d, p, f, buf, &abs);
}

/* A read that another function opens (glibc's fopen and freopen open
 * through an internal open no hook sees): judged as open_read judges one,
 * with an O_PATH descriptor closed at once. 0, or the errno the call must
 * fail with (a refusal, or the kernel's own answer, the same the real call
 * would get). */
HIDDEN int open_read_judge(int d, const char *p)
{
	int fd = open_read_fd(d, p, O_PATH | O_CLOEXEC);

	if (fd == -1)
		return errno;
	if (fd >= 0)
		close(fd);
	return 0;
}

HOT static int open_hook(enum open_kind k, int d, const char *p, int f, mode_t m)
{
	char abs[PATH_MAX];
	struct hook_ctx c;
	int err, fd;

	if (!hook_enter(&c))
		return call_real_open(k, d, p, f, m);
	if (only_reads(f) && guard_active()) {
		const char *a;
		fd = open_read(d, p, f, abs, &a);
		if (fd == -1) {
			hook_refuse(&c, errno);
			return -1;
		}
		hook_leave(&c);
		if (fd == -2)
			fd = call_real_open(k, d, p, f, m);
		/* directories: the *at calls that come next look their path up */
		if (fd >= 0 && a[0] && (f & O_DIRECTORY)) {
			int e = errno;
			fdcache_put(fd, a);
			errno = e;
		} else if (fd >= 0 && (err = fetched_opened(fd, false))) {
			close(fd);              /* a carrier's source, refused (fetched.c) */
			errno = err;
			return -1;
		}
		return fd;
	}
	bool later = false;
	err = pre_open_abs(d, p, f, abs, &later);
	if (err) {
		shim_unlock();
		hook_refuse(&c, err);
		return -1;
	}
	hook_leave(&c);
	fd = call_real_open(k, d, p, f, m);
	shim_unlock();
	/* a carrier's source, or its copy (fetched.c) */
	if (fd >= 0 && !(f & (O_DIRECTORY | O_PATH)) && (err = fetched_opened(fd, (f & O_ACCMODE) != O_RDONLY))) {
		close(fd);
		errno = err;
		return -1;
	}
	/* an in-place write's pre-image waits for the first write (pending.c);
	 * a read-only descriptor (O_CREAT of a file that was there) never
	 * changes its file */
	if (fd >= 0 && later && (f & O_ACCMODE) != O_RDONLY && (err = pend_opened(fd, f))) {
		close(fd);
		errno = err;
		return -1;
	}
	/* Remember where directories and written files are, for the *at and
	 * f* calls that come next (O_PATH ones too: fts uses them); not the
	 * devices a shell's redirections write (`2>/dev/null`), which no such
	 * call follows, nearly: one is looked up in /proc if it does. Files
	 * in /dev/shm are files (shm_open, then ftruncate). */
	if (fd >= 0 && abs[0] && ((f & (O_DIRECTORY | O_PATH)) || (f & O_ACCMODE) != O_RDONLY) &&
	    (strncmp(abs, "/dev/", 5) || !strncmp(abs, "/dev/shm/", 9))) {
		int e = errno;
		fdcache_put(fd, abs);
		errno = e;
	}
	return fd;
}

static bool has_mode(int f)
{
	return (f & O_CREAT) || (f & __O_TMPFILE) == __O_TMPFILE;
}

#define MODE_ARG(f) ({                                   \
	mode_t m_ = 0;                                   \
	if (has_mode(f)) {                               \
		va_list ap;                              \
		va_start(ap, f);                         \
		m_ = (mode_t)va_arg(ap, int);            \
		va_end(ap);                              \
	}                                                \
	m_; })

HOT EXPORT int open(const char *p, int f, ...) { return open_hook(K_OPEN, AT_FDCWD, p, f, MODE_ARG(f)); }
HOT EXPORT int open64(const char *p, int f, ...) { return open_hook(K_OPEN64, AT_FDCWD, p, f, MODE_ARG(f)); }
/* creat is open(O_CREAT | O_WRONLY | O_TRUNC), and goes its way (tar makes
 * its archive with it) */
EXPORT int creat(const char *p, mode_t m) { return open_hook(K_OPEN, AT_FDCWD, p, O_CREAT | O_WRONLY | O_TRUNC, m); }
EXPORT int creat64(const char *p, mode_t m) { return open_hook(K_OPEN64, AT_FDCWD, p, O_CREAT | O_WRONLY | O_TRUNC, m); }
HOT EXPORT int openat(int d, const char *p, int f, ...) { return open_hook(K_OPENAT, d, p, f, MODE_ARG(f)); }
HOT EXPORT int openat64(int d, const char *p, int f, ...) { return open_hook(K_OPENAT64, d, p, f, MODE_ARG(f)); }
HOT EXPORT int __open_2(const char *p, int f) { return open_hook(K_OPEN_2, AT_FDCWD, p, f, 0); }
HOT EXPORT int __open64_2(const char *p, int f) { return open_hook(K_OPEN64_2, AT_FDCWD, p, f, 0); }
HOT EXPORT int __openat_2(int d, const char *p, int f) { return open_hook(K_OPENAT_2, d, p, f, 0); }
HOT EXPORT int __openat64_2(int d, const char *p, int f) { return open_hook(K_OPENAT64_2, d, p, f, 0); }

/* The check for one system call number, or 0 for numbers left alone. */
/* Said and recorded once per process: libuv asks from every thread. */
static int no_io_uring(void)
{
	static bool said;

	if (__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
		return ENOSYS;
	return shim_refuse("io_uring_setup", NULL, NULL, NULL, IO_URING_WHY, ENOSYS);
}

static int pre_syscall(long n, const long a[6])
{
#define S(i) ((const char *)a[i])
#define I(i) ((int)a[i])
	switch (n) {
	case SYS_open:       return pre_open(AT_FDCWD, S(0), I(1));
	case SYS_creat:      return pre_open(AT_FDCWD, S(0), O_CREAT | O_WRONLY | O_TRUNC);
	case SYS_openat:     return pre_open(I(0), S(1), I(2));
	case SYS_openat2:    return a[2] ? pre_open(I(0), S(1), (int)((const struct open_how *)a[2])->flags) : 0;
	case SYS_unlink:     return pre_remove(AT_FDCWD, S(0), 0);
	case SYS_rmdir:      return pre_remove(AT_FDCWD, S(0), AT_REMOVEDIR);
	case SYS_unlinkat:   return pre_remove(I(0), S(1), I(2));
	case SYS_rename:     return pre_rename(AT_FDCWD, S(0), AT_FDCWD, S(1), 0);
	case SYS_renameat:   return pre_rename(I(0), S(1), I(2), S(3), 0);
	case SYS_renameat2:  return pre_rename(I(0), S(1), I(2), S(3), (unsigned)a[4]);
	case SYS_mkdir:      return pre_mkdir(AT_FDCWD, S(0));
	case SYS_mkdirat:    return pre_mkdir(I(0), S(1));
	case SYS_mknod:      return pre_mknod(AT_FDCWD, S(0), (mode_t)a[1]);
	case SYS_mknodat:    return pre_mknod(I(0), S(1), (mode_t)a[2]);
	case SYS_link:       return pre_link(AT_FDCWD, S(0), AT_FDCWD, S(1), 0);
	case SYS_linkat:     return pre_link(I(0), S(1), I(2), S(3), I(4));
	case SYS_symlink:    return pre_symlink(AT_FDCWD, S(1));
	case SYS_symlinkat:  return pre_symlink(I(1), S(2));
	case SYS_truncate:   return pre_path(AT_FDCWD, S(0), JC_TRUNC, 1);
	case SYS_ftruncate:  return pre_fd(I(0), JC_TRUNC);
	case SYS_fallocate:  return pre_fd(I(0), JC_TRUNC);
	case SYS_chmod:
	case SYS_chown:
	case SYS_utime:
	case SYS_utimes:     return pre_path(AT_FDCWD, S(0), JC_META, 1);
	case SYS_setxattr:
	case SYS_removexattr:
		return fetched_xattr(S(0), -1, S(1), n == SYS_setxattr) ?: pre_path(AT_FDCWD, S(0), JC_META, 1);
	case SYS_lchown:     return pre_path(AT_FDCWD, S(0), JC_META, 0);
	case SYS_lsetxattr:
	case SYS_lremovexattr:
		return fetched_xattr(S(0), -1, S(1), n == SYS_lsetxattr) ?: pre_path(AT_FDCWD, S(0), JC_META, 0);
	case SYS_fchmod:
	case SYS_fchown:     return pre_fd(I(0), JC_META);
	case SYS_fsetxattr:
	case SYS_fremovexattr: return fetched_xattr(NULL, I(0), S(1), n == SYS_fsetxattr) ?: pre_fd(I(0), JC_META);
	case SYS_fchmodat:   return pre_path(I(0), S(1), JC_META, 1);
	case SYS_fchmodat2:  return pre_pathat(I(0), S(1), JC_META, I(3));
	case SYS_setxattrat:
	case SYS_removexattrat:         /* (dirfd, path, at_flags, name, ...) */
		return fetched_xattr(I(0) == AT_FDCWD || (S(1) && S(1)[0] == '/') ? S(1) : NULL, -1, S(3),
				     n == SYS_setxattrat) ?: pre_pathat(I(0), S(1), JC_META, I(2));
	case SYS_futimesat:  return S(1) ? pre_path(I(0), S(1), JC_META, 1) : pre_fd(I(0), JC_META);
	case SYS_fchownat:   return pre_pathat(I(0), S(1), JC_META, I(4));
	case SYS_kill:       return guard_signal((pid_t)a[0], I(1));
	case SYS_tgkill:     return guard_signal((pid_t)a[0], I(2));
	case SYS_tkill:      return guard_signal((pid_t)a[0], I(1));
	case SYS_rt_sigqueueinfo: return guard_signal((pid_t)a[0], I(1));
	case SYS_rt_tgsigqueueinfo: return guard_signal((pid_t)a[0], I(2));
	case SYS_pidfd_send_signal: return guard_pidfd(I(0), I(1));
	case SYS_prlimit64:  return a[2] ? guard_process((pid_t)a[0], "prlimit") : 0;
	case SYS_setpriority: return I(0) == PRIO_PGRP ? guard_group((pid_t)a[1], "setpriority") :
			      guard_process(I(0) == PRIO_PROCESS ? (pid_t)a[1] : -1, "setpriority");
	/* ionice -p/-P/-u: IOPRIO_WHO_PROCESS, _PGRP, _USER (1, 2, 3), as setpriority */
	case SYS_ioprio_set: return I(0) == 2 ? guard_group((pid_t)a[1], "ioprio_set") :
			     guard_process(I(0) == 1 ? (pid_t)a[1] : -1, "ioprio_set");
	case SYS_sched_setscheduler: return guard_process((pid_t)a[0], "sched_setscheduler");
	case SYS_sched_setparam: return guard_process((pid_t)a[0], "sched_setparam");
	case SYS_sched_setaffinity: return guard_process((pid_t)a[0], "sched_setaffinity");
	case SYS_process_vm_writev: return guard_process((pid_t)a[0], "process_vm_writev");
	case SYS_process_vm_readv: return guard_process((pid_t)a[0], "process_vm_readv");
	case SYS_ptrace:     return guard_ptrace(a[0], (pid_t)a[1]);
	case SYS_connect:    return guard_connect((const struct sockaddr *)a[1], (socklen_t)a[2]);
	case SYS_bind:       return pre_bind((const struct sockaddr *)a[1], (socklen_t)a[2]);
	case SYS_utimensat:  return S(1) ? pre_pathat(I(0), S(1), JC_META, I(3)) : pre_fd(I(0), JC_META);
	case SYS_io_uring_setup: return no_io_uring();
	/* through a descriptor whose pre-image waits (pending.c) */
	case SYS_write:
	case SYS_pwrite64:
	case SYS_writev:
	case SYS_pwritev:
	case SYS_pwritev2:
	case SYS_sendfile:   return pend_take(I(0));
	case SYS_copy_file_range:
	case SYS_splice:     return pend_take(I(2));
	case SYS_mmap:
	case SYS_mprotect:
	case SYS_pkey_mprotect:
	case SYS_mremap:
	case SYS_madvise:
	case SYS_process_madvise: return mapped_syscall(n, a);
	case SYS_io_submit:
	case SYS_sendmsg:
	case SYS_sendmmsg:   return pend_take_all(false);
	case SYS_ioctl:      return pre_ioctl(I(0), (unsigned long)a[1], (const void *)a[2]);
	case SYS_file_setattr: return pre_file_setattr(I(0), S(1), (const void *)a[2], (size_t)a[3], (unsigned)a[4]);
	}
	return 0;
#undef S
#undef I
}

EXPORT long syscall(long n, ...)
{
	struct hook_ctx c;
	va_list ap;
	long a[6];
	int err;

	va_start(ap, n);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	fdcache_syscall(n, a);  /* whether or not the hook runs */
	if (!hook_enter(&c))
		return REAL(syscall)(n, a[0], a[1], a[2], a[3], a[4], a[5]);
	switch (n) {            /* the descriptor guards of fdguard.c */
	case SYS_close:
		hook_leave(&c);
		return close((int)a[0]);
	case SYS_close_range:
		hook_leave(&c);
		return close_range((unsigned)a[0], (unsigned)a[1], (int)a[2]);
	case SYS_dup:
		hook_leave(&c);
		return dup((int)a[0]);
	case SYS_pidfd_getfd:   /* judged, and its copy marked: pending.c */
		hook_leave(&c);
		return pidfd_getfd((int)a[0], (int)a[1], (unsigned)a[2]);
	case SYS_fcntl:
		hook_leave(&c);
		return fcntl((int)a[0], (int)a[1], (void *)a[2]);
	case SYS_dup2:
		hook_leave(&c);
		return dup2((int)a[0], (int)a[1]);
	case SYS_dup3:
		hook_leave(&c);
		return dup3((int)a[0], (int)a[1], (int)a[2]);
	case SYS_execve:        /* judged, recorded, the environment kept: exec.c */
		hook_leave(&c);
		return execve((const char *)a[0], (char *const *)a[1], (char *const *)a[2]);
	case SYS_execveat:
		hook_leave(&c);
		return execveat((int)a[0], (const char *)a[1], (char *const *)a[2], (char *const *)a[3], (int)a[4]);
	}
	err = pre_syscall(n, a);
	if (err == PRE_DONE) {
		shim_unlock();
		hook_leave(&c);
		return 0;
	}
	if (err) {
		shim_unlock();
		hook_refuse(&c, err);
		return -1;
	}
	hook_leave(&c);
	long r = REAL(syscall)(n, a[0], a[1], a[2], a[3], a[4], a[5]);
	shim_unlock();
	return r;
}

/* glob and glob64 list directories through glibc's own opendir, which no
 * hook sees: unless the caller brings functions of its own
 * (GLOB_ALTDIRFUNC, as make does), they get the hooked opendir, so that a
 * pattern under a hidden directory is judged as ls's listing of it, at
 * every directory it reads. */
static void *glob_opendir(const char *p) { return opendir(p); }
static void glob_closedir(void *d) { closedir(d); }
static struct dirent *glob_readdir(void *d) { return readdir(d); }
static struct dirent64 *glob_readdir64(void *d) { return readdir64(d); }
static int glob_stat(const char *p, struct stat *st) { return stat(p, st); }
static int glob_lstat(const char *p, struct stat *st) { return lstat(p, st); }
static int glob_stat64(const char *p, struct stat64 *st) { return stat64(p, st); }
static int glob_lstat64(const char *p, struct stat64 *st) { return lstat64(p, st); }

#define GLOB_HOOK(name, type, sfx)                                                         \
	EXPORT int name(const char *p, int fl, int (*e)(const char *, int), type *g)        \
	{                                                                                 \
		shim_ensure();                                                            \
		if (shim_ready && !shim_busy && g && !(fl & GLOB_ALTDIRFUNC)) {           \
			g->gl_opendir = glob_opendir;                                     \
			g->gl_readdir = glob_readdir##sfx;                                \
			g->gl_closedir = glob_closedir;                                   \
			g->gl_lstat = glob_lstat##sfx;                                    \
			g->gl_stat = glob_stat##sfx;                                      \
			fl |= GLOB_ALTDIRFUNC;                                            \
		}                                                                         \
		return REAL(name)(p, fl, e, g);                                           \
	}
GLOB_HOOK(glob, glob_t, )
GLOB_HOOK(glob64, glob64_t, 64)
