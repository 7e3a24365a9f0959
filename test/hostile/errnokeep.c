/*
 * errnokeep.c - a program's first file calls under the shim (run by its
 * absolute path: the shim's first look at what program it is happens in
 * them) leave errno as they found it when they succeed: open, fopen,
 * close, opendir, a write to a new file, and the first fork (before which
 * the shim binds its children's exec path: txn.c, warm_libc). Exits 1
 * naming the call that changed it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int check(const char *what, int ok)
{
	if (!ok || errno != 0) {
		printf("%s: %s, errno %d (%s)\n", what, ok ? "succeeded" : "failed", errno, strerror(errno));
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *file = argc > 1 ? argv[1] : "/etc/hostname";
	const char *out = argc > 2 ? argv[2] : "errnokeep.out";
	int bad = 0, fd;
	FILE *f;
	DIR *d;

	errno = 0;
	fd = open(file, O_RDONLY);
	bad |= check("open", fd >= 0);
	errno = 0;
	bad |= check("close", close(fd) == 0);
	errno = 0;
	f = fopen(file, "r");
	bad |= check("fopen", f != NULL);
	errno = 0;
	bad |= check("fclose", f && fclose(f) == 0);
	errno = 0;
	d = opendir("/");
	bad |= check("opendir", d != NULL);
	errno = 0;
	bad |= check("closedir", d && closedir(d) == 0);
	errno = 0;
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	bad |= check("open to write", fd >= 0);
	errno = 0;
	bad |= check("write", write(fd, "x\n", 2) == 2);
	errno = 0;
	bad |= check("close after write", close(fd) == 0);
	errno = 0;
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	bad |= check("fork", pid > 0);
	waitpid(pid, NULL, 0);
	return bad;
}
