/*
 * ctorlib.c - a shared library whose constructor writes a file while it is
 * loaded, and whose destructor writes another at exit. Imitates libraries
 * that touch the disk before main: sanitizer runtimes opening their
 * log_path, gcov's runtime writing .gcda files from a destructor, GLib and
 * Qt modules creating their cache directories at load. Linked into
 * ctormain, its constructor runs before the preloaded shim's own.
 */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

static int ran;

/* Called by ctormain (which also keeps the library linked). */
int ctorlib_ran(void)
{
	return ran;
}

static void put(const char *path, const char *data, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0 || write(fd, data, n) != (ssize_t)n)
		_exit(3);
	close(fd);
}

__attribute__((constructor(101))) static void at_load(void)
{
	put("lib-ctor.out", "written before main\n", 20);
	if (unlink("lib-ctor.victim") < 0)
		_exit(4);
	ran = 1;
}

__attribute__((destructor)) static void at_exit(void)
{
	put("lib-dtor.gcda", "written after main\n", 19);
}
