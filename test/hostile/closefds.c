/*
 * closefds.c - a host that closes every descriptor it did not open itself,
 * then writes files. Imitates OpenSSH's sshd and ssh-agent, which call
 * closefrom(STDERR_FILENO + 1) at start, systemd's close_all_fds() (the raw
 * close_range system call through syscall()), and the old daemons that loop
 * close(fd) up to sysconf(_SC_OPEN_MAX) (inetd, start-stop-daemon).
 *
 * usage: closefds close_range|closefrom|loop|syscall FILE...
 * Each FILE is overwritten before the descriptors are closed (so the shim's
 * segment is open by then) and again after; a FILE ending in "-" is
 * unlinked after the close instead.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int put(const char *path, const char *data)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0 || write(fd, data, strlen(data)) != (ssize_t)strlen(data) || close(fd) < 0) {
		perror(path);
		return -1;
	}
	return 0;
}

static int close_all(const char *how)
{
	if (!strcmp(how, "close_range"))
		return close_range(3, ~0u, 0);
	if (!strcmp(how, "closefrom")) {
		closefrom(3);
		return 0;
	}
	if (!strcmp(how, "syscall"))
		return (int)syscall(SYS_close_range, 3, ~0u, 0);
	for (long fd = 3, max = sysconf(_SC_OPEN_MAX); fd < max; fd++)
		close((int)fd);
	return 0;
}

int main(int argc, char **argv)
{
	char path[4096];

	if (argc < 3)
		return 2;
	for (int i = 2; i < argc; i++) {
		snprintf(path, sizeof(path), "%s.before", argv[i]);
		if (put(path, "before the close\n"))
			return 1;
	}
	if (close_all(argv[1]) < 0) {
		perror("close");
		return 1;
	}
	for (int i = 2; i < argc; i++) {
		size_t n = strlen(argv[i]);
		if (n && argv[i][n - 1] == '-') {
			snprintf(path, sizeof(path), "%.*s", (int)n - 1, argv[i]);
			if (unlink(path) < 0) {
				perror(path);
				return 1;
			}
		} else if (put(argv[i], "after the close\n")) {
			return 1;
		}
	}
	return 0;
}
