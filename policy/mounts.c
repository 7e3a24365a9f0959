/*
 * mounts.c - the host paths a container start mounts (docker, podman,
 * nerdctl run and create, compose run), a local volume bound to a host
 * directory (volume create -o device=, --mount volume-opt=device=), and
 * docker cp's host side. The engine makes those mounts and copies as root,
 * outside the shim, Landlock and the journal (and the docker client, a Go
 * program, connects to the engine where no hook sees it). So each host
 * path is judged as a change or a read of the session's own would be: a
 * mount that can write (the default) or a copy's destination must lie in a
 * writable root (or an untracked one), a read-only mount (:ro, readonly)
 * or a copy's source must not be hidden. A named volume is no host path.
 *
 * The run options are read up to the image: options that take no value
 * are listed (docker's, compose's and podman's common ones); any other
 * takes the next word, so an unknown flag can only make more words be
 * looked at, never fewer. Global options before the verb take the next
 * word unless they are known to take none (so that `--config cp run`
 * is a run).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "internal.h"

static const char outside_why[] =
	"[commands] a container's mount of a host path outside the writable roots (the engine changes it, unjournaled)";
static const char hidden_why[] = "[commands] a container's mount of a hidden path";
static const char cp_why[] = "[commands] docker cp to a host path outside the writable roots, or from a hidden one";

/* SRC (N bytes) as an absolute normalised path into OUT, the symlinks of
 * its longest existing start resolved (the engine resolves them, and makes
 * what is missing beyond, as root); false for a named volume (no '/' or
 * "./" first), unless RELATIVE (docker cp: any path is the host's). */
static bool host_path(const char *src, size_t n, bool relative, char out[PATH_MAX])
{
	char p[PATH_MAX], real[PATH_MAX];
	size_t k = 0, cut;

	if (!n || (src[0] != '/' && src[0] != '.' && !relative) || (n == 1 && src[0] == '-' && relative))
		return false;
	if (src[0] != '/') {
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
	if (!strncmp(p, "/proc/", 6)) {
		memcpy(out, p, strlen(p) + 1);  /* as written: refused() judges it */
		return true;
	}
	for (cut = strlen(p);;) {
		char keep = p[cut];
		p[cut] = 0;
		bool found = pol_real_path(p, real);
		p[cut] = keep;
		if (found) {
			size_t rn = strlen(real);
			if (rn + strlen(p + cut) >= PATH_MAX)
				return false;
			memcpy(out, real, rn);
			memcpy(out + rn, p + cut, strlen(p + cut) + 1);
			pol_normalise(out);
			return true;
		}
		while (cut > 1 && p[--cut] != '/')
			;
		if (cut <= 1)
			break;
	}
	memcpy(out, p, strlen(p) + 1);
	return true;
}

/* Is the host path SRC (N bytes) one the session may not write (WRITE) or
 * read? Any under /proc: the engine resolves /proc/self/cwd, /proc/PID/root
 * in its own context, not the session's (its / as often as not). */
static bool refused(const struct policy *pol, const char *src, size_t n, bool write, bool relative)
{
	char p[PATH_MAX];
	const char *w;

	if (!host_path(src, n, relative, p))
		return false;
	return !strncmp(p, "/proc/", 6) || !strcmp(p, "/proc") || policy_path(pol, p, write, &w) == PV_DENY;
}

/* Go's strconv.ParseBool, which docker reads readonly= with: -1 neither. */
static int go_bool(const char *v, size_t n)
{
	static const char *const yes[] = { "1", "t", "T", "TRUE", "true", "True" };
	static const char *const no[] = { "0", "f", "F", "FALSE", "false", "False" };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strlen(yes[i]) == n && !memcmp(yes[i], v, n))
			return 1;
		if (strlen(no[i]) == n && !memcmp(no[i], v, n))
			return 0;
	}
	return -1;
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
		ro |= (n == 2 && !strncmp(o, "ro", 2)) || (n == 8 && !strncmp(o, "readonly", 8)) ||
		      (n == 1 && o[0] == 'O');  /* podman's overlay: the changes go to a layer */
	}
	if (!refused(pol, spec, (size_t)(c - spec), !ro, false))
		return false;
	*why = ro ? hidden_why : outside_why;
	return true;
}

/* V into OUT (PATH_MAX bytes), cut to fit. */
static void copy_to(char out[PATH_MAX], const char *v)
{
	size_t n = strnlen(v, PATH_MAX - 1);

	memcpy(out, v, n);
	out[n] = 0;
}

/* One field of a CSV list at *S, its quotes taken off, into OUT; *S moves
 * past it. False at the end. */
static bool csv_field(const char **s, char *out, size_t cap)
{
	const char *p = *s;
	size_t k = 0;
	bool q = false;

	if (!*p)
		return false;
	for (; *p && (q || *p != ','); p++) {
		if (*p == '"') {
			q = !q;
			continue;
		}
		if (k + 1 < cap)
			out[k++] = *p;
	}
	out[k] = 0;
	*s = *p ? p + 1 : p;
	return true;
}

/* --mount type=bind,source=SRC,target=DST[,readonly] (keys and the type
 * in any case, fields quoted as CSV), or type=volume with
 * volume-opt=device=SRC (the local driver binds it): refused? The
 * default type is a volume. */
static bool mount_refused(const struct policy *pol, const char *spec, const char **why)
{
	char f[PATH_MAX + 32], src[PATH_MAX] = "", dev[PATH_MAX] = "";
	bool bind = false, ro = false;

	for (const char *s = spec; csv_field(&s, f, sizeof(f));) {
		char *eq = strchr(f, '=');
		const char *v = eq ? eq + 1 : "";
		if (eq)
			*eq = 0;
		if (!strcasecmp(f, "type"))
			bind = !strcasecmp(v, "bind");
		else if (!strcasecmp(f, "source") || !strcasecmp(f, "src"))
			copy_to(src, v);
		else if (!strcasecmp(f, "readonly") || !strcasecmp(f, "ro"))
			ro = !eq || go_bool(v, strlen(v)) == 1;
		else if (!strcasecmp(f, "volume-opt") && !strncasecmp(v, "device=", 7))
			copy_to(dev, v + 7);
	}
	const char *host = bind ? src : dev;
	if (!*host || !refused(pol, host, strlen(host), !ro, !bind))
		return false;
	*why = ro ? hidden_why : outside_why;
	return true;
}

/* docker volume create -o device=SRC (with -o o=bind): the volume is SRC. */
static bool volume_create_refused(const struct policy *pol, char *const argv[], int argc, int at, const char **why)
{
	for (int k = at + 1; k < argc; k++) {
		const char *a = argv[k], *v = NULL;
		if (!strcmp(a, "-o") || !strcmp(a, "--opt"))
			v = k + 1 < argc ? argv[++k] : NULL;
		else if (!strncmp(a, "--opt=", 6))
			v = a + 6;
		else if (!strncmp(a, "-o", 2))
			v = a + 2 + (a[2] == '=');
		if (v && !strncasecmp(v, "device=", 7) && refused(pol, v + 7, strlen(v + 7), true, true)) {
			*why = outside_why;
			return true;
		}
	}
	return false;
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
		if (!container && refused(pol, ops[i], strlen(ops[i]), i == 1, true)) {
			*why = cp_why;
			return true;
		}
	}
	return false;
}

/* The long options of run and create (docker's, compose run's, podman's)
 * that take no value. */
static bool long_bool(const char *name)
{
	static const char list[] =
		"rm\0detach\0interactive\0tty\0publish-all\0privileged\0init\0read-only\0quiet\0no-healthcheck\0"
		"oom-kill-disable\0disable-content-trust\0help\0sig-proxy\0use-api-socket\0no-deps\0service-ports\0"
		"use-aliases\0build\0remove-orphans\0no-TTY\0quiet-pull\0replace\0rmi\0no-hosts\0env-host\0"
		"read-only-tmpfs\0http-proxy\0tls-verify\0passwd\0";

	for (const char *l = list; *l; l += strlen(l) + 1)
		if (!strcmp(name, l))
			return true;
	return false;
}

/* The options of run or create at AT, up to the image. */
static bool run_refused(const struct policy *pol, char *const argv[], int argc, int at, const char **why)
{
	for (int k = at + 1; k < argc; k++) {
		const char *a = argv[k];
		if (a[0] != '-' || !a[1] || !strcmp(a, "--"))
			return false;   /* the image: the container's command follows */
		if (a[1] == '-') {
			const char *eq = strchr(a, '=');
			if (!strcmp(a, "--volume") || !strcmp(a, "--mount")) {
				if (k + 1 < argc && (a[2] == 'v' ? volume_refused(pol, argv[k + 1], why)
								 : mount_refused(pol, argv[k + 1], why)))
					return true;
				k++;
			} else if (!strncmp(a, "--volume=", 9)) {
				if (volume_refused(pol, a + 9, why))
					return true;
			} else if (!strncmp(a, "--mount=", 8)) {
				if (mount_refused(pol, a + 8, why))
					return true;
			} else if (!eq && !long_bool(a + 2)) {
				k++;            /* its value */
			}
			continue;
		}
		/* a group of short options: -d -i -t -P -q -T take no value, -v
		 * takes the rest or the next word, any other the rest or the
		 * next word */
		for (const char *o = a + 1; *o; o++) {
			if (strchr("ditPqT", *o))
				continue;
			const char *v = o[1] ? o + 1 + (o[1] == '=') : k + 1 < argc ? argv[++k] : "";
			if (*o == 'v' && volume_refused(pol, v, why))
				return true;
			break;
		}
	}
	return false;
}

/* The global options (docker's, podman's, compose's) that take no value;
 * any other takes the next word, so that its value is no verb. */
static bool global_bool(const char *a)
{
	static const char list[] = "-D\0--debug\0--tls\0--tlsverify\0-v\0--version\0--help\0-h\0--remote\0"
				   "--dry-run\0--compatibility\0--all-resources\0--syslog\0--log-level=*\0";

	for (const char *l = list; *l; l += strlen(l) + 1)
		if (!strcmp(a, l))
			return true;
	return strchr(a, '=') != NULL;
}

/* The verb of a docker, podman, nerdctl or compose command line: run,
 * create, cp, volume create (container, compose and their options before
 * it seen through). What comes after a run's image, an exec's container
 * (a container's own cp) is no verb of the engine's. */
bool pol_container_mounts(const struct policy *pol, char *const argv[], int argc, const char **why)
{
	for (int k = 1; k < argc; k++) {
		const char *a = argv[k];
		if (a[0] == '-') {
			if (!global_bool(a) && a[1] && k + 1 < argc && argv[k + 1][0] != '-')
				k++;    /* --config DIR, -H HOST, compose's -f FILE, -p NAME */
			continue;
		}
		if (!strcmp(a, "compose") || !strcmp(a, "container"))
			continue;
		if (!strcmp(a, "run") || !strcmp(a, "create"))
			return run_refused(pol, argv, argc, k, why);
		if (!strcmp(a, "cp"))
			return cp_refused(pol, argv, argc, k, why);
		if (!strcmp(a, "volume"))
			return k + 1 < argc && !strcmp(argv[k + 1], "create") &&
			       volume_create_refused(pol, argv, argc, k + 1, why);
		break;          /* another verb */
	}
	/* A global flag this list does not know may have taken the verb as
	 * its value: any later run or create is read as one too (a
	 * container's `npm run build` stops at its first word). */
	for (int k = 1; k < argc; k++)
		if ((!strcmp(argv[k], "run") || !strcmp(argv[k], "create")) && run_refused(pol, argv, argc, k, why))
			return true;
	return false;
}
