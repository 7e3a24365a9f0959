/*
 * vforkexec.c - a host that starts programs with vfork() and execve(), as
 * tcsh, BSD make, old GNU make and busybox's ash do (and glibc's
 * posix_spawn did before it moved to clone(CLONE_VFORK)). The child
 * executes ARGV[1...] at once, with the parent's environment, or with an
 * empty one when the first argument is -e.
 */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Start PROG with vfork and execve; its exit status, or -1. */
static int run(char *const prog[], char *const env[])
{
	int status;
	pid_t pid = vfork();

	if (pid < 0)
		return -1;
	if (pid == 0) {
		execve(prog[0], prog, env);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv)
{
	static char *empty[] = { NULL };
	int r;

	if (argc > 2 && !strcmp(argv[1], "-e"))
		r = run(argv + 2, empty);
	else if (argc > 1)
		r = run(argv + 1, environ);
	else
		return 2;
	return r < 0 ? 1 : r;
}
