/*
 * exec.c - the exec family, posix_spawn, system and popen: each start of a
 * program is recorded (J_EXEC: who ran what, where), and the environment
 * stays sticky: an envp that dropped LD_PRELOAD or an FTSBX_* variable gets
 * them back, so that env -i or a cleaned environment does not escape the
 * shim. No heap: the new envp is built on the stack (or in an mmap'd block
 * for an enormous one), since an exec may run in a vfork child.
 *
 * A vfork child (txn.c) shares its parent's memory until it execs: its
 * exec hook records into the parent's segment, with its own pid and cwd,
 * and leaves the thread's hook guard as it found it.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "shim.h"

extern char **environ;

#define STICKY_MAX 24
/* The strings every process keeps (LD_PRELOAD and the session's few
 * FTSBX_* variables, a few hundred bytes) go with the data the loader
 * writes anyway (shim.h: HOT_DATA), where they cost no page fault of
 * their own; a longer environment goes on in sticky_more. */
static char sticky_buf[384] HOT_DATA;
static char sticky_more[16384];
static char *sticky[STICKY_MAX] HOT_DATA;       /* "NAME=VALUE"; LD_PRELOAD first */
static unsigned char sticky_name[STICKY_MAX] HOT_DATA;  /* the length of "NAME=" */
static size_t nsticky HOT_DATA;

STARTUP_TEXT static void add_sticky(const char *s, size_t used[2])
{
	size_t n = strlen(s) + 1, k = 1;
	int more = used[0] + n > sizeof(sticky_buf);

	while (s[k - 1] && s[k - 1] != '=')
		k++;

	if (nsticky == STICKY_MAX || (more && used[1] + n > sizeof(sticky_more)) || k > 255)
		return;
	sticky_name[nsticky] = (unsigned char)k;
	sticky[nsticky++] = memcpy(more ? sticky_more + used[1] : sticky_buf + used[0], s, n);
	used[more] += n;
}

/* Does the LD_PRELOAD value V name this library (an entry of its own,
 * between spaces or colons)? */
STARTUP_TEXT static bool lists_self(const char *v)
{
	size_t n = strlen(shim.self);

	for (const char *s = v; *s; s++)
		if ((s == v || s[-1] == ' ' || s[-1] == ':') && same_bytes(s, shim.self, n) &&
		    (s[n] == 0 || s[n] == ' ' || s[n] == ':'))
			return true;
	return false;
}

/* Append S to LINE (N bytes so far, CAP in all), cut as snprintf would. */
STARTUP_TEXT static void append(char *line, size_t *n, size_t cap, const char *s)
{
	size_t l = strlen(s);

	if (l > cap - 1 - *n)
		l = cap - 1 - *n;
	memcpy(line + *n, s, l);
	*n += l;
	line[*n] = 0;
}

/* Remember LD_PRELOAD (with this library in it) and every FTSBX_* but
 * FTSBX_TXN_GROUP, which a harness gives to the tool calls it groups.
 * (In every process's constructor: no snprintf, strncmp or strstr, whose
 * first calls cost more than the work; see state.c.) */
STARTUP_TEXT HIDDEN void env_capture(void)
{
	char line[PATH_MAX + 16];
	const char *pre = shim_getenv(STARTUP_STR("LD_PRELOAD"));
	size_t used[2] = { 0, 0 }, n = 0;

	append(line, &n, sizeof(line), STARTUP_STR("LD_PRELOAD="));
	if (!pre || !lists_self(pre)) {
		append(line, &n, sizeof(line), shim.self);
		if (pre && *pre)
			append(line, &n, sizeof(line), " ");
	}
	append(line, &n, sizeof(line), pre ? pre : "");
	add_sticky(line, used);
	for (char **e = environ; e && *e; e++)
		if (same_bytes(*e, STARTUP_STR("FTSBX_"), 6) && !same_bytes(*e, STARTUP_STR("FTSBX_TXN_GROUP="), 16))
			add_sticky(*e, used);
}

static size_t name_len(const char *s)
{
	const char *eq = strchr(s, '=');

	return eq ? (size_t)(eq - s) + 1 : strlen(s);
}

static bool has_var(char *const *env, const char *var)
{
	size_t n = name_len(var);

	for (; env && *env; env++)
		if (!strncmp(*env, var, n))
			return true;
	return false;
}

/* The FTSBX_TXN a started program gets: its transaction (spawn_txn for a
 * child the root is starting, else this process's own). Per thread: the
 * agent's threads start tool calls at once. */
static __thread char txn_var[32] __attribute__((tls_model("initial-exec")));
static __thread long spawn_txn __attribute__((tls_model("initial-exec"))) = -1;

static void set_txn_var(void)
{
	uint32_t t = spawn_txn >= 0 ? (uint32_t)spawn_txn : txn_exec_txn();

	memcpy(txn_var, "FTSBX_TXN=", 10);
	txn_var[10 + jdecimal(txn_var + 10, t)] = 0;
}

static bool is_var(const char *e, const char *name, size_t n)
{
	return e[0] == name[0] && !strncmp(e, name, n);
}

/* The envp to pass on: ENVP with every sticky variable that it lacks, and
 * LD_PRELOAD pointing at this library; with no LD_PRELOAD at all for a
 * program the shim cannot be loaded into (exec_no_preload, which the
 * exec's judgement just set). BUF holds CAP pointers. One pass over ENVP
 * finds what it has: most of an exec's cost is here when the environment
 * is large. */
HIDDEN char **env_fix(char *const envp[], char **buf, size_t cap)
{
	bool have[STICKY_MAX] = { false }, txn_seen = false, ok = false, drop = exec_no_preload;
	const char *pre = NULL;
	size_t n = 0, k = 0;

	set_txn_var();
	for (char *const *e = envp; e && *e; e++, n++) {
		const char *v = *e;
		if (v[0] == 'L') {
			if (!strncmp(v, "LD_PRELOAD=", 11))
				pre = v + 11;   /* the last one counts */
		} else if (v[0] == 'F' && !strncmp(v, "FTSBX_", 6)) {
			if (!txn_seen && !strncmp(v + 6, "TXN=", 4)) {
				txn_seen = true;
				ok = !strcmp(v, txn_var);
			}
			for (size_t i = 1; i < nsticky; i++)
				if (!have[i] && !strncmp(v, sticky[i], sticky_name[i]))
					have[i] = true;
		}
	}
	ok = ok && !drop && (!nsticky || (pre && lists_self(pre)));
	for (size_t i = 1; i < nsticky && ok; i++)
		ok = have[i];
	if (ok)
		return (char **)envp;
	if (n + nsticky + 1 > cap)
		return (char **)envp;   /* caller's buffer too small: see exec_env */
	for (char *const *e = envp; e && *e; e++) {
		if (is_var(*e, "LD_PRELOAD=", 11) || is_var(*e, "FTSBX_TXN=", 10))
			continue;       /* ours come below */
		buf[k++] = *e;
	}
	if (nsticky && !drop)
		buf[k++] = sticky[0];   /* LD_PRELOAD */
	for (size_t i = 1; i < nsticky; i++)
		if (!have[i] && strncmp(sticky[i], "FTSBX_TXN=", 10))
			buf[k++] = sticky[i];
	buf[k++] = txn_var;
	buf[k] = NULL;
	return buf;
}

static size_t env_count(char *const envp[])
{
	size_t n = 0;

	for (char *const *e = envp; e && *e; e++)
		n++;
	return n;
}

static void record_exec_txn(const char *path, char *const argv[], pid_t pid, uint32_t txn);

/* Record a program start. ARGV may be NULL. */
static void record_exec(const char *path, char *const argv[])
{
	/* a vfork child: its own pid (shim_pid is its parent's) */
	record_exec_txn(path, argv, txn_vfork_child() ? getpid() : 0, shim_txn());
}

/* Build the J_EXEC record of PATH and ARGV into BUF (CAP bytes): false
 * when it does not fit. */
static bool build_exec(struct jbuild *b, uint8_t *buf, size_t cap, const char *path, char *const argv[],
		       uint32_t pid, uint32_t ppid, uint32_t txn, const char *cwd)
{
	jb_init(b, buf, cap, J_EXEC, 0, txn);
	jb_u32(b, F_PID, pid);
	jb_u32(b, F_PPID, ppid);
	jb_str(b, F_PATH, path);
	jb_argv(b, F_ARGV, argv);
	jb_str(b, F_CWD, cwd);
	return !b->overflow;
}

/* A command line longer than record_exec_txn's buffer: in one of 16 KiB,
 * else cut: its first words while they fit in 8 KiB, the word that does
 * not cut short and ended with "...", no more (a script given to bash -c,
 * a file's text in a heredoc). */
__attribute__((noinline)) static void record_exec_long(struct jseg *g, const char *path, char *const argv[],
							uint32_t pid, uint32_t ppid, uint32_t txn, const char *cwd)
{
	uint8_t buf[16384];
	char cut[8192], *words[64];
	struct jbuild b;

	if (!build_exec(&b, buf, sizeof(buf), path, argv, pid, ppid, txn, cwd)) {
		size_t room = sizeof(cut), k = 0, most = sizeof(words) / sizeof(words[0]) - 2;
		for (; argv && argv[k]; k++) {
			if (k == most) {
				words[k++] = "...";     /* more words than kept */
				break;
			}
			size_t n = strlen(argv[k]);
			if (n + 1 <= room) {
				words[k] = argv[k];
				room -= n + 1;
				continue;
			}
			if (room > 16) {
				memcpy(cut, argv[k], room - 4);
				memcpy(cut + room - 4, "...", 4);
				words[k++] = cut;
			}
			break;
		}
		if (!k)
			words[k++] = (char *)path;
		words[k] = NULL;
		if (!build_exec(&b, buf, sizeof(buf), path, words, pid, ppid, txn, cwd)) {
			words[1] = NULL;
			build_exec(&b, buf, sizeof(buf), path, words, pid, ppid, txn, "");
		}
	}
	jseg_append(g, &b, NULL);
}

/* The J_EXEC record of PATH and ARGV, run in CWD. Most command lines fit
 * in a buffer of 4 KiB: the journal's calls below it (the segment's open,
 * the hash chain) then run on stack pages a fork child has touched
 * already, where a buffer of 16 KiB put them on fresh ones (a page fault
 * each). */
static void record_exec_in(struct jseg *g, const char *cwd, const char *path, char *const argv[], pid_t pid,
			   uint32_t txn)
{
	uint8_t buf[4096];
	struct jbuild b;
	uint32_t self = (uint32_t)(pid ? pid : shim_pid()), parent = (uint32_t)(pid ? shim_pid() : getppid());

	if (build_exec(&b, buf, sizeof(buf), path, argv, self, parent, txn, cwd))
		jseg_append(g, &b, NULL);
	else
		record_exec_long(g, path, argv, self, parent, txn, cwd);
}

/* A vfork child may have chdir'd: the cached cwd is its parent's. */
__attribute__((noinline)) static void record_exec_vforked(struct jseg *g, const char *path, char *const argv[],
							   pid_t pid, uint32_t txn)
{
	char cwd[PATH_MAX];

	record_exec_in(g, getcwd(cwd, sizeof(cwd)), path, argv, pid, txn);
}

static void record_exec_txn(const char *path, char *const argv[], pid_t pid, uint32_t txn)
{
	struct jseg *g;

	if (shim_segment(&g))
		return;
	if (txn_vfork_child())
		record_exec_vforked(g, path, argv, pid, txn);
	else
		record_exec_in(g, cwd_get(), path, argv, pid, txn);
}

/* Run FN with a sticky copy of ENVP: on the stack, or mmap'd when huge. */
#define WITH_ENV(envp, fixed, body) do {                                         \
	size_t cap_ = env_count(envp) + STICKY_MAX + 1;                          \
	char **mem_ = NULL, *stack_[cap_ <= 4096 ? cap_ : 1];                    \
	char **fixed;                                                            \
	if (cap_ > 4096) {                                                       \
		mem_ = mmap(NULL, cap_ * sizeof(char *), PROT_READ | PROT_WRITE, \
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);                 \
		if (mem_ == MAP_FAILED)                                          \
			mem_ = NULL;                                             \
	}                                                                        \
	fixed = env_fix(envp, mem_ ? mem_ : stack_, mem_ ? cap_ : (cap_ <= 4096 ? cap_ : 0)); \
	body;                                                                    \
	if (mem_)                                                                \
		munmap(mem_, cap_ * sizeof(char *));                             \
} while (0)

/* git takes configuration from its environment as well as from -c
 * (GIT_CONFIG_COUNT with GIT_CONFIG_KEY_N and GIT_CONFIG_VALUE_N, and
 * GIT_CONFIG_PARAMETERS: 'KEY'='VALUE' ...): a push forced or aliased that
 * way (`GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=remote.origin.push
 * GIT_CONFIG_VALUE_0=+main git push`, as bash execs it) is judged as the
 * same -c KEY=VALUE words would be. ARGV itself when there are none (or
 * the program is not git), else OUT, built in BUF. */
static char *const *git_env_argv(char *const argv[], char *const envp[], char *out[64], char *buf, size_t cap)
{
	const char *params = NULL, *count = NULL;
	size_t used = 0;
	int n = 1, k;

	for (char *const *e = envp; *e; e++)
		if (!strncmp(*e, "GIT_CONFIG_", 11)) {
			if (!strncmp(*e + 11, "PARAMETERS=", 11))
				params = *e + 22;
			else if (!strncmp(*e + 11, "COUNT=", 6))
				count = *e + 17;
		}
	if (!params && !count)
		return argv;
	out[0] = argv[0];
	for (long i = 0, c = count ? strtol(count, NULL, 10) : 0; i < c && i < 24 && n < 56; i++) {
		char kn[40], vn[40];
		const char *key, *val;
		snprintf(kn, sizeof(kn), "GIT_CONFIG_KEY_%ld", i);
		snprintf(vn, sizeof(vn), "GIT_CONFIG_VALUE_%ld", i);
		key = val = NULL;
		for (char *const *e = envp; *e; e++) {
			size_t kl = strlen(kn), vl = strlen(vn);
			if (!strncmp(*e, kn, kl) && (*e)[kl] == '=')
				key = *e + kl + 1;
			if (!strncmp(*e, vn, vl) && (*e)[vl] == '=')
				val = *e + vl + 1;
		}
		int w = key ? snprintf(buf + used, cap - used, "%s=%s", key, val ? val : "") : -1;
		if (w < 0 || (size_t)w >= cap - used)
			continue;
		out[n++] = "-c";
		out[n++] = buf + used;
		used += (size_t)w + 1;
	}
	/* 'KEY'='VALUE' 'KEY2'='VALUE2': the quotes dropped */
	for (const char *p = params; p && *p && n < 56;) {
		size_t start = used;
		while (*p == ' ')
			p++;
		if (!*p)
			break;
		for (bool q = false; *p && (q || *p != ' ') && used + 1 < cap; p++) {
			if (*p == '\'' ) {
				q = !q;
				continue;
			}
			buf[used++] = *p;
		}
		if (used + 1 >= cap)
			break;
		buf[used++] = 0;
		out[n++] = "-c";
		out[n++] = buf + start;
	}
	for (k = 1; argv[k] && n < 63; k++)
		out[n++] = argv[k];
	out[n] = NULL;
	return argv[k] ? argv : out;    /* too many words to add: as it is */
}

/* guard_exec for git, with what its environment configures (on a stack
 * frame of its own: no other exec pays for the buffers). */
static __attribute__((noinline)) int guard_exec_git(const char *path, bool search, char *const argv[],
						    char *const envp[])
{
	char *words[64], buf[4096];

	return guard_exec(path, search, envp ? git_env_argv(argv, envp, words, buf, sizeof(buf)) : argv);
}

static bool runs_git(const char *path, char *const argv[])
{
	const char *prog = path ? path : argv[0], *slash = prog ? strrchr(prog, '/') : NULL;

	return prog && !strcmp(slash ? slash + 1 : prog, "git");
}

/* access(P, F_OK)'s errno, or 0: in a shell's fork child, without the
 * page of libc's code the wrapper is on. */
static int missing(const char *p)
{
#ifdef SHIM_RAW
	long r = shim_raw6(SYS_faccessat, AT_FDCWD, (long)p, F_OK, 0, 0, 0);

	return r < 0 ? (int)-r : 0;
#else
	return access(p, F_OK) < 0 ? errno : 0;
#endif
}

/* 0: not ours to look at (call the real function); 1: go on; -1: refused
 * (errno set). ENVP: the environment the program gets. A vfork child runs
 * with its guard up (its other hooks pass through) and keeps it up. */
static int exec_enter(struct hook_ctx *c, const char *path, bool search, char *const argv[], char *const envp[])
{
	int err;

	if (txn_vfork_child())
		c->saved_errno = errno;
	else if (!hook_enter(c))
		return 0;
	/* execvp-style callers (Python's subprocess) try every PATH entry in
	 * turn: a program that is not there fails as the exec would (it
	 * cannot have appeared in between: nothing was exec'd), unjudged,
	 * unrecorded, so that a refusal is said and recorded once */
	err = path && strchr(path, '/') ? missing(path) : 0;
	if (err != ENOENT && err != ENOTDIR) {  /* "(fexecve)": a file with no path, judged by its argv */
		bool was = kind_keep_off;
		const char *file = path && path[0] == '(' ? NULL : path;
		kind_keep_off = true;
		err = argv && argv[0] && runs_git(file, argv) ? guard_exec_git(file, search, argv, envp)
							      : guard_exec(file, search, argv);
		kind_keep_off = was;
	}
	/* the descriptors the program keeps: their pre-images now (pending.c) */
	if (!err && !txn_vfork_child())
		err = pend_take_all(true);
	if (err) {
		if (txn_vfork_child())
			errno = err;
		else
			hook_refuse(c, err);
		return -1;
	}
	txn_exec(argv, envp);
	record_exec(path, argv);
	return 1;
}

/* Just before the real exec. */
static void exec_leave(struct hook_ctx *c)
{
	if (txn_vfork_child()) {
		errno = c->saved_errno;
	} else {
		shim_segment_release();
		hook_leave(c);
	}
}

EXPORT int execve(const char *p, char *const a[], char *const e[])
{
	struct hook_ctx c;
	int r;

	int k = exec_enter(&c, p, false, a, e);
	if (k <= 0)
		return k < 0 ? -1 : REAL(execve)(p, a, e);
	WITH_ENV(e, fixed, { exec_leave(&c); r = REAL(execve)(p, a, fixed); });
	return r;
}

/* The program execveat(D, P, .., FL) and fexecve (P "", AT_EMPTY_PATH)
 * run, by a path the rules can judge: P itself when absolute, else P under
 * D, or D's own file; into BUF. A file that has no path (a memfd, one
 * deleted) is judged by argv. */
static const char *exec_at_path(char buf[PATH_MAX], int d, const char *p, int fl)
{
	if (p && p[0] == '/')
		return p;
	if (!p || !*p)
		return (fl & AT_EMPTY_PATH) && !path_fd(buf, d) && buf[0] == '/' && !access(buf, F_OK) ? buf
											       : "(fexecve)";
	return path_abs(buf, d, p) ? p : buf;
}

EXPORT int execveat(int d, const char *p, char *const a[], char *const e[], int fl)
{
	struct hook_ctx c;
	char buf[PATH_MAX];
	int r;

	int k = exec_enter(&c, exec_at_path(buf, d, p, fl), false, a, e);
	if (k <= 0)
		return k < 0 ? -1 : REAL(execveat)(d, p, a, e, fl);
	WITH_ENV(e, fixed, { exec_leave(&c); r = REAL(execveat)(d, p, a, fixed, fl); });
	return r;
}

EXPORT int fexecve(int fd, char *const a[], char *const e[])
{
	struct hook_ctx c;
	int r;

	char buf[PATH_MAX];
	int k = exec_enter(&c, exec_at_path(buf, fd, "", AT_EMPTY_PATH), false, a, e);
	if (k <= 0)
		return k < 0 ? -1 : REAL(fexecve)(fd, a, e);
	WITH_ENV(e, fixed, { exec_leave(&c); r = REAL(fexecve)(fd, a, fixed); });
	return r;
}

EXPORT int execvpe(const char *f, char *const a[], char *const e[])
{
	struct hook_ctx c;
	int r;

	int k = exec_enter(&c, f, true, a, e);
	if (k <= 0)
		return k < 0 ? -1 : REAL(execvpe)(f, a, e);
	WITH_ENV(e, fixed, { exec_leave(&c); r = REAL(execvpe)(f, a, fixed); });
	return r;
}

EXPORT int execv(const char *p, char *const a[]) { return execve(p, a, environ); }
EXPORT int execvp(const char *f, char *const a[]) { return execvpe(f, a, environ); }

/* execl and friends: gather the arguments on the stack. */
#define GATHER(arg0, ap, argv, tail) do {                               \
	size_t n_ = 1;                                                   \
	va_list cp_;                                                     \
	va_copy(cp_, ap);                                                \
	while (va_arg(cp_, char *))                                      \
		n_++;                                                    \
	va_end(cp_);                                                     \
	char *argv[n_ + 1];                                              \
	argv[0] = (char *)arg0;                                          \
	for (size_t i_ = 1; i_ <= n_; i_++)                              \
		argv[i_] = va_arg(ap, char *);                           \
	tail;                                                            \
} while (0)

EXPORT int execl(const char *p, const char *arg, ...)
{
	va_list ap;
	int r;

	va_start(ap, arg);
	GATHER(arg, ap, argv, r = execve(p, argv, environ));
	va_end(ap);
	return r;
}

EXPORT int execlp(const char *f, const char *arg, ...)
{
	va_list ap;
	int r;

	va_start(ap, arg);
	GATHER(arg, ap, argv, r = execvpe(f, argv, environ));
	va_end(ap);
	return r;
}

EXPORT int execle(const char *p, const char *arg, ...)
{
	va_list ap;
	int r;

	va_start(ap, arg);
	GATHER(arg, ap, argv, { char *const *envp = va_arg(ap, char *const *); r = execve(p, argv, envp); });
	va_end(ap);
	return r;
}

static int spawn_hook(bool search, pid_t *pid, const char *p, const posix_spawn_file_actions_t *fa,
		      const posix_spawnattr_t *at, char *const a[], char *const e[])
{
	struct hook_ctx c;
	pid_t child = 0;
	int r;

	if (!hook_enter(&c))
		return (search ? REAL(posix_spawnp) : REAL(posix_spawn))(pid, p, fa, at, a, e);
	int err = guard_exec(p, search, a);
	if (err) {
		hook_refuse(&c, err);
		return err;     /* posix_spawn returns the error number */
	}
	uint32_t key, t = txn_for_spawn(a, e, &key);
	if ((err = spawn_opens_check(fa, t))) {
		hook_refuse(&c, err);
		txn_system_done(key, 126 << 8);    /* a tool call that never ran, as a shell says it */
		return err;
	}
	/* file actions may keep any descriptor (pending.c) */
	if ((err = pend_take_all(fa == NULL))) {
		hook_refuse(&c, err);
		txn_system_done(key, 126 << 8);
		return err;
	}
	spawn_txn = t;
	WITH_ENV(e, fixed, {
		r = (search ? REAL(posix_spawnp) : REAL(posix_spawn))(&child, p, fa, at, a, fixed);
	});
	spawn_txn = -1;
	if (r == 0) {
		txn_spawned(child, key);
		record_exec_txn(p, a, child, t);
	}
	if (pid)
		*pid = child;
	hook_leave(&c);
	/* a spawn that failed (no such program) may have made its file
	 * actions' changes: its tool call ends, as a shell's 127 */
	if (r != 0)
		txn_system_done(key, 127 << 8);
	return r;
}

EXPORT int posix_spawn(pid_t *pid, const char *p, const posix_spawn_file_actions_t *fa,
		       const posix_spawnattr_t *at, char *const a[], char *const e[])
{
	return spawn_hook(false, pid, p, fa, at, a, e);
}

EXPORT int posix_spawnp(pid_t *pid, const char *p, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *at, char *const a[], char *const e[])
{
	return spawn_hook(true, pid, p, fa, at, a, e);
}

/* system and popen start /bin/sh with environ through glibc's internal
 * spawn: put the sticky variables back into environ first. */
static void environ_restore(void)
{
	for (size_t i = 0; i < nsticky; i++)
		if (!has_var(environ, sticky[i]) ||
		    (!strncmp(sticky[i], "LD_PRELOAD=", 11) && !lists_self(shim_getenv("LD_PRELOAD") ?: "")))
			shim_putenv(sticky[i]);
}

/* The FTSBX_TXN entry the shell hooks put into environ (a thread's
 * txn_var may not outlive its thread). */
static char environ_txn_var[32];

/* Start sh -c CMD through REAL_CALL (system or popen) as a transaction of
 * its own when the root starts it; DONE runs after, with the result r_ and
 * the tool call's key. */
#define SHELL_HOOK(real_call, refused, cmd, done) do {                    \
	struct hook_ctx c;                                                \
	char *const argv[] = { "sh", "-c", (char *)(cmd), NULL };        \
	if (!hook_enter(&c) || !(cmd))                                    \
		return real_call;                                         \
	int err_ = guard_exec("/bin/sh", false, argv) ?: pend_take_all(true);     \
	if (err_) {                                                       \
		hook_refuse(&c, err_);                                    \
		return refused;                                           \
	}                                                                 \
	environ_restore();                                                \
	uint32_t key, t = txn_for_spawn(argv, environ, &key);             \
	snprintf(environ_txn_var, sizeof(environ_txn_var), "FTSBX_TXN=%u", t); \
	shim_putenv(environ_txn_var);                                     \
	record_exec_txn("/bin/sh", argv, 0, t);                           \
	hook_leave(&c);                                                   \
	__typeof__(real_call) r_ = real_call;                             \
	snprintf(environ_txn_var, sizeof(environ_txn_var), "FTSBX_TXN=%u", txn_exec_txn()); \
	done;                                                             \
	return r_;                                                        \
} while (0)

EXPORT int system(const char *cmd)
{
	SHELL_HOOK(REAL(system)(cmd), 127 << 8, cmd, txn_system_done(key, r_));
}

/* The tool calls popen started, by their stream, until pclose reaps them
 * (inside libc, where no wait hook sees it): a root that runs its tool
 * calls through popen (a C agent, ctypes) gets each ended, and rewound on
 * failure, as system's are. A stream that finds no free entry (64 open
 * at once) is not followed: its tool call stays without an end, as a
 * killed root's. */
static struct { FILE *f; uint32_t key; } popened[64];
static unsigned popened_n HOT_DATA;     /* how many are kept: most processes keep none */

static void popen_keep(FILE *f, uint32_t key)
{
	if (!f || !key)
		return;
	for (size_t i = 0; i < sizeof(popened) / sizeof(popened[0]); i++) {
		FILE *none = NULL;
		if (__atomic_compare_exchange_n(&popened[i].f, &none, (FILE *)1, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED)) {
			popened[i].key = key;
			__atomic_store_n(&popened[i].f, f, __ATOMIC_RELEASE);
			__atomic_add_fetch(&popened_n, 1, __ATOMIC_RELEASE);
			return;
		}
	}
}

/* The key of the tool call F's popen started (0: none), forgotten: at
 * pclose, and at an fclose of the stream (glibc's reaps the child too, its
 * status lost), so that no later stream at the same address finds it. */
HIDDEN uint32_t popen_forget(FILE *f)
{
	if (!__atomic_load_n(&popened_n, __ATOMIC_ACQUIRE))
		return 0;
	for (size_t i = 0; f && i < sizeof(popened) / sizeof(popened[0]); i++)
		if (__atomic_load_n(&popened[i].f, __ATOMIC_ACQUIRE) == f) {
			uint32_t key = popened[i].key;
			FILE *mine = f;
			if (__atomic_compare_exchange_n(&popened[i].f, &mine, NULL, false, __ATOMIC_ACQ_REL,
							__ATOMIC_RELAXED)) {
				__atomic_sub_fetch(&popened_n, 1, __ATOMIC_RELEASE);
				return key;
			}
		}
	return 0;
}

EXPORT FILE *popen(const char *cmd, const char *mode)
{
	SHELL_HOOK(REAL(popen)(cmd, mode), NULL, cmd, popen_keep(r_, key));
}

/* glibc's other exported name for popen */
EXPORT FILE *_IO_popen(const char *cmd, const char *mode) { return popen(cmd, mode); }
