/*
 * tmpfile.c - mkstemp and its family, and mkdtemp. glibc creates these
 * files through its internal open, which no hook sees; so the shim makes
 * the name itself and creates the file through the hooked open (or mkdir),
 * which journals the creation first, as any other.
 */
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include "shim.h"

static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/* Six letters: a per-thread sequence seeded once from getrandom (a system
 * call per name cost sed -i one per file), mixed with the pid (a fork
 * child goes on from its parent's state) and the clock. Uniqueness is
 * O_EXCL's; the letters only make a collision unlikely. */
static void fill_random(char *x)
{
	static __thread uint64_t state __attribute__((tls_model("initial-exec")));
	struct timespec ts;
	uint64_t z;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (!state && getrandom(&state, sizeof(state), GRND_NONBLOCK) != (ssize_t)sizeof(state))
		state = (uint64_t)ts.tv_nsec | 1;
	state += 0x9e3779b97f4a7c15ull;
	z = state ^ (uint64_t)ts.tv_nsec ^ (uint64_t)shim_pid() << 32;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	for (int i = 0; i < 6; i++, z /= sizeof(letters) - 1)
		x[i] = letters[z % (sizeof(letters) - 1)];
}

/* Returns the fd (or 0 for a directory), or -1 with errno. */
static int make_temp(char *t, int suffixlen, int flags, bool dir)
{
	size_t len = t ? strlen(t) : 0;
	char *x;

	if (suffixlen < 0 || len < (size_t)suffixlen + 6 || memcmp(t + len - suffixlen - 6, "XXXXXX", 6)) {
		errno = EINVAL;
		return -1;
	}
	x = t + len - suffixlen - 6;
	for (int tries = 0; tries < 10000; tries++) {
		int r;
		fill_random(x);
		r = dir ? mkdir(t, 0700) : open(t, (flags & ~O_ACCMODE) | O_RDWR | O_CREAT | O_EXCL, 0600);
		if (r >= 0 || errno != EEXIST)
			return r;
	}
	errno = EEXIST;
	return -1;
}

EXPORT int mkstemp(char *t) { return make_temp(t, 0, 0, false); }
EXPORT int mkstemp64(char *t) { return make_temp(t, 0, 0, false); }
EXPORT int mkostemp(char *t, int fl) { return make_temp(t, 0, fl, false); }
EXPORT int mkostemp64(char *t, int fl) { return make_temp(t, 0, fl, false); }
EXPORT int mkstemps(char *t, int sl) { return make_temp(t, sl, 0, false); }
EXPORT int mkstemps64(char *t, int sl) { return make_temp(t, sl, 0, false); }
EXPORT int mkostemps(char *t, int sl, int fl) { return make_temp(t, sl, fl, false); }
EXPORT int mkostemps64(char *t, int sl, int fl) { return make_temp(t, sl, fl, false); }
EXPORT char *mkdtemp(char *t) { return make_temp(t, 0, 0, true) == 0 ? t : NULL; }
