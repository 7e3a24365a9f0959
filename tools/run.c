/*
 * run.c - `ftsbx run`: start a command as a session under the shim.
 *
 *   ftsbx run [--policy FILE] [--journal DIR] [--on-failure rewind|keep]
 *             [--rewind-failed-calls] -- CMD...
 *
 * CMD runs with LD_PRELOAD=libftsbx.so and a fresh session (it is the
 * session's root; every process it starts is a tool call). Its exit status
 * is passed through (128+N for death by signal N). With --on-failure
 * rewind a failed CMD has the whole session rewound; with
 * --rewind-failed-calls each failed tool call is rewound inside the run,
 * before CMD sees it (FTSBX_ON_FAILURE=rewind). ftsbx itself is not
 * wrapped: it prints one summary line on stderr (changes, tool calls,
 * refusals, rewinds, where the journal is) and stores the chain heads of the
 * journal's segments beside it (DIR.heads), out of the session's reach.
 *
 * The fixed cost is two program starts: ftsbx's and CMD's. What ftsbx does
 * besides, it does while CMD's program is looked up and loads: it creates
 * the session and compiles the policy into it, in the environment the root
 * gets, and then lets the root go on (a pipe: 'P' says the policy is there
 * for it; the root maps it, as every later process does, and confines the
 * session). A policy ftsbx could not compile or leave there the root
 * compiles itself, and reports what is wrong. DIR.heads is opened after.
 * CMD is started with vfork, so the session is made only once its program
 * is there: a command that cannot start leaves nothing behind. ftsbx is a
 * static program (GNUmakefile): no dynamic loading at its start.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include "../journal/journal.h"
#include "../policy/policy.h"
#include "run.h"

extern char **environ;

static int run_usage(void)
{
	fputs("usage: ftsbx run [--policy FILE] [--journal DIR] [--on-failure rewind|keep]\n"
	      "                 [--rewind-failed-calls] -- CMD...\n", stderr);
	return 2;
}

/* Beside this program: build/ftsbx next to build/libftsbx.so and txreplay. */
static void sibling(char *out, size_t n, const char *name)
{
	char self[PATH_MAX];
	ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	self[k > 0 ? k : 0] = 0;
	slash = strrchr(self, '/');
	if (slash)
		*slash = 0;
	if ((size_t)snprintf(out, n, "%s/%s", k > 0 ? self : ".", name) >= n)
		out[0] = 0;
}


static int set(const char *k, const char *v)
{
	if (setenv(k, v, 1) < 0) {
		fprintf(stderr, "ftsbx: cannot set %s: %s\n", k, strerror(errno));
		return -1;
	}
	return 0;
}

/* The environment of the session's root. */
static int prepare_env(const char *lib, const char *journal, const char *policy, bool calls)
{
	const char *pre = getenv("LD_PRELOAD");
	char buf[PATH_MAX * 2];

	unsetenv("FTSBX_TXN");
	unsetenv("FTSBX_ROOT");
	snprintf(buf, sizeof(buf), "%s%s%s", lib, pre && *pre ? " " : "", pre ? pre : "");
	if (set("LD_PRELOAD", buf) || set("FTSBX_JOURNAL", journal))
		return -1;
	if (policy && set("FTSBX_POLICY", policy))
		return -1;
	if (calls && set("FTSBX_ON_FAILURE", "rewind"))
		return -1;
	return 0;
}

struct tally { size_t changes, refused, calls, rewound; };

/* Is C a part of the file (JR_RANGE) whose last part before it, in the
 * same transaction, was LAST? Then it is the same change, a file written
 * in place. LAST becomes C's path. */
static bool same_part(const struct jrecord *c, const struct jrecord **last)
{
	const struct jrecord *l = *last;

	if (!(c->flags & JR_RANGE))
		return false;
	*last = c;
	return l && l->txn == c->txn && l->f[F_PATH].n == c->f[F_PATH].n &&
	       !memcmp(l->f[F_PATH].p, c->f[F_PATH].p, c->f[F_PATH].n);
}

static void count(const struct jreader *r, struct tally *t)
{
	const struct jrecord *last = NULL;

	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < r->nrec; i++) {
		const struct jrecord *c = &r->rec[i];
		if (c->type >= J_CREATE && c->type <= J_META && !(c->flags & JR_WEAK)) {
			if (!same_part(c, &last))
				t->changes++;
		} else if (c->type == J_REFUSE) {
			t->refused++;
		} else if (c->type == J_TXN_END && !(c->flags & (JR_CUT | JR_HELD))) {
			t->calls++;     /* not the root's own writes, nor a file it holds */
		} else if (c->type == J_REWOUND) {
			t->rewound++;
		}
	}
}

/* The root's environment: ours through prepare_env, with READY (the
 * "FD:INODE" of the pipe the root waits on, or NULL) as
 * FTSBX_SESSION_READY. NULL when it cannot be made (set() said why). Ours
 * stays as it was: the changes go to a copy, and setenv moves that to an
 * array of its own (glibc's, which it keeps), which is the result. */
static char **root_env(const char *lib, const char *journal, const char *policy, bool calls,
		       const char *ready)
{
	char **ours = environ, **copy, **env = NULL;
	size_t n = 0;

	while (ours[n])
		n++;
	copy = malloc((n + 1) * sizeof(*copy));
	if (!copy) {
		fputs("ftsbx: out of memory\n", stderr);
		return NULL;
	}
	memcpy(copy, ours, (n + 1) * sizeof(*copy));
	environ = copy;
	if (!prepare_env(lib, journal, policy, calls) && (!ready || !set("FTSBX_SESSION_READY", ready)))
		env = environ;
	environ = ours;
	free(copy);
	return env;
}

/* Compile the policy as the root would: in its environment ENV. */
static struct policy *compile_as_root(char **env)
{
	char **ours = environ, err[1024];
	struct policy *pol = NULL;
	const char *file;

	environ = env;
	file = getenv("FTSBX_POLICY");
	if (policy_load(&pol, file && *file ? file : NULL, err, sizeof(err)))
		pol = NULL;     /* the root says what is wrong */
	environ = ours;
	return pol;
}

/* Create the session while the command starts, so that its root finds it
 * there (ftsbx records the command line), and leave the policy compiled in
 * it for ROOT. True when the policy is there. A failure is the root's to
 * report: it creates the session, or compiles the policy, itself. */
static bool prepare_session(const char *journal, char *const *cmd, char **env, pid_t root)
{
	struct jsession_info info = { .argv = cmd };
	struct jsession s;
	struct policy *pol;
	bool put = false;

	if (jsession_open(&s, journal, &info))
		return false;
	pol = compile_as_root(env);
	if (pol) {
		const void *blob;
		size_t n;
		policy_blob(pol, &blob, &n);
		put = jshared_policy_put(&s, (uint32_t)root, blob, n) == 0;
		policy_free(pol);
	}
	jsession_close(&s);
	return put;
}

/* Does the shim load into the program PATH? Not into a static one
 * (busybox-static, Go without cgo), one of musl's, a 32-bit one, or one
 * whose exec gains privileges (setuid, setgid, file capabilities), for
 * which the loader drops LD_PRELOAD. True for anything else (a script, a
 * file that cannot be read: the exec says what is wrong). */
static bool shim_loads_at(const char *path, int depth)
{
	unsigned char buf[4096];
	Elf64_Ehdr eh;
	struct stat st;
	bool interp = false;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return true;
	n = fstat(fd, &st) == 0 ? read(fd, buf, sizeof(buf)) : -1;
	close(fd);
	if (n < 0)
		return true;
	if ((st.st_mode & S_ISUID && st.st_uid != geteuid()) || (st.st_mode & S_ISGID && st.st_gid != getegid()) ||
	    (geteuid() != 0 && getxattr(path, "security.capability", NULL, 0) >= 0))
		return false;
	if (n > 2 && buf[0] == '#' && buf[1] == '!' && depth < 4) {
		/* a script: what its interpreter is (#!/usr/bin/busybox sh) */
		char interp[PATH_MAX];
		size_t i = 2, k = 0;
		while (i < (size_t)n && (buf[i] == ' ' || buf[i] == '\t'))
			i++;
		while (i < (size_t)n && k + 1 < sizeof(interp) && buf[i] != ' ' && buf[i] != '\t' && buf[i] != '\n')
			interp[k++] = (char)buf[i++];
		interp[k] = 0;
		return !k || shim_loads_at(interp, depth + 1);
	}
	if (n < EI_NIDENT || memcmp(buf, ELFMAG, SELFMAG))
		return true;
	if (buf[EI_CLASS] != ELFCLASS64)
		return false;
	if ((size_t)n < sizeof(eh))
		return true;
	memcpy(&eh, buf, sizeof(eh));
	for (int i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		size_t off = eh.e_phoff + (size_t)i * sizeof(ph);
		if (off + sizeof(ph) > (size_t)n)
			return true;    /* not seen: the shim judges it as it loads */
		memcpy(&ph, buf + off, sizeof(ph));
		if (ph.p_type == PT_INTERP) {
			interp = true;
			if (ph.p_offset <= (size_t)n && ph.p_filesz <= (size_t)n - ph.p_offset &&
			    memmem(buf + ph.p_offset, ph.p_filesz, "ld-musl", 7))
				return false;
		}
	}
	return interp;
}

static bool shim_loads(const char *path)
{
	return shim_loads_at(path, 0);
}

/* CMD's program, found as execvp finds it, into OUT; false if none. */
static bool find_program(const char *name, char *out, size_t size)
{
	const char *path = getenv("PATH");

	if (strchr(name, '/'))
		return snprintf(out, size, "%s", name) < (int)size;
	for (path = path ? path : "/usr/local/bin:/usr/bin:/bin"; *path;) {
		size_t k = strcspn(path, ":");
		struct stat st;
		if (snprintf(out, size, "%.*s%s%s", (int)k, path, k ? "/" : "", name) < (int)size &&
		    stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
			return true;
		path += k + (path[k] == ':');
	}
	return false;
}

/* The command line to start for CMD: CMD itself, or, when the shim cannot
 * load into its program, env -- CMD... in ROOM (which has room for CMD's
 * words and two more): env is the session's first process then, the shim
 * in it, and its exec of CMD is judged as every exec in the session is
 * (refused, or run with a warning in its own Landlock domain, under the
 * session's). Started as it is, a static program would run with no policy
 * and no confinement at all, and a setuid one unjudged. */
static char *const *root_command(char *const *cmd, char **room)
{
	static char usr_env[] = "/usr/bin/env", bin_env[] = "/bin/env", dashes[] = "--";
	char path[PATH_MAX];
	int n = 0;

	if (!find_program(cmd[0], path, sizeof(path)) || shim_loads(path))
		return cmd;
	room[0] = access(usr_env, X_OK) == 0 ? usr_env : access(bin_env, X_OK) == 0 ? bin_env : NULL;
	if (!room[0])
		return NULL;    /* nothing the shim loads into to start it through */
	room[1] = dashes;
	while (cmd[n]) {
		room[n + 2] = cmd[n];
		n++;
	}
	room[n + 2] = NULL;
	return room;
}

/* Start CMD in ENV with the descriptor READY (or -1) left open across the
 * exec. A vfork: no copy of this process's memory to make and throw away,
 * and this process goes on once the exec is done (the program's loading
 * then runs beside the session's making). The child only execs, or says
 * why it could not. Returns the pid, or -errno with nothing left running. */
static pid_t start(char *const *cmd, char **env, int ready)
{
	volatile int err = 0;
	pid_t pid = vfork();

	if (pid == 0) {
		if (ready < 0 || fcntl(ready, F_SETFD, 0) == 0)
			execvpe(cmd[0], cmd, env);
		err = errno;
		_exit(127);
	}
	if (pid < 0)
		return -errno;
	if (err) {
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		return -err;
	}
	return pid;
}

/* While ftsbx makes the session and compiles the policy, the command's
 * program loads, and on a machine of two CPUs the scheduler often ran both
 * on one: ftsbx keeps to the CPU it is on meanwhile (its own thread only:
 * the command, forked before, keeps its mask) and takes its mask back
 * after. Measured: `ftsbx run -- true` 3.55-3.63 -> 3.37-3.38 ms, the
 * command's constructor reached 0.5 ms sooner. Nothing happens where the
 * mask cannot be read or has one CPU. */
static bool keep_to_this_cpu(cpu_set_t *was)
{
	int cpu = sched_getcpu();
	cpu_set_t one;

	if (cpu < 0 || sched_getaffinity(0, sizeof(*was), was) < 0 || CPU_COUNT(was) < 2)
		return false;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	return sched_setaffinity(0, sizeof(one), &one) == 0;
}

/* DIR.heads, opened (created) while the command runs. */
struct heads { int fd; struct stat st; };

static struct heads open_heads(const char *journal)
{
	char path[PATH_MAX + 8];
	struct heads h;

	snprintf(path, sizeof(path), "%s.heads", journal);
	h.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
	if (h.fd >= 0 && fstat(h.fd, &h.st) < 0) {
		close(h.fd);
		h.fd = -1;
	}
	return h;
}

static int write_heads(int fd, const struct jreader *r)
{
	FILE *f = fdopen(fd, "w");
	int err;

	if (!f) {
		close(fd);
		return -1;
	}
	for (size_t i = 0; i < r->nheads; i++)
		fprintf(f, "%s\n", r->heads[i]);
	err = ferror(f);
	return fclose(f) || err ? -1 : 0;
}

static bool same_file(const char *path, const struct stat *st)
{
	struct stat now;

	return lstat(path, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino;
}

/* Take back DIR.heads opened beforehand (the name still leads to it). */
static void close_heads(const char *journal, struct heads h)
{
	char path[PATH_MAX + 8];

	if (h.fd < 0)
		return;
	snprintf(path, sizeof(path), "%s.heads", journal);
	if (same_file(path, &h.st))
		unlink(path);
	close(h.fd);
}

/* Write the heads into the file opened beforehand if the name still leads
 * to it (the session may have replaced it since), else into a new one. */
static void store_heads(const struct jreader *r, const char *journal, struct heads h)
{
	char path[PATH_MAX + 8];
	int fd;

	snprintf(path, sizeof(path), "%s.heads", journal);
	if (h.fd >= 0) {
		if (same_file(path, &h.st) && ftruncate(h.fd, 0) == 0) {
			if (write_heads(h.fd, r) == 0 && same_file(path, &h.st))
				return;
		} else {
			close(h.fd);
		}
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0 || write_heads(fd, r) < 0)
		fprintf(stderr, "ftsbx: cannot store the chain heads in '%s': %s\n", path, strerror(errno));
}

static int rewind_all(const char *journal)
{
	char tx[PATH_MAX];
	int st;
	pid_t pid;

	sibling(tx, sizeof(tx), "txreplay");
	pid = fork();
	if (pid == 0) {
		/* what it undid goes with ftsbx's own lines: CMD's output stays CMD's */
		if (dup2(2, 1) < 0)
			_exit(127);
		execl(tx, tx, "rewind", journal, (char *)NULL);
		fprintf(stderr, "ftsbx: cannot run '%s': %s\n", tx, strerror(errno));
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int cmd_run(int argc, char **argv)
{
	char lib[PATH_MAX], journal[PATH_MAX], err[512];
	const char *policy = NULL, *jarg = NULL, *onfail = "keep";
	bool calls = false, pinned;
	cpu_set_t cpus;
	struct jreader r;
	struct tally t;
	struct heads heads;
	int i, status, code, ready[2];
	char **env;
	pid_t pid;

	for (i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		if (!strcmp(argv[i], "--policy") && i + 1 < argc)
			policy = argv[++i];
		else if (!strcmp(argv[i], "--journal") && i + 1 < argc)
			jarg = argv[++i];
		else if (!strcmp(argv[i], "--on-failure") && i + 1 < argc)
			onfail = argv[++i];
		else if (!strcmp(argv[i], "--rewind-failed-calls"))
			calls = true;
		else
			return run_usage();
	}
	if (i + 1 >= argc || (strcmp(onfail, "rewind") && strcmp(onfail, "keep")))
		return run_usage();
	/* Inside a session already (run by one of its processes: the shim
	 * keeps FTSBX_ROOT and LD_PRELOAD in every environment it passes on),
	 * a session of its own would take the command's changes out of the
	 * outer journal, which then could not rewind them, and its policy
	 * could loosen the outer one's: refused. */
	const char *outer = getenv("FTSBX_ROOT"), *pre = getenv("LD_PRELOAD");
	if (outer && *outer && pre && strstr(pre, "libftsbx")) {
		const char *oj = getenv("FTSBX_JOURNAL");
		fprintf(stderr, "ftsbx: refused 'ftsbx run': already inside the session of '%s' (its root %s); "
			"a nested session would take the command's changes out of that journal: run it directly\n",
			oj ? oj : "?", outer);
		return 126;
	}
	if (jarg && jarg[0] == '/') {
		snprintf(journal, sizeof(journal), "%s", jarg);
	} else if (jarg) {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd)) ||
		    (size_t)snprintf(journal, sizeof(journal), "%s/%s", cwd, jarg) >= sizeof(journal)) {
			fprintf(stderr, "ftsbx: the journal path is too long\n");
			return 1;
		}
	} else {
		jsession_default_dir(journal, sizeof(journal), getenv("XDG_STATE_HOME"), getenv("HOME"));
	}
	sibling(lib, sizeof(lib), "libftsbx.so");
	if (access(lib, R_OK) < 0)
		sibling(lib, sizeof(lib), "../lib/ftsbx/libftsbx.so");   /* make install */
	if (getenv("FTSBX_LIB"))
		snprintf(lib, sizeof(lib), "%s", getenv("FTSBX_LIB"));
	if (access(lib, R_OK) < 0) {
		fprintf(stderr, "ftsbx: cannot find the shim '%s': %s\n", lib, strerror(errno));
		return 1;
	}
	/* The session is created here while the command's program loads: its
	 * root waits on READY's read end (shim/state.c) for a 'P' (the policy
	 * is there too) or its end, once the session is there. It is made
	 * only once the program has started: a command that cannot run leaves
	 * no session behind. Only the root gets the shim: ftsbx (and the
	 * txreplay it may run afterwards) stay unwrapped. */
	char v[48] = "";
	struct stat st;
	if (pipe2(ready, O_CLOEXEC) < 0)
		ready[0] = ready[1] = -1;
	else if (fstat(ready[0], &st) == 0)     /* FD:INODE: no other pipe is taken for it */
		snprintf(v, sizeof(v), "%d:%llu", ready[0], (unsigned long long)st.st_ino);
	env = root_env(lib, journal, policy, calls, *v ? v : NULL);
	if (!env)
		return 126;
	char **room = calloc((size_t)(argc - i) + 2, sizeof(char *));
	if (!room)
		return 126;
	char *const *cmd = root_command(argv + i + 1, room);
	if (!cmd) {
		fprintf(stderr, "ftsbx: cannot run '%s' confined: the shim cannot load into it, and there is no env "
			"to start it through\n", argv[i + 1]);
		free(room);
		return 126;
	}
	pid = start(cmd, env, *v ? ready[0] : -1);
	free(room);
	if (ready[0] >= 0)
		close(ready[0]);
	if (pid < 0) {
		fprintf(stderr, "ftsbx: cannot run '%s': %s\n", argv[i + 1], strerror((int)-pid));
		if (ready[1] >= 0)
			close(ready[1]);
		return 127;
	}
	pinned = keep_to_this_cpu(&cpus);
	if (prepare_session(journal, argv + i + 1, env, pid) && ready[1] >= 0) {
		/* should this fail, the root compiles the policy itself; a
		 * root that is gone already has closed the other end */
		struct sigaction ign = { .sa_handler = SIG_IGN }, old;
		sigaction(SIGPIPE, &ign, &old);
		ssize_t w = write(ready[1], "P", 1);
		sigaction(SIGPIPE, &old, NULL);
		(void)w;
	}
	if (ready[1] >= 0)
		close(ready[1]);        /* the root goes on */
	if (pinned)
		sched_setaffinity(0, sizeof(cpus), &cpus);
	heads = open_heads(journal);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return 1;
	code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	if (code && !strcmp(onfail, "rewind"))
		rewind_all(journal);
	if (jreader_open(&r, journal, err, sizeof(err))) {
		if (access(journal, F_OK) < 0 && errno == ENOENT)
			fprintf(stderr, "ftsbx: exit %d; nothing was journaled (no session at '%s')\n", code, journal);
		else
			fprintf(stderr, "ftsbx: exit %d; no journal at '%s' (%s)\n", code, journal, err);
		close_heads(journal, heads);     /* no journal: no heads either */
		return code;
	}
	count(&r, &t);
	store_heads(&r, journal, heads);
	fprintf(stderr, "ftsbx: exit %d; %zu change%s in %zu tool call%s, %zu refused, %zu undone by rewinds; "
		"journal %s\n", code, t.changes, t.changes == 1 ? "" : "s", t.calls, t.calls == 1 ? "" : "s",
		t.refused, t.rewound, journal);
	jreader_close(&r);
	return code;
}
