/*
 * path.c - absolute paths without a system call in the common case: a
 * relative path is joined to the cached cwd (kept by the chdir and fchdir
 * hooks) or to its dirfd's path, then normalised lexically ("." and "//").
 * ".." is resolved by the kernel instead (open O_PATH, read the link in
 * /proc/self/fd), since "link/.." is not the link's directory.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "shim.h"

/* Two buffers and an index flipped after a write, so a reader in another
 * thread never sees a half-written cwd (a chdir race at worst gives the
 * previous one, as the kernel could have too). */
static char cwd_buf[2][PATH_MAX];
static int cwd_cur;

HIDDEN void cwd_refresh(void)
{
	int next = !__atomic_load_n(&cwd_cur, __ATOMIC_ACQUIRE);

	if (!getcwd(cwd_buf[next], PATH_MAX))
		cwd_buf[next][0] = 0;
	__atomic_store_n(&cwd_cur, next, __ATOMIC_RELEASE);
}

HIDDEN bool path_under(const char *path, const char *dir, size_t dirlen)
{
	return dirlen && !strncmp(path, dir, dirlen) && (path[dirlen] == '/' || path[dirlen] == 0);
}

static bool has_dotdot(const char *p)
{
	for (const char *s = strstr(p, ".."); s; s = strstr(s + 2, ".."))
		if ((s == p || s[-1] == '/') && (s[2] == '/' || s[2] == 0))
			return true;
	return false;
}

/* Remove "." components and repeated slashes, in place. */
HIDDEN void path_normalise(char *p)
{
	char *w = p, *r = p;

	while (*r) {
		if (r[0] == '/' && (r[1] == '/' || (r[1] == '.' && (r[2] == '/' || r[2] == 0)))) {
			r += r[1] == '/' ? 1 : 2;
			continue;
		}
		*w++ = *r++;
	}
	if (w > p + 1 && w[-1] == '/')
		w--;
	if (w == p)
		*w++ = '/';
	*w = 0;
}

HIDDEN int path_fd(char out[PATH_MAX], int fd)
{
	char proc[32];
	ssize_t n;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	n = readlink(proc, out, PATH_MAX - 1);
	if (n < 0)
		return -errno;
	out[n] = 0;
	if (out[0] != '/')
		return -ENOENT;        /* a pipe, socket or anonymous inode */
	return 0;
}

/* Resolve the directory part of P (which holds "..") through the kernel. */
static int resolve_dotdot(char out[PATH_MAX])
{
	char dir[PATH_MAX], *slash = strrchr(out, '/');
	const char *base = slash + 1;
	int fd, err;

	if (!strcmp(base, "..") || !strcmp(base, ".")) {
		snprintf(dir, sizeof(dir), "%s", out);
		base = "";
	} else {
		size_t n = (size_t)(slash - out);
		memcpy(dir, out, n);
		dir[n] = 0;
		if (!n)
			strcpy(dir, "/");
	}
	fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	char b[NAME_MAX + 1];
	snprintf(b, sizeof(b), "%s", base);
	err = path_fd(out, fd);
	close(fd);
	if (err)
		return err;
	if (*b && strlen(out) + strlen(b) + 2 > PATH_MAX)
		return -ENAMETOOLONG;
	if (*b) {
		if (strcmp(out, "/"))
			strcat(out, "/");
		strcat(out, b);
	}
	return 0;
}

HIDDEN int path_abs(char out[PATH_MAX], int dirfd, const char *path)
{
	size_t n;

	if (!path)
		return -EFAULT;
	if (path[0] == '/') {
		if (strlen(path) >= PATH_MAX)
			return -ENAMETOOLONG;
		strcpy(out, path);
	} else {
		if (dirfd == AT_FDCWD) {
			const char *c = cwd_buf[__atomic_load_n(&cwd_cur, __ATOMIC_ACQUIRE)];
			if (!*c)
				return -ENOENT;
			snprintf(out, PATH_MAX, "%s", c);
		} else {
			int err = path_fd(out, dirfd);
			if (err)
				return err == -ENOENT ? -EBADF : err;
		}
		n = strlen(out);
		if (n + strlen(path) + 2 > PATH_MAX)
			return -ENAMETOOLONG;
		out[n] = '/';
		strcpy(out + n + 1, path);
	}
	path_normalise(out);
	if (has_dotdot(out))
		return resolve_dotdot(out);
	return 0;
}

EXPORT int chdir(const char *p)
{
	shim_ensure();
	int r = real_chdir(p);

	if (r == 0 && shim_ready) {
		int e = errno;
		cwd_refresh();
		errno = e;
	}
	return r;
}

EXPORT int fchdir(int fd)
{
	shim_ensure();
	int r = real_fchdir(fd);

	if (r == 0 && shim_ready) {
		int e = errno;
		cwd_refresh();
		errno = e;
	}
	return r;
}
