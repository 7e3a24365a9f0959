/*
 * fdreuse.c - a host whose directory descriptors are closed where no hook
 * sees it (glibc's closedir and fclose close inside libc) and whose numbers
 * then come back, through dup(), for other directories: the *at calls
 * through the new descriptor must be journaled under the new directory's
 * path, not the one the number named before. And a file's: a stream
 * fopen opens (inside libc) on the number of a file closed by fclose, then
 * changed through its descriptor (fchmod, ftruncate).
 *
 * And numbers that come back where no hook sees them at all: a directory
 * the shim keeps closed by closedir, or by fclose of a stream fdopen made
 * on it, whose number opendir's own open then takes for C: what is removed
 * through dirfd() of that stream is C's (the shim's cache must not name A).
 * Also closed by pclose of such a stream (no hook of its own: glibc's
 * pclose is its fclose), the number then taken by a plain read-only open.
 *
 * And every other way the C library closes or replaces a number: glibc's
 * exported __close, __dup2 and _IO_fclose, endmntent and mq_close of it,
 * syscall() of close, close_range, dup2 and dup3: C/victim4 to C/victim12
 * are removed through A's number come back for C. Last, the descriptor
 * table parted from the memory: a thread that unshares its table puts C on a
 * number that still names A for the main thread (A/victim13 is removed
 * through it, and journaled as A's); a clone child that shares the table
 * but not the memory puts C on a number the main thread's memory still
 * says is A's (C/victim14 is removed through it, and journaled as C's).
 * The same through close_range(CLOSE_RANGE_UNSHARE) (A/victim15), __clone
 * (C/victim16), a __vfork child (A/victim17), and a thread that unshares
 * its working directory and moves to C while the main thread removes
 * victim18 relative to its own, A (A/victim18).
 *
 * usage: fdreuse A B C   (three directories; creates, changes and removes
 * entries in B and C through reused numbers, and B/kept and B/other
 * through a reused file number; removes C/victim1 to C/victim12,
 * A/victim13, C/victim14, A/victim15, C/victim16, A/victim17 and
 * A/victim18)
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <mntent.h>
#include <mqueue.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int dir_fd(const char *p)
{
	int fd = open(p, O_RDONLY | O_DIRECTORY);

	if (fd < 0)
		perror(p);
	return fd;
}

/* Close the kept directory A's descriptor inside libc (closedir of
 * fdopendir, or fclose of fdopen), let opendir's own open take the number
 * for C, and remove C/NAME through it. */
static int remove_through_opendir(const char *a, const char *c, const char *name, int by_fclose)
{
	int fd = dir_fd(a);
	DIR *d;

	if (fd < 0)
		return -1;
	if (by_fclose) {
		FILE *f = fdopen(fd, "r");
		if (!f || fclose(f) != 0)
			return -1;
	} else {
		DIR *ad = fdopendir(fd);
		if (!ad || closedir(ad) != 0)
			return -1;
	}
	d = opendir(c);
	if (!d || dirfd(d) != fd) {
		fprintf(stderr, "fdreuse: opendir did not take the freed %d\n", fd);
		return -1;
	}
	if (unlinkat(dirfd(d), name, 0) < 0) {
		perror(name);
		return -1;
	}
	return closedir(d);
}

/* A duplicate of FD on the number WANT (the lowest free one). */
static int dup_onto_freed(int fd, int want)
{
	int n = dup(fd);

	if (n != want) {
		fprintf(stderr, "fdreuse: dup gave %d, not the freed %d\n", n, want);
		return -1;
	}
	return n;
}

extern int __close(int fd);
extern int __dup2(int a, int b);
extern int _IO_fclose(FILE *f);

/* Keep A open (the shim keeps its path), close or replace its number by
 * way HOW, and remove C/NAME through the number, now C's. */
static int remove_after(const char *a, const char *c, const char *name, int how)
{
	int fd = dir_fd(a), cfd = -1, q = -1;
	long r = 0;

	if (fd < 0)
		return -1;
	if (how >= 6 && (cfd = open(c, O_RDONLY)) < 0)
		return -1;
	switch (how) {
	case 0: r = __close(fd); break;
	case 1: r = endmntent(fdopen(fd, "r")) != 1; break;
	case 2: r = _IO_fclose(fdopen(fd, "r")); break;
	case 3: r = mq_close(fd); break;
	case 4: r = syscall(SYS_close, fd); break;
	case 5: r = syscall(SYS_close_range, fd, fd, 0); break;
	case 6: r = __dup2(cfd, fd) != fd; break;
	case 7: r = syscall(SYS_dup2, cfd, fd) != fd; break;
	case 8: r = syscall(SYS_dup3, cfd, fd, 0) != fd; break;
	}
	if (r) {
		fprintf(stderr, "fdreuse: way %d did not close %d\n", how, fd);
		return -1;
	}
	if (how < 6 && (q = open(c, O_RDONLY)) != fd) {
		fprintf(stderr, "fdreuse: open did not take the freed %d (way %d)\n", fd, how);
		return -1;
	}
	if (unlinkat(fd, name, 0) < 0) {
		perror(name);
		return -1;
	}
	if (cfd >= 0)
		close(cfd);
	return close(fd);
}

struct part { const char *c; int fd; };

/* In a table of its own: close its copy of the number and put C on it. */
static int put_c_on(struct part *p)
{
	if (close(p->fd) < 0 || open(p->c, O_RDONLY | O_DIRECTORY) != p->fd)
		return -1;
	return 0;
}

static void *unshared_thread(void *arg)
{
	struct part *p = arg;

	if (unshare(CLONE_FILES) < 0 || put_c_on(p) < 0)
		return arg;
	return NULL;
}

/* the same, its table its own through close_range's flag */
static void *close_range_thread(void *arg)
{
	struct part *p = arg;

	if (close_range(p->fd, p->fd, CLOSE_RANGE_UNSHARE) < 0 || open(p->c, O_RDONLY | O_DIRECTORY) != p->fd)
		return arg;
	return NULL;
}

/* a working directory of its own: C */
static void *chdir_thread(void *arg)
{
	struct part *p = arg;

	if (unshare(CLONE_FS) < 0 || chdir(p->c) < 0)
		return arg;
	return NULL;
}

static int cloned_child(void *arg)
{
	_exit(put_c_on(arg) < 0);
}

extern int __clone(int (*fn)(void *), void *stack, int flags, void *arg, ...);
extern pid_t __vfork(void);

/* A's number in the main thread, C's elsewhere (WHERE 0: a thread that
 * unshared its table; 1: a clone child sharing the table, not the memory:
 * then the main thread's number is C's too; 2: a thread whose table is its
 * own by close_range; 3: as 1, through __clone; 4: a __vfork child, whose
 * table is its own; 5: a thread with a working directory of its own, C,
 * and NAME removed by a path relative to the main thread's, A); remove
 * NAME through it. */
static int remove_parted(const char *a, const char *c, const char *name, int where)
{
	static char cabs[PATH_MAX], stack[1 << 16];
	struct part p = { realpath(c, cabs), dir_fd(a) };
	void *(*thread[])(void *) = { unshared_thread, NULL, close_range_thread, NULL, NULL, chdir_thread };
	pthread_t t;
	void *res;
	pid_t pid;
	int st;

	if (p.fd < 0 || !p.c)
		return -1;
	if (where == 5 && chdir(a) < 0)
		return -1;
	if (thread[where]) {
		if (pthread_create(&t, NULL, thread[where], &p) || pthread_join(t, &res) || res)
			return -1;
	} else if (where == 4) {
		if ((pid = __vfork()) == 0)
			_exit(put_c_on(&p) < 0);
		if (pid < 0 || waitpid(pid, &st, 0) != pid || st != 0)
			return -1;
	} else {
		pid = (where == 1 ? clone : __clone)(cloned_child, stack + sizeof(stack), CLONE_FILES | SIGCHLD, &p);
		if (pid < 0 || waitpid(pid, &st, 0) != pid || st != 0)
			return -1;
	}
	if (where == 5) {
		if (unlink(name) < 0) {
			perror(name);
			return -1;
		}
		return close(p.fd);
	}
	if (unlinkat(p.fd, name, 0) < 0) {
		perror(name);
		return -1;
	}
	return close(p.fd);
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	/* a change first: the session is open before any descriptor is kept */
	int s = open("started", O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (s < 0 || close(s) < 0)
		return 1;
	int b = dir_fd(argv[2]), c = dir_fd(argv[3]);
	/* A through open (the shim keeps its path), closed by closedir */
	int a = dir_fd(argv[1]);
	DIR *d = a >= 0 ? fdopendir(a) : NULL;
	if (b < 0 || c < 0 || !d || closedir(d) < 0)
		return 1;
	/* A's number comes back as a duplicate of B */
	int b2 = dup_onto_freed(b, a);
	if (b2 < 0)
		return 1;
	int fd = openat(b2, "made-in-b", O_WRONLY | O_CREAT | O_EXCL, 0640);
	if (fd < 0 || write(fd, "b\n", 2) != 2 || close(fd) < 0 ||
	    mkdirat(b2, "dir-in-b", 0750) < 0 || unlinkat(b2, "gone", 0) < 0 ||
	    fchmodat(b2, "kept", 0600, 0) < 0)
		return 1;
	/* B's number, kept too, closed by fclose of a stream on it */
	FILE *f = fdopen(b, "r");
	if (!f || fclose(f) != 0)
		return 1;
	int c2 = dup_onto_freed(c, b);
	if (c2 < 0)
		return 1;
	if (renameat(c2, "x", b2, "from-c") < 0 || symlinkat("kept", c2, "link-in-c") < 0)
		return 1;
	/* a file kept by the shim, closed by fclose; fopen's own open takes
	 * its number for another file, changed through the descriptor */
	int k = openat(b2, "kept", O_WRONLY | O_APPEND);
	FILE *kf = k >= 0 ? fdopen(k, "a") : NULL;
	if (!kf || fclose(kf) != 0)
		return 1;
	if (fchdir(b2) < 0)
		return 1;
	FILE *o = fopen("other", "r+");
	if (!o || fileno(o) != k) {
		fprintf(stderr, "fdreuse: fopen did not take the freed %d\n", k);
		return 1;
	}
	if (fchmod(fileno(o), 0604) < 0 || ftruncate(fileno(o), 1) < 0 || fclose(o) != 0)
		return 1;
	if (fchdir(c2) < 0 || chdir("..") < 0 || remove_through_opendir(argv[1], argv[3], "victim1", 0) < 0 ||
	    remove_through_opendir(argv[1], argv[3], "victim2", 1) < 0)
		return 1;
	int p = dir_fd(argv[1]), q;
	FILE *pf = p >= 0 ? fdopen(p, "r") : NULL;
	if (!pf)
		return 1;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-dealloc"
	(void)pclose(pf);       /* on purpose: glibc's pclose closes any stream */
#pragma GCC diagnostic pop
	if ((q = open(argv[3], O_RDONLY)) != p) {
		fprintf(stderr, "fdreuse: open did not take the freed %d\n", p);
		return 1;
	}
	if (unlinkat(q, "victim3", 0) < 0 || close(q) < 0)
		return 1;
	for (int how = 0; how <= 8; how++) {
		char name[16];
		snprintf(name, sizeof(name), "victim%d", 4 + how);
		if (remove_after(argv[1], argv[3], name, how) < 0)
			return 1;
	}
	/* Each in a process of its own, whose cache nothing distrusted
	 * before. 0: the thread's table is its own, the main thread's number
	 * stays A's. 1: the child's table is the main thread's, the number is
	 * C's for both. */
	for (int where = 0; where < 6; where++) {
		int st;
		char name[16];
		pid_t pid = fork();
		snprintf(name, sizeof(name), "victim%d", 13 + where);
		if (pid == 0)
			_exit(remove_parted(argv[1], argv[3], name, where) < 0);
		if (pid < 0 || waitpid(pid, &st, 0) != pid || st != 0)
			return 1;
	}
	/* clone3 with a bad pointer fails as the kernel says (the shim does
	 * not read the flags behind it) */
	errno = 0;
	if (syscall(SYS_clone3, (void *)8, 88) != -1 || errno != EFAULT) {
		fprintf(stderr, "fdreuse: clone3 of a bad pointer: %s\n", strerror(errno));
		return 1;
	}
	return close(b2) || close(c2) || close(c);
}
