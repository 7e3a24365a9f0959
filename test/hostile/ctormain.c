/*
 * ctormain.c - a program with a constructor of its own that writes and
 * renames before main, linked with ctorlib.c (see there). Imitates
 * programs that set up state files from a constructor, as gcov-instrumented
 * and profiled binaries do (__gcov_init, __monstartup).
 */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int ctorlib_ran(void);

__attribute__((constructor)) static void before_main(void)
{
	FILE *f = fopen("main-ctor.out", "w");

	if (!f || fputs("main's constructor\n", f) < 0 || fclose(f))
		_exit(5);
	if (rename("main-ctor.out", "main-ctor.renamed") < 0)
		_exit(6);
}

int main(void)
{
	FILE *f = fopen("main.out", "a");

	if (!ctorlib_ran())
		return 7;
	return !f || fputs("main\n", f) < 0 || fclose(f);
}
