/*
 * fdwrite.c - write into a file opened O_RDWR (no O_TRUNC), whose
 * pre-image the shim takes at the first write (shim/pending.c), through one
 * of the ways a C program has: those no write() hook sees (stdio's internal
 * write, AIO's threads, backtrace_symbols_fd, glibc's other names), those
 * that make another descriptor of it (dup, F_DUPFD, pidfd_getfd, syscall()
 * of each), and calls that must not lose its mark (a dup that fails or
 * changes nothing, close_range that fails, fcloseall, a close in a clone
 * child or a thread with a table of its own). test_shim_pending.py runs
 * each under the shim, then rewinds and compares.
 *
 *   fdwrite WAY FILE
 *
 * writes "PENDING" at offset 0 of FILE (or where WAY says). Ways starting
 * "cx-" open FILE O_CLOEXEC and let another program move it first: they
 * exit 3 when the write is refused (EACCES). "read" only reads. Exit
 * status 0, 1 with a message, 2 bad usage, 3 refused, 4 the kernel does
 * not do it here (madvise_remove).
 */
#include <aio.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char word[] = "PENDING";
#define N (sizeof(word) - 1)

extern int __fcntl(int fd, int cmd, ...);
extern ssize_t __write(int fd, const void *b, size_t n);
extern ssize_t __pwrite64(int fd, const void *b, size_t n, off64_t o);
extern FILE *_IO_fdopen(int fd, const char *m);
extern FILE *_IO_popen(const char *cmd, const char *m);

static int fd;
static const char *file;

static int fail(const char *what)
{
	perror(what);
	return 1;
}

static int put(int to)
{
	if (write(to, word, N) != (ssize_t)N)
		return errno == EACCES ? 3 : fail("write");
	return 0;
}

static int aio_way(bool lio)
{
	struct aiocb cb;
	const struct aiocb *list[1] = { &cb };

	memset(&cb, 0, sizeof(cb));
	cb.aio_fildes = fd;
	cb.aio_buf = (void *)word;
	cb.aio_nbytes = N;
	cb.aio_lio_opcode = LIO_WRITE;
	if (!lio ? aio_write(&cb) : lio_listio(LIO_NOWAIT, (struct aiocb *[]){ &cb }, 1, NULL))
		return fail("aio");
	while (aio_error(&cb) == EINPROGRESS)
		aio_suspend(list, 1, NULL);
	return aio_return(&cb) == (ssize_t)N ? 0 : fail("aio");
}

static int clone_child(void *arg)
{
	(void)arg;
	close(fd);
	return 0;
}

static void *unshared_close(void *arg)
{
	(void)arg;
	if (unshare(CLONE_FILES) == 0)
		close(fd);
	return NULL;
}

/* the parent waits on a pipe whose writer first makes a file beside FILE */
static int splice_wait(void)
{
	int p[2];
	pid_t pid;

	if (pipe(p))
		return fail("pipe");
	pid = fork();
	if (pid == 0) {
		char beside[4096];
		snprintf(beside, sizeof(beside), "%s.beside", file);
		close(open(beside, O_WRONLY | O_CREAT, 0644));
		_exit(write(p[1], word, N) == (ssize_t)N ? 0 : 1);
	}
	close(p[1]);
	if (splice(p[0], NULL, fd, NULL, N, 0) != (ssize_t)N)
		return fail("splice");
	return waitpid(pid, NULL, 0) == pid ? 0 : fail("waitpid");
}

static int way_of(const char *way)
{
	char cmd[8192];

	if (!strcmp(way, "stdio")) {
		FILE *f = fdopen(fd, "r+");
		if (!f || fwrite(word, 1, N, f) != N || fclose(f))
			return fail("stdio");
	} else if (!strcmp(way, "_IO_fdopen")) {
		FILE *f = _IO_fdopen(fd, "r+");
		if (!f || fputs(word, f) < 0 || fclose(f))
			return fail("_IO_fdopen");
	} else if (!strcmp(way, "dprintf")) {
		if (dprintf(fd, "%s", word) != (int)N)
			return fail("dprintf");
	} else if (!strcmp(way, "stdout")) {
		if (dup2(fd, 1) != 1)
			return fail("dup2");
		printf("%s", word);
		if (fflush(stdout))
			return fail("printf");
	} else if (!strcmp(way, "dupfd_onto_stdout")) {     /* F_DUPFD 0 lands on 1 */
		close(1);
		if (fcntl(fd, F_DUPFD, 0) != 1)
			return fail("F_DUPFD");
		printf("%s", word);
		if (fflush(stdout))
			return fail("printf");
	} else if (!strcmp(way, "aio") || !strcmp(way, "lio")) {
		return aio_way(way[0] == 'l');
	} else if (!strcmp(way, "mmap")) {
		char *m = mmap(NULL, N, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED || mprotect(m, N, PROT_READ | PROT_WRITE))
			return fail("mmap");
		memcpy(m, word, N);
		if (msync(m, N, MS_SYNC) || munmap(m, N))
			return fail("msync");
	} else if (!strcmp(way, "mmap_closed") || !strcmp(way, "mmap_moved")) {
		/* the descriptor closed, the mapping moved: found by its own name */
		char *m = mmap(NULL, N, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED || close(fd))
			return fail("mmap");
		if (way[5] == 'm' && (m = mremap(m, N, 2 * N, MREMAP_MAYMOVE)) == MAP_FAILED)
			return fail("mremap");
		if (mprotect(m, N, PROT_READ | PROT_WRITE))
			return errno == EACCES ? 3 : fail("mprotect");
		memcpy(m, word, N);
		if (msync(m, N, MS_SYNC))
			return fail("msync");
	} else if (!strcmp(way, "mremap_copy")) {   /* old size 0: a second mapping of the same pages */
		char *m = mmap(NULL, N, PROT_READ, MAP_SHARED, fd, 0), *d;
		if (m == MAP_FAILED || (d = mremap(m, 0, N, MREMAP_MAYMOVE)) == MAP_FAILED)
			return fail("mremap");
		if (mprotect(d, N, PROT_READ | PROT_WRITE))
			return fail("mprotect");
		memcpy(d, word, N);
	} else if (!strcmp(way, "mmap_split")) {    /* its middle unmapped, the descriptor closed */
		long pg = sysconf(_SC_PAGESIZE);
		char *m = mmap(NULL, 3 * pg, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED || close(fd) || munmap(m + pg, pg) || mprotect(m, pg, PROT_READ | PROT_WRITE))
			return fail("mmap_split");
		memcpy(m, word, N);
	} else if (!strcmp(way, "madvise_remove")) { /* a hole punched through a read-only mapping */
		long pg = sysconf(_SC_PAGESIZE);
		char *m = mmap(NULL, 2 * pg, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED)
			return fail("mmap");
		if (madvise(m, 2 * pg, MADV_REMOVE))
			return errno == EACCES || errno == EINVAL || errno == EOPNOTSUPP ? 4 : fail("madvise");
	} else if (!strcmp(way, "syscall")) {
		if (syscall(SYS_write, fd, word, N) != (long)N)
			return fail("syscall");
	} else if (!strcmp(way, "__write")) {
		if (__write(fd, word, N) != (ssize_t)N)
			return fail("__write");
	} else if (!strcmp(way, "__pwrite64")) {
		if (__pwrite64(fd, word, N, 0) != (ssize_t)N)
			return fail("__pwrite64");
	} else if (!strcmp(way, "backtrace")) {
		void *frames[4];
		backtrace_symbols_fd(frames, backtrace(frames, 4), fd);
	} else if (!strcmp(way, "dup2_self")) {
		if (dup2(fd, fd) != fd)
			return fail("dup2");
		return put(fd);
	} else if (!strcmp(way, "failed_dups")) {
		if (dup3(fd, fd, 0) != -1 || dup2(900, fd) != -1 || dup3(0, fd, 0x1234) != -1 ||
		    syscall(SYS_dup2, fd, fd) != fd || syscall(SYS_dup3, 900, fd, 0) != -1)
			return fail("dups that should fail");
		return put(fd);
	} else if (!strcmp(way, "failed_close_range")) {
		if (syscall(SYS_close_range, fd, fd, 0x400) != -1)
			return fail("close_range");
		return put(fd);
	} else if (!strcmp(way, "fcloseall")) {
		fcloseall();
		return put(fd);
	} else if (!strcmp(way, "syscall_dup")) {
		return put((int)syscall(SYS_dup, fd));
	} else if (!strcmp(way, "syscall_fcntl")) {
		return put((int)syscall(SYS_fcntl, fd, F_DUPFD, 10));
	} else if (!strcmp(way, "__fcntl")) {
		return put(__fcntl(fd, F_DUPFD, 10));
	} else if (!strcmp(way, "pidfd_getfd")) {
		int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
		int n = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
		if (n < 0)
			return errno == ENOSYS || errno == EPERM ? put(fd) : fail("pidfd_getfd");
		return put(n);
	} else if (!strcmp(way, "clone_vm_close")) {
		static char stack[1 << 16];
		pid_t pid = clone(clone_child, stack + sizeof(stack), CLONE_VM | SIGCHLD, NULL);
		if (pid < 0 || waitpid(pid, NULL, 0) != pid)
			return fail("clone");
		return put(fd);
	} else if (!strcmp(way, "thread_unshare_close")) {
		pthread_t t;
		if (pthread_create(&t, NULL, unshared_close, NULL) || pthread_join(t, NULL))
			return fail("thread");
		return put(fd);
	} else if (!strcmp(way, "_IO_popen")) {
		FILE *p;
		if (dup2(fd, 7) != 7)
			return fail("dup2");
		p = _IO_popen("printf PENDING >&7", "r");
		if (!p || pclose(p))
			return fail("_IO_popen");
	} else if (!strcmp(way, "splice_wait")) {
		return splice_wait();
	} else if (!strcmp(way, "cx-moved")) {
		snprintf(cmd, sizeof(cmd), "mv '%s' '%s.moved'", file, file);
		if (system(cmd))
			return fail("mv");
		return put(fd);
	} else if (!strcmp(way, "cx-replaced") || !strcmp(way, "cx-removed")) {
		if (!strcmp(way, "cx-replaced"))
			snprintf(cmd, sizeof(cmd), "echo new > '%s.n' && mv '%s.n' '%s'", file, file, file);
		else
			snprintf(cmd, sizeof(cmd), "rm '%s'", file);
		if (system(cmd))
			return fail(cmd);
		return put(fd);
	} else if (!strcmp(way, "read")) {
		char buf[N];
		if (read(fd, buf, N) < 0)
			return fail("read");
	} else {
		fprintf(stderr, "fdwrite: no way %s\n", way);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: fdwrite WAY FILE\n");
		return 2;
	}
	file = argv[2];
	fd = open(file, O_RDWR | (strncmp(argv[1], "cx-", 3) ? 0 : O_CLOEXEC));
	if (fd < 0)
		return fail("open");
	return way_of(argv[1]);
}
