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
 * usage: fdreuse A B C   (three directories; creates, changes and removes
 * entries in B and C through reused numbers, and B/kept and B/other
 * through a reused file number; removes C/victim1, C/victim2 and C/victim3)
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
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
	return close(b2) || close(c2) || close(c);
}
