/*
 * benchcalls.c - the micro-benchmarks `make bench` runs with and without
 * the shim: `benchcalls OP N [PATH]` does OP N times and prints the
 * nanoseconds per call. OP: open (read-only open+close), stat, read
 * (pread of 4 KiB), spawn (posix_spawn of /bin/true and wait), forkexec
 * (fork, execve of /bin/true in the child, wait: what a shell does for
 * every command), write (pwrite of 4 KiB through a descriptor opened
 * O_RDWR: the write family's hook).
 */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	const char *op = argc > 1 ? argv[1] : "", *path = argc > 3 ? argv[3] : "/etc/hostname";
	long n = argc > 2 ? atol(argv[2]) : 0;
	char buf[4096];
	struct stat st;
	double t0;
	int fd = open(path, O_RDONLY);

	if (n <= 0 || fd < 0) {
		fprintf(stderr, "usage: benchcalls open|stat|read|write|spawn|forkexec N [PATH]\n");
		return 2;
	}
	t0 = now_ns();
	for (long i = 0; i < n; i++) {
		if (!strcmp(op, "open")) {
			int f = open(path, O_RDONLY | O_CLOEXEC);
			close(f);
		} else if (!strcmp(op, "stat")) {
			stat(path, &st);
		} else if (!strcmp(op, "read")) {
			if (pread(fd, buf, sizeof(buf), 0) < 0)
				return 1;
		} else if (!strcmp(op, "write")) {
			static int wfd = -1;
			if (wfd < 0 && (wfd = open(path, O_RDWR)) < 0)
				return 1;
			if (pwrite(wfd, buf, sizeof(buf), 0) < 0)
				return 1;
		} else if (!strcmp(op, "spawn")) {
			char *av[] = { "/bin/true", NULL };
			pid_t pid;
			if (posix_spawn(&pid, "/bin/true", NULL, NULL, av, environ))
				return 1;
			waitpid(pid, NULL, 0);
		} else if (!strcmp(op, "forkexec")) {
			char *av[] = { "/bin/true", NULL };
			pid_t pid = fork();
			if (pid == 0) {
				execve("/bin/true", av, environ);
				_exit(127);
			}
			if (pid < 0 || waitpid(pid, NULL, 0) != pid)
				return 1;
		} else {
			fprintf(stderr, "benchcalls: unknown op '%s'\n", op);
			return 2;
		}
	}
	printf("%.1f\n", (now_ns() - t0) / (double)n);
	return 0;
}
