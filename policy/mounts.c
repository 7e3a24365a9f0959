/*
 * mounts.c - the host paths a container start mounts (docker, podman,
 * nerdctl run and create, compose run) and docker cp's host side. The
 * engine makes those mounts and copies as root, outside the shim, Landlock
 * and the journal (and the docker client, a Go program, connects to the
 * engine where no hook sees it). So each host path is judged as a change
 * or a read of the session's own would be: a mount that can write (the
 * default) or a copy's destination must lie in a writable root (or an
 * untracked one), a read-only mount (:ro, readonly) or a copy's source
 * must not be hidden. A named volume is no host path. Where no option
 * list says which words take values, every word is looked at (a container
 * command's own -v, after the image, counts too).
 */
#include <limits.h>
#include <string.h>
#include <unistd.h>
#include "internal.h"

static const char outside_why[] =
	"[commands] a container's mount of a host path outside the writable roots (the engine changes it, unjournaled)";
static const char hidden_why[] = "[commands] a container's mount of a hidden path";
static const char cp_why[] = "[commands] docker cp to a host path outside the writable roots, or from a hidden one";

/* SRC (N bytes) as an absolute normalised path, its symlinks resolved
 * where it exists (the engine resolves them), into OUT; false for a named
 * volume (no '/' first, no "./"). */
static bool host_path(const char *src, size_t n, char out[PATH_MAX])
{
	char p[PATH_MAX];
	size_t k = 0;

	if (!n || (src[0] != '/' && src[0] != '.'))
		return false;
	if (src[0] == '.') {
		if (!getcwd(p, sizeof(p)))
			return false;
		k = strlen(p);
		p[k++] = '/';
	}
	if (k + n >= sizeof(p))
		return false;
	memcpy(p + k, src, n);
	p[k + n] = 0;
	pol_normalise(p);
	if (!pol_real_path(p, out))
		memcpy(out, p, strlen(p) + 1);
	return true;
}

/* Is the host path SRC (N bytes) one the session may not write (WRITE) or
 * read? */
static bool refused(const struct policy *pol, const char *src, size_t n, bool write)
{
	char p[PATH_MAX];
	const char *w;

	return host_path(src, n, p) && policy_path(pol, p, write, &w) == PV_DENY;
}

/* -v SRC:DST[:OPTIONS]: refused? */
static bool volume_refused(const struct policy *pol, const char *spec, const char **why)
{
	const char *c = strchr(spec, ':'), *opts;
	bool ro = false;

	if (!c)
		return false;   /* -v /data: an anonymous volume at that container path */
	opts = strchr(c + 1, ':');
	for (const char *o = opts; o && *o; o = strchr(o, ',')) {
		o++;
		size_t n = strcspn(o, ",");
		ro |= (n == 2 && !strncmp(o, "ro", 2)) || (n == 8 && !strncmp(o, "readonly", 8));
	}
	if (!refused(pol, spec, (size_t)(c - spec), !ro))
		return false;
	*why = ro ? hidden_why : outside_why;
	return true;
}

/* --mount type=bind,source=SRC,target=DST[,readonly]: refused? The
 * default type is a volume. */
static bool mount_refused(const struct policy *pol, const char *spec, const char **why)
{
	const char *src = NULL;
	size_t srcn = 0;
	bool bind = false, ro = false;

	for (const char *o = spec; *o; o += *o == ',') {
		size_t n = strcspn(o, ",");
		const char *eq = memchr(o, '=', n);
		size_t kn = eq ? (size_t)(eq - o) : n;
		if (kn == 4 && !strncmp(o, "type", 4))
			bind = eq && n - kn - 1 == 4 && !strncmp(eq + 1, "bind", 4);
		else if ((kn == 6 && !strncmp(o, "source", 6)) || (kn == 3 && !strncmp(o, "src", 3))) {
			src = eq ? eq + 1 : NULL;
			srcn = eq ? n - kn - 1 : 0;
		} else if ((kn == 8 && !strncmp(o, "readonly", 8)) || (kn == 2 && !strncmp(o, "ro", 2))) {
			size_t vn = eq ? n - kn - 1 : 0;        /* readonly, readonly=true; not =false, =0 */
			ro = !eq || !((vn == 5 && !strncmp(eq + 1, "false", 5)) || (vn == 1 && eq[1] == '0'));
		}
		o += n;
	}
	if (!bind || !src || !refused(pol, src, srcn, !ro))
		return false;
	*why = ro ? hidden_why : outside_why;
	return true;
}

/* docker cp [OPTIONS] SRC DST, one of them CONTAINER:PATH: the other is
 * the host's, written (DST) or read (SRC). */
static bool cp_refused(const struct policy *pol, char *const argv[], int argc, int at, const char **why)
{
	const char *ops[2] = { NULL, NULL };
	int n = 0;

	for (int k = at + 1; k < argc; k++) {
		if (argv[k][0] == '-' && argv[k][1])
			continue;       /* -a, -L, -q: no values */
		if (n < 2)
			ops[n] = argv[k];
		n++;
	}
	if (n != 2)
		return false;
	for (int i = 0; i < 2; i++) {
		const char *c = strchr(ops[i], ':'), *s = strchr(ops[i], '/');
		bool container = c && (!s || c < s);
		if (!container && refused(pol, ops[i], strlen(ops[i]), i == 1)) {
			*why = cp_why;
			return true;
		}
	}
	return false;
}

bool pol_container_mounts(const struct policy *pol, char *const argv[], int argc, const char **why)
{
	bool run = false;

	for (int k = 1; k < argc; k++) {
		const char *a = argv[k];
		if (!run && a[0] != '-') {
			if (!strcmp(a, "cp"))
				return cp_refused(pol, argv, argc, k, why);
			run = !strcmp(a, "run") || !strcmp(a, "create");
			continue;
		}
		if (!run || a[0] != '-')
			continue;
		if (!strcmp(a, "--volume") || !strcmp(a, "--mount")) {
			if (k + 1 < argc && (a[2] == 'v' ? volume_refused(pol, argv[k + 1], why)
							 : mount_refused(pol, argv[k + 1], why)))
				return true;
			k++;
			continue;
		}
		if (!strncmp(a, "--volume=", 9) && volume_refused(pol, a + 9, why))
			return true;
		if (!strncmp(a, "--mount=", 8) && mount_refused(pol, a + 8, why))
			return true;
		if (a[1] == '-')
			continue;
		/* a group of short options: -d -i -t -P take no value, -v
		 * takes the rest or the next word, any other the rest */
		for (const char *o = a + 1; *o; o++) {
			if (strchr("ditP", *o))
				continue;
			if (*o == 'v') {
				const char *v = o[1] ? o + 1 + (o[1] == '=') : k + 1 < argc ? argv[++k] : "";
				if (volume_refused(pol, v, why))
					return true;
			}
			break;
		}
	}
	return false;
}
