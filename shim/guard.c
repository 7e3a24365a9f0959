/*
 * guard.c - the policy in the shim (policy/policy.h): loaded once per
 * session and shared, asked by the hooks, and the refusals reported.
 *
 * The session's root (each new root, when several runs share a journal)
 * loads FTSBX_POLICY (or the built-in default) and writes the compiled block
 * into the session directory (SESSION/policy-ROOTPID, never rewritten);
 * every process below it maps that block (an open and an mmap) instead of
 * parsing the INI again. The mapping is made at start, with the process's
 * environment, credentials and descriptors as they were when it began; the
 * block's core is checked (policy_from_blob: its hash and every offset) at
 * the first question to the policy, or the first record, which needs the
 * durability: a process that asks nothing (true, echo, expr) never pays
 * the check and the reading of the block's pages. Its exec rules are
 * checked at the first exec, its rules' texts at the first refusal
 * (policy/internal.h): a part found damaged then stops the process as the
 * core does (refuse: policy_damaged). A malformed
 * policy stops the first process at start with "FILE:LINE: what is wrong",
 * a damaged block a later process at its first question, before the call
 * it is about: fail closed, never run unprotected.
 * In audit mode a refusal is recorded and reported and the call goes on; in
 * off mode nothing is asked.
 */
#include <dirent.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sched.h>
#include <sys/ptrace.h>
#include <sys/auxv.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "shim.h"
#include "../policy/policy.h"

/* The policy as mapped in every process but the root, with the data the
 * loader writes anyway (shim.h: HOT_DATA): no page of its own. */
static struct policy mapped HOT_DATA;
static struct policy *pol = &mapped;
static enum pmode mode = PM_OFF;
/* The block mapped at start, checked at the first question (check_now). */
static const void *blob HOT_DATA;
static size_t blob_size HOT_DATA;
/* POL_READY once pol and mode may be used; else 0, or the pid of the
 * process one of whose threads is filling them in now. */
#define POL_READY (-1)
static int pol_state HOT_DATA;
static void check_now(void);

/* Every entry point that asks the policy starts here. */
static inline void ready(void)
{
	if (__builtin_expect(__atomic_load_n(&pol_state, __ATOMIC_ACQUIRE) != POL_READY, 0))
		check_now();
}

static void fail_closed(const char *what)
{
	char line[1024];

	snprintf(line, sizeof(line), "ftsbx: %s; nothing runs unprotected\n", what);
	if (write(2, line, strlen(line)) < 0)
		_exit(126);
	_exit(126);
}

/* The first process: load, and leave the compiled block for the others. */
static void load_and_publish(void)
{
	char err[1024], tmp[64];
	const char *file = shim_getenv("FTSBX_POLICY");
	const void *blob;
	size_t n;
	int fd;

	if (policy_load(&pol, file && *file ? file : NULL, err, sizeof(err)))
		fail_closed(err);
	policy_blob(pol, &blob, &n);
	/* in the session's shared file: no file of its own to create */
	if (jshared_policy_put(&shim.s, (uint32_t)getpid(), blob, n) == 0) {
		snprintf(tmp, sizeof(tmp), "%d+", (int)getpid());
		shim_setenv("FTSBX_ROOT", tmp);
		return;
	}
	snprintf(tmp, sizeof(tmp), "policy-%d.new", (int)getpid());
	fd = openat(shim.s.dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0400);
	if (fd < 0 || write(fd, blob, n) != (ssize_t)n || close(fd) < 0)
		fail_closed("cannot write the compiled policy into the session");
	char name[64];
	snprintf(name, sizeof(name), "policy-%d", (int)getpid());
	if (renameat(shim.s.dirfd, tmp, shim.s.dirfd, name) < 0)
		fail_closed("cannot write the compiled policy into the session");
}

/*
 * The four system calls that map the policy, in every process the session
 * starts. Straight to the kernel on x86-64: through libc, the first call of
 * each wrapper in a process costs a lazy binding and often a page of libc's
 * code (measured: about 5 us of a 50 us constructor), and open and close
 * would go through the shim's own hooks, whose first calls look up the real
 * functions with dlsym. Elsewhere, glibc's own names of open and close,
 * which no hook takes.
 */
#if defined(SHIM_RAW)
static int sys_open(const char *p, int flags)
{
	long r = shim_raw6(SYS_openat, AT_FDCWD, (long)p, flags, 0, 0, 0);

	return r < 0 ? (errno = (int)-r, -1) : (int)r;
}

static int sys_fstat(int fd, struct stat *st)
{
	long r = shim_raw6(SYS_fstat, fd, (long)st, 0, 0, 0, 0);

	return r < 0 ? (errno = (int)-r, -1) : 0;
}

static void *sys_mmap(size_t n, int prot, int flags, int fd)
{
	long r = shim_raw6(SYS_mmap, 0, (long)n, prot, flags, fd, 0);

	return r < 0 && r > -4096 ? (errno = (int)-r, MAP_FAILED) : (void *)r;
}

static void sys_close(int fd)
{
	shim_raw6(SYS_close, fd, 0, 0, 0, 0, 0);
}
#else
extern int __open64(const char *path, int flags, ...);
extern int __close(int fd);
#define sys_open(p, flags) __open64(p, flags)
#define sys_fstat(fd, st) fstat(fd, st)
#define sys_mmap(n, prot, flags, fd) mmap(NULL, n, prot, flags, fd, 0)
#define sys_close(fd) __close(fd)
#endif

/* POL is there: what the process takes from it once. */
static void took(void)
{
	policy_set_journal(pol, shim.journal);
	mode = policy_mode(pol);
	if (policy_durability(pol) == PD_POWER)
		shim.s.flags |= JS_DURABLE;
}

/* FD (closed here) mapped read-only: its first LEN bytes, or all of it
 * when LEN is 0; NULL when it is shorter or cannot be mapped. */
STARTUP_TEXT static char *map_ro(int fd, size_t len, size_t *size)
{
	struct stat st;
	void *p = MAP_FAILED;

	if (sys_fstat(fd, &st) == 0 && st.st_size >= (off_t)len) {
		len = len ? len : (size_t)st.st_size;
		p = sys_mmap(len, PROT_READ, MAP_SHARED, fd);
	}
	sys_close(fd);
	*size = len;
	return p == MAP_FAILED ? NULL : p;
}

/* A later process of root PID that left its block in SESSION/shared
 * (PATH): the first page (the slot's owner and length) and the block after
 * what the session maps, in one mapping. The slot is read at the first
 * question, with the block (take_slot): a process that asks nothing (true,
 * echo) reads neither, and its first read of a shared file's page is a
 * page fault. */
static const char *slot_map HOT_DATA;
static uint64_t slot_pid HOT_DATA;

STARTUP_TEXT static void map_slot(const char *path, uint64_t pid)
{
	size_t n;
	int fd = sys_open(path, O_RDONLY | O_CLOEXEC);
	char *p = fd < 0 ? NULL : map_ro(fd, jshared_size() + JL_POLICY_MAX, &n);

	if (!p)
		fail_closed("the session's compiled policy is missing");
	slot_pid = pid;
	slot_map = p;
}

/* The slot map_slot mapped: the root's, and the length of its block. Every
 * thread that asks first computes the same two values. */
static void take_slot(void)
{
	const struct jpolicy_slot *slot = (const struct jpolicy_slot *)(const void *)(slot_map + JL_POLICY_SLOT);
	uint64_t len = __atomic_load_n(&slot->len, __ATOMIC_ACQUIRE);

	if (__atomic_load_n(&slot->owner, __ATOMIC_ACQUIRE) != (JL_POLICY_CLAIMED | slot_pid) || !len ||
	    len > JL_POLICY_MAX)
		fail_closed(policy_damaged);
	__atomic_store_n(&blob_size, (size_t)len, __ATOMIC_RELAXED);
	__atomic_store_n(&blob, (const void *)(slot_map + jshared_size()), __ATOMIC_RELEASE);
}

/* A later process: map the block the first one left. */
STARTUP_TEXT static void map_published(void)
{
	char err[1024];
	const char *root = shim_getenv(STARTUP_STR("FTSBX_ROOT"));
	static const char name[] STARTUP_RODATA = "/policy-", shared[] STARTUP_RODATA = "/shared";
	char path[PATH_MAX + 32];
	size_t n = shim.journal_len, k = 0;
	uint64_t pid = 0;
	int fd;

	/* JOURNAL/policy-ROOT, or JOURNAL/shared for a root whose FTSBX_ROOT
	 * ends in '+', without snprintf (state.c: the constructor's path) */
	if (!root)
		root = "0";
	for (; root[k] >= '0' && root[k] <= '9'; k++)
		pid = pid * 10 + (uint64_t)(root[k] - '0');
	memcpy(path, shim.journal, n);
	if (root[k] == '+' && !root[k + 1] && k) {
		memcpy(path + n, shared, sizeof(shared));
		map_slot(path, pid);
		return;
	}
	memcpy(path + n, name, sizeof(name) - 1);
	n += sizeof(name) - 1;
	for (size_t i = 0; root[i] && n < sizeof(path) - 1; i++)
		path[n++] = root[i];
	path[n] = 0;
	fd = sys_open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {           /* a session of an older shim: load it here */
		const char *file = shim_getenv("FTSBX_POLICY");
		if (policy_load(&pol, file && *file ? file : NULL, err, sizeof(err)))
			fail_closed(err);
		took();
		__atomic_store_n(&pol_state, POL_READY, __ATOMIC_RELEASE);
		return;
	}
	if (!(blob = map_ro(fd, 0, &blob_size)))
		fail_closed(policy_damaged);
}

/*
 * Check the block mapped at start and take what the process needs from it,
 * once. It is the same for every thread: the first to ask fills in the
 * policy, the others wait for it (a few hundred instructions); a signal
 * handler that asks while its own thread was filling it in fills it in
 * itself (the same bytes), and so does a fork child whose parent was filling
 * it in on a thread that did not come along; a vfork child waits, since its
 * parent's other threads share its memory.
 */
static __thread bool filling __attribute__((tls_model("initial-exec")));

static void check_now(void)
{
	struct policy local;
	int me, s;

	if (!__atomic_load_n(&blob, __ATOMIC_ACQUIRE) && slot_map)
		take_slot();
	if (policy_from_blob(&local, blob, blob_size))
		fail_closed(policy_damaged);
	/* complete before it is copied: two fills at once (a handler's
	 * beside another thread's, a vfork child's beside its parent's
	 * threads) write the same bytes */
	policy_set_journal(&local, shim.journal);
	for (;;) {
		s = __atomic_load_n(&pol_state, __ATOMIC_ACQUIRE);
		if (s == POL_READY)
			return;
		me = (int)getpid();     /* again: a handler may have forked */
		if (s && !filling && (s == me || txn_vfork_child())) {
			sched_yield();  /* another thread of this process is at it */
			continue;
		}
		/* marked before the claim: a handler that runs between the
		 * two would otherwise wait for its own thread forever */
		if (!filling) {
			filling = true;
			if (!__atomic_compare_exchange_n(&pol_state, &s, me, false, __ATOMIC_ACQ_REL,
							 __ATOMIC_ACQUIRE)) {
				filling = false;
				continue;
			}
		}
		mapped = local;
		took();
		__atomic_store_n(&pol_state, POL_READY, __ATOMIC_RELEASE);
		filling = false;
		return;
	}
}

/* state.c: the records' durability, before the first. */
HIDDEN void guard_ready(void)
{
	ready();
}

/* The root of `ftsbx run`, which compiled the policy in the root's
 * environment while the root's program loaded and left it in the session's
 * slot for the root's pid (tools/run.c): mapped and checked here, as every
 * later process maps it. False when the slot is not the root's after all. */
static bool take_given(void)
{
	const struct jpolicy_slot *slot;
	uint64_t pid = (uint64_t)getpid();
	char path[PATH_MAX + 8], tmp[32];

	if (!shim.policy_given || !shim.s.ctr)
		return false;
	slot = (const struct jpolicy_slot *)(const void *)((const char *)shim.s.ctr + JL_POLICY_SLOT);
	if (__atomic_load_n(&slot->owner, __ATOMIC_ACQUIRE) != (JL_POLICY_CLAIMED | pid) ||
	    !__atomic_load_n(&slot->len, __ATOMIC_ACQUIRE))
		return false;
	snprintf(path, sizeof(path), "%s/shared", shim.journal);
	map_slot(path, pid);
	check_now();            /* the block checked, and taken up */
	snprintf(tmp, sizeof(tmp), "%d+", (int)pid);
	shim_setenv("FTSBX_ROOT", tmp);
	return true;
}

/* The session's first process was started by a program outside the shim,
 * so no exec hook judged it: `LD_PRELOAD=libftsbx.so bash -c 'curl ... | sh'`
 * and `ftsbx run -- reboot` are judged here, as the same command line would
 * be as a tool call, and a refused one stops before its main() with the
 * shell's status for a program that cannot run. The program is the file
 * the exec named (AT_EXECFN): for a script, the kernel ran its interpreter
 * with ARGV [INTERPRETER, [ARG,] SCRIPT, ARGS...], judged as SCRIPT ARGS...;
 * for the dynamic loader run as a program, argv[0] through PATH. */
static void judge_self(void)
{
	const char *fn = (const char *)getauxval(AT_EXECFN), *base;
	char *const *argv = shim.argv;
	int err;

	if (mode == PM_OFF || !argv || !argv[0] || !fn)
		return;
	for (int i = 1; i <= 2 && argv[i - 1]; i++)
		if (argv[i] && !strcmp(argv[i], fn) && strcmp(argv[0], fn)) {
			argv += i;
			break;
		}
	base = strrchr(fn, '/');
	base = base ? base + 1 : fn;
	if (!strncmp(base, "ld-linux", 8) || !strncmp(base, "ld.so", 5))
		err = guard_exec(argv[0], !strchr(argv[0], '/'), argv);
	else
		err = guard_exec(fn, false, argv);
	if (err && mode == PM_ENFORCE)
		_exit(126);
}

STARTUP_TEXT HIDDEN void guard_init(bool first)
{
	if (!first) {
		map_published();        /* checked at the first question */
		return;
	}
	shim_session();         /* the root's (made by ftsbx run meanwhile, or here) */
	if (!take_given()) {
		load_and_publish();
		took();
		__atomic_store_n(&pol_state, POL_READY, __ATOMIC_RELEASE);
	}
	/* The root confines the whole session in the kernel too: static
	 * binaries and raw system calls cannot write outside the writable
	 * roots either. Every process below inherits the domain. */
	if (mode == PM_ENFORCE && policy_landlock(pol) != PL_OFF && !landlock_roots(pol, shim.journal) &&
	    policy_landlock(pol) == PL_REQUIRE)
		fail_closed("[policy] landlock = on, but the kernel has no Landlock");
	judge_self();
}

HIDDEN bool guard_active(void)
{
	ready();
	return mode == PM_ENFORCE;
}

/* The workspace (where the session started, unless FTSBX_WORKSPACE says
 * otherwise) is the directory P, or under it. */
HIDDEN bool guard_workspace_under(const char *p)
{
	ready();
	const char *w = policy_workspace(pol);

	return !w || path_under(w, p, strlen(p));
}

HIDDEN bool guard_audit(void)
{
	ready();
	return mode == PM_AUDIT;
}

/* Report and record a refusal by RULE; 0 in audit mode (the call goes on),
 * else ERR. */
static int refuse(const char *op, const char *p, const char *p2, char *const *argv, const char *why, int err)
{
	if (why == policy_damaged)      /* a part of the block checked at its first use */
		fail_closed(policy_damaged);
	shim_refuse(op, p, p2, argv, why, err);
	return mode == PM_AUDIT ? 0 : err;
}

/* A read of P, whose full path is longer than PATH_MAX (a cwd that deep):
 * no rule can judge it, so it is refused (fail closed), as the kernel
 * refuses such a path spelled in full. */
HIDDEN int guard_unnamed(const char *op, const char *p)
{
	ready();
	return mode == PM_OFF ? 0 : refuse(op, p, NULL, NULL, "its full path is longer than PATH_MAX: no rule can judge it",
					   ENAMETOOLONG);
}

static bool in_session(pid_t pid);
static long proc_number(const char *p, const char **end);

/* P is /proc/PID/environ or /proc/PID/mem (or a task's), or a descriptor
 * or mapping of its that no path names (/proc/PID/fd/N or map_files/... of
 * a memfd, a pipe, a deleted file: a named one is judged by its path), of
 * a process outside the session: with [policy] signals = session, out of
 * reach as its signals are. Its environment holds what the agent's own
 * does not (the tokens of a harness, another user's session as root), and
 * so may its memory. The session's own processes stay readable (ps e,
 * psutil). */
static bool foreign_process_secret(const char *p)
{
	const char *rest, *t;
	long pid;

	if (strncmp(p, "/proc/", 6) || (pid = proc_number(p + 6, &rest)) < 0)
		return false;
	if (!strncmp(rest, "/task/", 6)) {
		if (proc_number(rest + 6, &t) < 0)
			return false;
		rest = t;
	}
	if (strcmp(rest, "/environ") && strcmp(rest, "/mem") && strncmp(rest, "/fd/", 4) &&
	    strncmp(rest, "/map_files/", 11))
		return false;
	return pid != (long)getpid() && policy_signals_session(pol) && !in_session((pid_t)pid);
}

HIDDEN int guard_read(const char *p)
{
	const char *why = NULL;

	ready();
	if (mode == PM_OFF)
		return 0;
	if (p[1] == 'p' && foreign_process_secret(p)) {
		/* recorded once per process: ps reads them all */
		static bool recorded;
		if (!__atomic_exchange_n(&recorded, true, __ATOMIC_RELAXED))
			shim_refuse_quietly("read", p, "[policy] signals = session: the environment or memory of a "
					    "process outside the session", EACCES);
		return mode == PM_AUDIT ? 0 : EACCES;
	}
	if (policy_path(pol, p, false, &why) != PV_DENY)
		return 0;
	return refuse("read", p, NULL, NULL, why, EACCES);
}

/* The number at P (digits up to a '/' or the end), or -1; *END after it. */
static long proc_number(const char *p, const char **end)
{
	long n = 0;

	if (*p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9' && n < 1L << 40; p++)
		n = n * 10 + (*p - '0');
	*end = p;
	return *p == '/' || !*p ? n : -1;
}

/* /proc/self and /proc/thread-self are symlinks, so a path through them
 * reaches the policy resolved, as /proc/PID/... or /proc/PID/task/TID/...:
 * this process's own is named as the rules name it again (default.ini
 * leaves them untracked: the JVM writes /proc/self/coredump_filter at its
 * start, browsers their oom_score_adj). Another process's stays as it is. */
static const char *own_proc(const char *p, char buf[PATH_MAX])
{
	const char *rest, *t;
	long pid, tid;

	if (strncmp(p, "/proc/", 6) || (pid = proc_number(p + 6, &rest)) != (long)getpid())
		return p;
	if (!strncmp(rest, "/task/", 6) && (tid = proc_number(rest + 6, &t)) == (long)gettid()) {
		snprintf(buf, PATH_MAX, "/proc/thread-self%s", t);
		return buf;
	}
	snprintf(buf, PATH_MAX, "/proc/self%s", rest);
	return buf;
}

/* 0: journal it; 1: allowed, not journaled (untracked); else the errno.
 * CREATE: P is to be made (mkdir, mknod, symlink, a link's new name, bind;
 * CREATE_DIR: mkdir); where the rules refuse it but it is there already, the call
 * changes nothing and fails with the kernel's EEXIST, so it is let through
 * (1), not refused: mkdir -p tries every ancestor, /dev on its way to
 * /dev/shm/x. A directory on the way to a root (~/.local for ~/.local/lib
 * in a new HOME) is made, not journaled: it is empty, and a rewind would
 * find it holding what the untracked roots under it keep. */
enum { CREATE = 1, CREATE_DIR };

static int judge_write(const char *op, const char *p, mode_t type, int create)
{
	const char *why = NULL;
	char own[PATH_MAX];
	struct stat st;
	enum pverdict v;

	ready();
	if (mode == PM_OFF)
		return 0;
	v = policy_path_typed(pol, own_proc(p, own), true, type, &why);
	if (why == policy_damaged)      /* (a refusal the code below may not report) */
		fail_closed(policy_damaged);
	/* a root's own entry is in a directory outside the roots: the root
	 * may be made (above), not removed or renamed away */
	if (v != PV_DENY && !create && (!strcmp(op, "remove") || !strcmp(op, "rename")) &&
	    policy_root_entry_outside(pol, p)) {
		v = PV_DENY;
		why = "a writable root itself: its entry is outside the writable roots";
	}
	if (v == PV_UNTRACKED)
		return 1;
	if (v == PV_DENY && create && (lstat(p, &st) == 0 || (create == CREATE_DIR && policy_root_ancestor(pol, p))))
		return 1;
	if (v == PV_DENY)
		return refuse(op, p, NULL, NULL, why, EACCES);
	return 0;
}

HIDDEN int guard_write(const char *op, const char *p, mode_t type)
{
	return judge_write(op, p, type, 0);
}

/* Is P in the workspace? */
HIDDEN bool guard_in_workspace(const char *p)
{
	const char *ws;

	ready();
	ws = policy_workspace(pol);
	return ws && ws[0] == '/' && ws[1] && path_under(p, ws, strlen(ws));
}

/* Is a change in directory DIR journaled (no refusal said or recorded)? */
HIDDEN bool guard_journaled(const char *dir)
{
	const char *why;

	ready();
	return mode == PM_OFF || policy_path_typed(pol, dir, true, S_IFDIR, &why) == PV_ALLOW;
}

HIDDEN int guard_create(const char *p, bool dir)
{
	return judge_write("create", p, 0, dir ? CREATE_DIR : CREATE);
}

HIDDEN int guard_device_node(const char *p)
{
	ready();
	return mode == PM_OFF ? 0 : refuse("mknod", p, NULL, NULL, "making a device node", EPERM);
}

/* A shell started with -c whose string the policy refuses for one of its
 * simple commands (not for fetch-and-run or a fork bomb, which no single
 * exec shows): the
 * shell may start, since it will exec that command through the shim, which
 * refuses it there. The agent then sees the shell's own "Operation not
 * permitted" and exit status, as from any failed command, instead of a shell
 * that could not start at all. Only a shell by name, and one the shim runs
 * inside: busybox sh runs its applets (reboot, dd, mkfs) in-process, and a
 * static shell's execs pass no hook. Any other program with a -c option
 * (git -c, psql -c, terraform -chdir) is judged whole, here. */
static bool refused_only_inside(const char *file, char *const argv[], const char *why)
{
	static const char *const shells[] = { "sh", "bash", "dash", "zsh", "ksh", "mksh", "rbash", "ksh93" };
	const char *prog = file ? file : argv[0], *base, *w;
	char *cut[64];
	bool shell = false;
	int n = 0;

	if ((why && (strstr(why, "fetch-and-run") || strstr(why, "fork bomb"))) || !prog)
		return false;
	base = strrchr(prog, '/');
	base = base ? base + 1 : prog;
	for (size_t i = 0; i < sizeof(shells) / sizeof(shells[0]); i++)
		shell |= !strcmp(base, shells[i]);
	if (!shell)
		return false;
	for (; argv[n] && n < 63; n++) {
		if (!strcmp(argv[n], "-c") || (argv[n][0] == '-' && argv[n][1] != '-' && strchr(argv[n], 'c')))
			break;
		cut[n] = argv[n];
	}
	if (!argv[n] || n == 63 || n == 0 || opaque_program(prog))
		return false;
	cut[n] = NULL;
	return policy_exec(pol, file, cut, shim_getenv("PATH"), &w) != PV_DENY;
}

/* Refuse the exec of FILE (ARGV) that runs WHAT, which the fetcher BY
 * wrote (fetched.c). Not inlined: its buffer would deepen guard_exec's
 * frame, each new page of which an exec in a fork child faults in. */
static __attribute__((noinline)) int refuse_fetched(const char *file, char *const argv[], const char *what, const char *by)
{
	char why[PATH_MAX + 96];

	snprintf(why, sizeof(why), "fetch-and-run: %s was fetched from the network (by %s)", what, by);
	return refuse("exec", file ? file : argv[0], NULL, argv, why, EPERM);
}

/* The session's tables of pipes, on its counters' page (format.h): TAB 0
 * the pipes fetchers write (JL_FETCH_PIPES_AT), 1 those interpreters read
 * their program from (JL_RUN_PIPES_AT). Each a ring of the last
 * JL_PIPE_SLOTS pipes put in, looked up whole. Sequentially consistent:
 * a fetcher puts its pipe in, then looks for it among the interpreters',
 * and an interpreter the other way round, so that of two that start at
 * once one sees the other. */
static uint64_t *pipe_table(int tab)
{
	return (uint64_t *)(void *)((char *)shim.s.ctr + (tab ? JL_RUN_PIPES_AT : JL_FETCH_PIPES_AT));
}

static bool pipe_has(int tab, uint64_t ino)
{
	uint64_t *t = pipe_table(tab);

	for (int i = 0; i < JL_PIPE_SLOTS; i++)
		if (__atomic_load_n(&t[i], __ATOMIC_SEQ_CST) == ino)
			return true;
	return false;
}

static void pipe_put(int tab, uint64_t ino)
{
	uint32_t *next = (uint32_t *)(void *)((char *)shim.s.ctr + JL_PIPES_NEXT) + tab;

	if (!pipe_has(tab, ino))
		__atomic_store_n(&pipe_table(tab)[__atomic_fetch_add(next, 1, __ATOMIC_SEQ_CST) % JL_PIPE_SLOTS], ino,
				 __ATOMIC_SEQ_CST);
}

/* A carrier (cat, gunzip ...) about to run with a download as the
 * standard input it reads, or a pipe fetched code flows in already (cat
 * dl.sh | cat | bash, when the first cat opened its file first), writing
 * to a pipe: what it writes there is fetched code. */
static bool carries_stdin(const char *file, char *const argv[])
{
	const char *prog = file ? file : argv && argv[0] ? argv[0] : NULL, *base;
	struct stat in, out;
	char by[32];

	if (!prog || !policy_fetch_run(pol))
		return false;
	base = strrchr(prog, '/');
	base = base ? base + 1 : prog;
	if (!policy_carrier(pol, base) || fstat(1, &out) < 0 || !S_ISFIFO(out.st_mode) || !fetched_reads_stdin(prog, argv) ||
	    fstat(0, &in) < 0)
		return false;
	return (S_ISREG(in.st_mode) && fetched_marked(NULL, 0, by)) ||
	       (S_ISFIFO(in.st_mode) && guard_fetch_pipe((uint64_t)in.st_ino));
}

/* A pipeline seen one process at a time (`$(command -v curl) URL | sh`,
 * `c=curl; $c URL | bash`, a pipeline of the session's root): a fetcher
 * whose standard output is a pipe leaves the pipe's inode in the session's
 * table of fetched pipes, an interpreter reading its program from a pipe in
 * the table of run pipes; each then looks for the pipe in the other table.
 * The two execs race, and whichever comes second finds the first: the
 * fetcher or the interpreter is refused, and nothing fetched runs. A
 * regular file there is a download (marked: fetched.c) or may be one. */
static int guard_stream(const char *file, char *const argv[])
{
	struct stat st;
	char by[32];
	int fd, role = policy_stream_role(pol, file, argv, &fd);

	if (role == PS_NONE && carries_stdin(file, argv)) {
		role = PS_FETCHER;      /* cat < dl.sh | bash: as curl URL | bash */
		fd = 1;
	}
	if (role == PS_NONE || fstat(fd, &st) < 0)
		return 0;
	if (S_ISREG(st.st_mode)) {      /* sh < i.sh (curl URL > i.sh: fetched.c) */
		if (role == PS_RUNS && fetched_marked(NULL, fd, by))
			return refuse_fetched(file, argv, "its program", by);
		return 0;
	}
	if (!S_ISFIFO(st.st_mode) || (!shim.session_open && shim_segment(&(struct jseg *){ NULL })))
		return 0;
	pipe_put(role == PS_FETCHER ? 0 : 1, (uint64_t)st.st_ino);
	if (!pipe_has(role == PS_FETCHER ? 1 : 0, (uint64_t)st.st_ino))
		return 0;
	return refuse("exec", file ? file : argv[0], NULL, argv,
		      role == PS_FETCHER ? "fetch-and-run: an interpreter runs what this fetcher writes to it"
					 : "fetch-and-run: code fetched from the network is run by an interpreter", EPERM);
}

/* A download a fetcher marked (fetched.c), run as the program itself or as
 * an interpreter's script: refused however many tool calls ago it came. */
static int guard_fetched(const char *file, char *const argv[])
{
	const char *prog = file ? file : argv[0], *script;
	char by[32];

	if (prog && strchr(prog, '/') && policy_fetch_run(pol) && fetched_marked(prog, -1, by))
		return refuse_fetched(file, argv, prog, by);
	if ((script = policy_script_of(pol, file, argv)) && fetched_marked(script, -1, by))
		return refuse_fetched(file, argv, script, by);
	return 0;
}

HIDDEN int guard_mark(const char *p)
{
	ready();
	if (mode == PM_OFF || !policy_fetch_run(pol))
		return 0;
	return refuse("xattr", p, NULL, NULL, "fetch-and-run: the mark of a download is neither taken off nor changed",
		      EPERM);
}

HIDDEN int guard_inode_flags(int fd, const char *path)
{
	char p[PATH_MAX];

	ready();
	if (mode == PM_OFF)
		return 0;
	if (path)
		snprintf(p, sizeof(p), "%s", path);
	else if (path_fd(p, fd))
		snprintf(p, sizeof(p), "(descriptor %d)", fd);
	return refuse("ioctl", p, NULL, NULL, "[commands] file-attributes: no journal keeps a file's inode flags (an "
		      "immutable or append-only file no rewind could even write back)", EPERM);
}

HIDDEN bool guard_fetcher(const char *name)
{
	ready();
	return mode != PM_OFF && policy_fetcher(pol, name);
}

HIDDEN bool guard_carrier(const char *name)
{
	ready();
	return mode != PM_OFF && policy_carrier(pol, name);
}

/* A carrier that holds a download (fetched.c) and writes to the pipe of
 * inode INO (`cat dl.sh | bash` in a later tool call, `gunzip -c dl.gz |
 * sh`): the pipe goes in the table of fetched pipes, as a fetcher's does,
 * and an interpreter that reads its program from it (guard_stream) is
 * refused; or this is, if the interpreter came first. PATH: the download. */
HIDDEN int guard_carried_pipe(uint64_t ino, const char *path, const char *by)
{
	char why[PATH_MAX + 96];
	bool busy = shim_busy;  /* (called outside the hooks: the session's files and a refusal's record are ours) */
	int err = 0;

	ready();
	if (mode == PM_OFF || !policy_fetch_run(pol) || !ino)
		return 0;
	shim_busy = true;
	if (shim_session()) {
		pipe_put(0, ino);
		if (pipe_has(1, ino)) {
			snprintf(why, sizeof(why), "fetch-and-run: an interpreter runs what this passes on of %s "
				 "(fetched by %s)", path, by);
			err = refuse("read", path, NULL, NULL, why, EPERM);
		}
	}
	shim_busy = busy;
	return err;
}

/* Whether the pipe of inode INO is in the session's table of pipes that
 * fetchers write (guard_stream): `curl URL | tar xz`. */
HIDDEN bool guard_fetch_pipe(uint64_t ino)
{
	bool busy = shim_busy, open;

	if (!ino)
		return false;
	shim_busy = true;       /* (as above) */
	open = shim_session();
	shim_busy = busy;
	return open && pipe_has(0, ino);
}

static int guard_exec_at(const char *file, char *const argv[]);

/* FILE named without a directory: execvp("git", {"ls", ...}) runs git,
 * the program as PATH finds it, whatever argv[0] says (one not found fails
 * to exec); execve("reboot", ...) runs ./reboot. Apart from guard_exec,
 * so that its buffer is on the stack only then (a shell's fork child
 * execs by a path). */
static __attribute__((noinline)) int guard_exec_named(const char *file, bool search, char *const argv[])
{
	char found[PATH_MAX];

	if (search)
		file = shim_find_program(file, found) ? found : NULL;
	else if (strlen(file) + 3 <= sizeof(found))
		file = strcat(strcpy(found, "./"), file);
	return guard_exec_at(file, argv);
}

HIDDEN int guard_exec(const char *file, bool search, char *const argv[])
{
	ready();
	exec_no_preload = false;
	if (mode == PM_OFF || !argv) {
		if (argv)
			opaque_unloadable(file, argv);
		return 0;
	}
	return file && !strchr(file, '/') ? guard_exec_named(file, search, argv) : guard_exec_at(file, argv);
}

static int guard_exec_at(const char *file, char *const argv[])
{
	const char *why = NULL;
	struct stat st;

	if (policy_exec_stat(pol, file, argv, shim_getenv("PATH"), &why, &st) != PV_DENY ||
	    refused_only_inside(file, argv, why)) {
		int err = guard_stream(file, argv);
		if (err || (err = guard_fetched(file, argv)))
			return err;
		if (mode == PM_ENFORCE)
			return opaque_exec_known(pol, file, argv, &st);
		opaque_unloadable(file, argv);
		return 0;
	}
	return refuse("exec", file ? file : argv[0], NULL, argv, why, EPERM);
}

/* Was PID started under this session? Its initial environment (which the
 * shim keeps sticky) names our root: true even for an orphan that init or a
 * subreaper adopted. */
static bool started_here(pid_t pid, const char *root)
{
	char path[64], want[48], buf[65536];
	ssize_t n;
	size_t wl;
	int fd;

	if (!root)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	wl = (size_t)snprintf(want, sizeof(want), "FTSBX_ROOT=%s", root) + 1;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	for (ssize_t i = 0; n > 0 && i + (ssize_t)wl <= n; i++)
		if ((i == 0 || buf[i - 1] == 0) && !memcmp(buf + i, want, wl))
			return true;
	return false;
}

/* /proc/PID/stat after its comm (which may hold spaces and parentheses):
 * from field 3 on, into BUF; NULL if PID is gone. */
static const char *stat_fields(pid_t pid, char *buf, size_t size)
{
	char path[64];
	const char *e;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return NULL;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n <= 0)
		return NULL;
	buf[n] = 0;
	return (e = strrchr(buf, ')')) && e[1] == ' ' ? e + 2 : NULL;
}

/* The addresses of PID's argument and environment blocks (fields 48 and 50
 * of /proc/PID/stat): a fork child that has not exec'd yet shares them with
 * the process it was forked from, and ASLR gives any other exec others. */
static bool blocks(pid_t pid, unsigned long out[2])
{
	char buf[1024];
	const char *e = stat_fields(pid, buf, sizeof(buf));

	if (!e)
		return false;
	for (int field = 3; *e && field < 48; e++)      /* the space before field K */
		field += *e == ' ';
	return sscanf(e, "%lu %*u %lu", &out[0], &out[1]) == 2 && out[0] && out[1];
}

/* Is PID a fork of ROOT that has not exec'd (its argument and environment
 * blocks are ROOT's)? */
HIDDEN bool guard_fork_of(pid_t pid, pid_t root)
{
	unsigned long a[2], b[2];

	return pid > 1 && root > 1 && blocks(pid, a) && blocks(root, b) && a[0] == b[0] && a[1] == b[1];
}

/* Is PID a process of this session (the root, below it, or started by it)? */
static bool in_session(pid_t pid)
{
	const char *r = shim_getenv("FTSBX_ROOT");
	pid_t root = r ? (pid_t)strtol(r, NULL, 10) : 0;

	if (pid > 1 && started_here(pid, r))
		return true;
	/* a fork of the root orphaned before its exec (`(sleep 9 &)`): its
	 * environment is still the root's own, which never named the root */
	unsigned long a[2], b[2];
	if (pid > 1 && root > 1 && blocks(pid, a) && blocks(root, b) && a[0] == b[0] && a[1] == b[1])
		return true;

	for (int depth = 0; depth < 64 && pid > 1; depth++) {
		char buf[1024];
		const char *e;
		int ppid;

		if (pid == root || pid == shim_pid())
			return true;
		if (!(e = stat_fields(pid, buf, sizeof(buf))) || sscanf(e, "%*c %d", &ppid) != 1)
			return false;
		pid = ppid;
	}
	return false;
}

/* A signal SIG to TARGET (-N: group N, -1: every process of the user), or
 * a change as good as one, named WHAT in the refusal. */
static int judge_target(pid_t target, int sig, const char *what)
{
	const char *why = NULL;
	bool in = target == 0 || (target > 0 && in_session(target)) || (target < -1 && in_session(-target));

	if (policy_signal(pol, target, sig, in, &why) != PV_DENY)
		return 0;
	/* a process (or group) already gone is no one's: its pid told
	 * in_session() nothing, and the call fails as it would, ESRCH */
	if (target != -1 && syscall(SYS_kill, target, 0) < 0 && errno == ESRCH)
		return ESRCH;
	return refuse("signal", what, NULL, NULL, why, EPERM);
}

HIDDEN int guard_signal(pid_t target, int sig)
{
	char what[48];

	ready();
	if (mode == PM_OFF || sig == 0)
		return 0;
	snprintf(what, sizeof(what), "kill %d %d", sig, (int)target);
	return judge_target(target, sig, what);
}

/* A process of group PGRP outside the session, or 0. The kernel keeps a
 * session's signals in (Landlock's scope), not its changes of a group's
 * priority: a group the session shares with its harness (started without
 * job control) holds processes that are not the session's. getdents64, not
 * readdir: no heap in a hook. */
static pid_t group_outsider(pid_t pgrp)
{
	char buf[4096], stat[512];
	pid_t found = 0;
	long n;
	int d = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (d < 0)
		return 0;
	while (!found && (n = syscall(SYS_getdents64, d, buf, sizeof(buf))) > 0)
		for (long off = 0; off < n && !found;) {
			const struct dirent64 *e = (const struct dirent64 *)(buf + off);
			const char *end, *f;
			long pid = proc_number(e->d_name, &end), ppid, grp;
			char st;
			off += e->d_reclen;
			if (pid <= 0 || *end || pid == shim_pid() || !(f = stat_fields((pid_t)pid, stat, sizeof(stat))))
				continue;
			/* fields 3 to 5: STATE PPID PGRP */
			if (sscanf(f, "%c %ld %ld", &st, &ppid, &grp) == 3 && grp == pgrp && !in_session((pid_t)pid))
				found = (pid_t)pid;
		}
	close(d);
	return found;
}

/* A change of another process that is as good as a signal (its limits,
 * priority, scheduling, memory): judged as SIGKILL would be, named by OP. */
HIDDEN int guard_process(pid_t target, const char *op)
{
	char what[64];

	ready();
	if (mode == PM_OFF || target == 0 || target == shim_pid())
		return 0;
	snprintf(what, sizeof(what), "%s %d", op, (int)target);
	return judge_target(target, SIGKILL, what);
}

/* The same change of process group WHO (0: the caller's own): of every
 * process in it. The caller's group may be its harness's (started without
 * job control), or one whose leader is not in this pid namespace at all
 * (getpgrp() is 0 there). */
HIDDEN int guard_group(pid_t who, const char *op)
{
	pid_t pgrp = who ? who : getpgrp(), out;
	char what[64];
	int err;

	ready();
	if (mode == PM_OFF)
		return 0;
	if (pgrp > 0 && pgrp != shim_pid()) {
		snprintf(what, sizeof(what), "%s %d", op, (int)-pgrp);
		if ((err = judge_target(-pgrp, SIGKILL, what)))
			return err;
	}
	if (!(out = group_outsider(pgrp)))
		return 0;
	snprintf(what, sizeof(what), "%s %d (its process %d)", op, (int)-pgrp, (int)out);
	return judge_target(out, SIGKILL, what);
}

/* The pid behind a pidfd (or a /proc/PID directory's descriptor, which
 * works as one: killall), or 0: not one, gone (the call fails, ESRCH), or
 * in another pid namespace, which this one cannot judge. */
static pid_t pidfd_pid(int pidfd)
{
	char path[64], buf[1024];
	const char *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;       /* not a descriptor: the call fails itself */
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	p = strstr(buf, "\nPid:");
	if (p) {
		pid_t pid = (pid_t)strtol(p + 5, NULL, 10);
		return pid > 0 ? pid : 0;
	}
	char target[PATH_MAX];
	if (path_fd(target, pidfd) == 0 && !strncmp(target, "/proc/", 6) && target[6] >= '1' && target[6] <= '9')
		return (pid_t)strtol(target + 6, NULL, 10);
	return 0;
}

/* pidfd_send_signal: the target is the pid behind the descriptor. */
HIDDEN int guard_pidfd(int pidfd, int sig)
{
	pid_t pid = pidfd_pid(pidfd);

	return pid ? guard_signal(pid, sig) : 0;
}

/* pidfd_getfd: a copy of another process's descriptor (its files, its
 * sockets) is as good as a signal to it. */
HIDDEN int guard_pidfd_getfd(int pidfd)
{
	pid_t pid = pidfd_pid(pidfd);

	return pid ? guard_process(pid, "pidfd_getfd") : 0;
}

/* ptrace: attaching to a process outside the session would let it run
 * anything, as that process; the other requests need an attach first. */
HIDDEN int guard_ptrace(long req, pid_t pid)
{
	return req == PTRACE_ATTACH || req == PTRACE_SEIZE ? guard_process(pid, "ptrace") : 0;
}

HIDDEN int guard_connect(const struct sockaddr *sa, socklen_t len)
{
	const char *why = NULL;

	ready();
	if (mode == PM_OFF || !sa)
		return 0;
	if (policy_connect(pol, sa, len, &why) != PV_DENY)
		return 0;
	return refuse("connect", "socket", NULL, NULL, why, EPERM);
}

/* Is ARGV the client of an editor's or a terminal's server that runs what
 * it is sent: emacsclient, nvim --server / --remote*, kitty @ and kitten @
 * (remote control), wezterm cli, zellij action|run|pipe? Only such a
 * command line: the same programs connect to other servers too (a
 * terminal to Wayland and the session bus, an editor to its language
 * servers). A program of another name speaking the same protocol is not
 * seen (documented). */
static bool remote_client(char *const *argv)
{
	const char *b = argv && argv[0] ? strrchr(argv[0], '/') : NULL;

	if (!argv || !argv[0])
		return false;
	b = b ? b + 1 : argv[0];
	if (!strcmp(b, "emacsclient"))
		return true;
	for (int i = 1; argv[i] && strcmp(argv[i], "--"); i++)
		if (!strcmp(b, "nvim") && (!strncmp(argv[i], "--server", 8) || !strncmp(argv[i], "--remote", 8)))
			return true;
	/* the others by their first word (kitty @ ..., wezterm cli ...) */
	const char *w = argv[1];
	return w && (((!strcmp(b, "kitty") || !strcmp(b, "kitten")) && !strcmp(w, "@")) ||
		     (!strcmp(b, "wezterm") && !strcmp(w, "cli")) ||
		     (!strcmp(b, "zellij") && (!strcmp(w, "action") || !strcmp(w, "run") || !strcmp(w, "pipe"))));
}

/* FD, just connected to a Unix socket, in a tmux or screen client (or one
 * of remote_client's): the server at the other end runs what the client
 * sends it (run-shell, send-keys, new-window; an editor's shell-command),
 * as the server's own processes. One the session started runs them under
 * the shim; one it did not (the user's own tmux, which an agent often runs
 * inside, the user's Emacs) would run them outside every rule: refused
 * (EACCES). 0, or the errno to fail the connect with. */
HIDDEN int guard_connected(int fd, const char *path)
{
	static int client = -1;         /* this program is such a client */
	struct ucred uc;
	socklen_t n = sizeof(uc);

	if (client < 0)
		client = txn_multiplexer(shim.argv ? shim.argv[0] : NULL) || remote_client(shim.argv);
	if (!client)
		return 0;
	ready();
	if (mode == PM_OFF || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &n) < 0 || uc.pid <= 0)
		return 0;
	if (in_session(uc.pid))
		return 0;
	return refuse("connect", path, NULL, NULL,
		      "[network] a terminal multiplexer's or an editor's server the session did not start: it runs "
		      "what it is sent outside every rule", EACCES);
}

/* Does a tool call that ended with STATUS (REFUSED: the policy refused one
 * of its calls) get rewound? The policy's [rewind] on_failure says which
 * failures count; FTSBX_ON_FAILURE=rewind asks for nonzero and signal when
 * the policy says none, =keep turns it off. */
HIDDEN bool guard_rewind_counts(int status, bool refused, char *const argv[])
{
	const char *env = shim_getenv("FTSBX_ON_FAILURE");
	unsigned on;

	ready();
	on = mode == PM_OFF ? 0 : policy_rewind_on(pol);

	if (env && !strcmp(env, "keep"))
		return false;
	if (!on && env && !strcmp(env, "rewind"))
		on = PR_NONZERO | PR_SIGNAL;
	if (!(refused && (on & PR_REFUSAL)) &&
	    (WIFSIGNALED(status) ? !(on & PR_SIGNAL) : !(WIFEXITED(status) && WEXITSTATUS(status) && (on & PR_NONZERO))))
		return false;
	/* a failure that counts: unless the command is excepted (asked
	 * only now: it resolves the program, a readlink or more) */
	return !argv || mode == PM_OFF || !policy_rewind_exempt(pol, argv);
}
