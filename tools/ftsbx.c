/*
 * ftsbx.c - the command-line tool around the sandbox: check a policy, and
 * explain what a policy decides about a command, a path, a signal or a
 * connection (and why). `ftsbx run` (start a command as a session under
 * the shim) is the lead's: it slots into the command table below.
 *
 * As git.c does: a sorted table of subcommands, one cmd_* function each,
 * errors as "ftsbx: what is wrong", exit 0 (allowed, ok), 1 (refused,
 * invalid), 2 (usage).
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>
#include "../policy/policy.h"
#include "run.h"

#define FTSBX_VERSION "0.1"

static const char usage_text[] =
	"usage: ftsbx policy check FILE\n"
	"       ftsbx explain [--policy FILE] -- PROGRAM [ARG...]\n"
	"       ftsbx explain [--policy FILE] --read PATH | --write PATH\n"
	"       ftsbx explain [--policy FILE] --signal PID | --connect ADDR[:PORT] | --connect unix:PATH\n"
	"       ftsbx run [--policy FILE] [--journal DIR] [--on-failure rewind|keep]\n"
	"                 [--rewind-failed-calls] -- CMD [ARG...]\n"
	"       ftsbx --help | --version\n"
	"\n"
	"The policy is FILE, else $FTSBX_POLICY, else the built-in default.\n"
	"explain exits 0 when the policy allows, 1 when it refuses.\n";

__attribute__((format(printf, 1, 2)))
static int error(const char *fmt, ...)
{
	va_list ap;

	fputs("ftsbx: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return -1;
}

static int usage(void)
{
	fputs(usage_text, stderr);
	return 2;
}

static struct policy *load(const char *file)
{
	struct policy *pol;
	char err[1024];

	if (!file)
		file = getenv("FTSBX_POLICY");
	if (file && !*file)
		file = NULL;
	if (policy_load(&pol, file, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return NULL;
	}
	return pol;
}

/* --- ftsbx policy check FILE ----------------------------------------------------- */

static int cmd_policy(int argc, char **argv)
{
	struct policy *pol;

	if (argc != 3 || strcmp(argv[1], "check"))
		return usage();
	pol = load(argv[2]);
	if (!pol)
		return 1;
	printf("%s: ok (hash %016llx)\n", argv[2], (unsigned long long)policy_hash(pol));
	policy_free(pol);
	return 0;
}

/* --- ftsbx explain ------------------------------------------------------------------- */

static const char *const verdicts[] = { "allow", "allow (untracked: not journaled)", "deny" };

static int report(enum pverdict v, const char *what, const char *why)
{
	printf("%s: %s\n", verdicts[v], what);
	printf("rule: %s\n", why ? why : "none refuses it");
	return v == PV_DENY;
}

/* PATH made absolute and resolved as the shim resolves it: symlinks and
 * ".." of the existing part, the rest taken as it is. */
static void resolve_path(const char *path, char out[PATH_MAX])
{
	char dir[PATH_MAX], abs[PATH_MAX];
	const char *slash;

	if (path[0] == '/')
		snprintf(abs, sizeof(abs), "%s", path);
	else if (!getcwd(dir, sizeof(dir)) || snprintf(abs, sizeof(abs), "%s/%s", dir, path) >= PATH_MAX)
		snprintf(abs, sizeof(abs), "/%s", path);
	if (realpath(abs, out))
		return;
	slash = strrchr(abs, '/');
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - abs), abs);
	if (realpath(*dir ? dir : "/", out) && strlen(out) + strlen(slash) < PATH_MAX)
		strcat(strcmp(out, "/") ? out : (out[0] = 0, out), slash);
	else
		snprintf(out, PATH_MAX, "%s", abs);
}

static int explain_path(struct policy *pol, const char *path, bool write)
{
	char abs[PATH_MAX];
	struct stat st;
	const char *why;

	resolve_path(path, abs);
	mode_t type = stat(abs, &st) == 0 ? st.st_mode & S_IFMT : 0;
	enum pverdict v = policy_path_typed(pol, abs, write, type, &why);
	char what[PATH_MAX + 16];
	snprintf(what, sizeof(what), "%s %s", write ? "write" : "read", abs);
	return report(v, what, why);
}

static int explain_exec(struct policy *pol, char **argv)
{
	const char *why;
	char what[4096];
	size_t n = 0;

	enum pverdict v = policy_exec(pol, NULL, argv, getenv("PATH"), &why);
	what[0] = 0;
	for (char **a = argv; *a && n < sizeof(what) - 1; a++)
		n += (size_t)snprintf(what + n, sizeof(what) - n, "%s%s", a == argv ? "exec " : " ", *a);
	return report(v, what, why);
}

static int explain_signal(struct policy *pol, const char *arg)
{
	char *end;
	long pid = strtol(arg, &end, 10);
	const char *why;

	if (!*arg || *end)
		return error("bad pid '%s'", arg), 2;
	/* explain cannot know the session: the target is taken as outside it */
	enum pverdict v = policy_signal(pol, (pid_t)pid, 9, pid == getpid(), &why);
	return report(v, arg, why);
}

static int explain_connect(struct policy *pol, const char *arg)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *in = (void *)&ss;
	struct sockaddr_in6 *in6 = (void *)&ss;
	struct sockaddr_un *un = (void *)&ss;
	char host[256];
	const char *port = NULL, *why;
	socklen_t len;

	memset(&ss, 0, sizeof(ss));
	if (!strncmp(arg, "unix:", 5)) {
		un->sun_family = AF_UNIX;
		snprintf(un->sun_path, sizeof(un->sun_path), "%s", arg + 5);
		len = sizeof(*un);
	} else {
		snprintf(host, sizeof(host), "%s", arg);
		char *colon = strrchr(host, ':');
		if (host[0] == '[') {           /* [v6]:port */
			char *rb = strchr(host, ']');
			if (!rb)
				return error("bad address '%s'", arg), 2;
			*rb = 0;
			port = rb[1] == ':' ? rb + 2 : NULL;
			memmove(host, host + 1, strlen(host));
		} else if (colon && strchr(host, ':') == colon) {
			*colon = 0;
			port = colon + 1;
		}
		int p = port ? atoi(port) : 0;
		if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
			in->sin_family = AF_INET;
			in->sin_port = htons((uint16_t)p);
			len = sizeof(*in);
		} else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
			in6->sin6_family = AF_INET6;
			in6->sin6_port = htons((uint16_t)p);
			len = sizeof(*in6);
		} else {
			return error("bad address '%s'", arg), 2;
		}
	}
	enum pverdict v = policy_connect(pol, (struct sockaddr *)&ss, len, &why);
	return report(v, arg, why);
}

static int cmd_explain(int argc, char **argv)
{
	const char *file = NULL;
	struct policy *pol;
	int i = 1, r;

	if (i + 1 < argc && !strcmp(argv[i], "--policy")) {
		file = argv[i + 1];
		i += 2;
	}
	if (i >= argc || (strcmp(argv[i], "--") && i + 2 != argc))
		return usage();
	if (!strcmp(argv[i], "--") && i + 1 >= argc)
		return usage();
	pol = load(file);
	if (!pol)
		return 2;
	if (!strcmp(argv[i], "--"))
		r = explain_exec(pol, argv + i + 1);
	else if (!strcmp(argv[i], "--read") || !strcmp(argv[i], "--write"))
		r = explain_path(pol, argv[i + 1], argv[i][2] == 'w');
	else if (!strcmp(argv[i], "--signal"))
		r = explain_signal(pol, argv[i + 1]);
	else if (!strcmp(argv[i], "--connect"))
		r = explain_connect(pol, argv[i + 1]);
	else
		r = usage();
	policy_free(pol);
	return r;
}

/* --- the table ------------------------------------------------------------------------ */

struct cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
};

/* Sorted by name. */
static const struct cmd commands[] = {
	{ "explain", cmd_explain },
	{ "policy", cmd_policy },
	{ "run", cmd_run },
};

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("ftsbx %s\n", FTSBX_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].fn(argc - 1, argv + 1);
	error("unknown command '%s'", argv[1]);
	return usage();
}
