/*
 * txn.c - transactions for unmodified agent loops (DESIGN.md, "Transactions
 * and the journal").
 *
 * The session's root is its first wrapped process (FTSBX_ROOT holds its
 * pid). Every process tree the root starts (by fork, vfork, posix_spawn or
 * system) is one transaction: a tool call. Its id is taken in the root
 * before the child starts, reaches the child through memory (fork) or
 * FTSBX_TXN (exec, spawn), and stays with every descendant. The root's own
 * changes form transactions of their own, cut at each start of a child:
 * the root's writes between two tool calls are one transaction.
 *
 * When the root reaps a tool call (waitpid and friends), the shim writes
 * J_TXN_END with its wait status; with FTSBX_ON_FAILURE=rewind a call that
 * failed (non-zero exit or death by signal) is rewound by txreplay before
 * the root sees the status, so the agent continues from a clean state.
 * Processes of that call still running (a daemon it left behind) are not
 * stopped: what they change later is journaled under the same transaction
 * and undone by the next rewind of it.
 *
 * Children that are the agent's own machinery rather than tool calls
 * (Python's multiprocessing workers and resource tracker, by default; the
 * FTSBX_NOT_TOOL_CALLS patterns otherwise) run in transaction 0.
 */
#include <fnmatch.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "shim.h"

extern char **environ;

/* Children of the root and their transactions (no heap: a fixed table). */
#define NCHILD 1024
static struct { pid_t pid; uint32_t txn; } children[NCHILD];

static void child_put(pid_t pid, uint32_t txn)
{
	for (int i = 0; i < NCHILD; i++)
		if (!children[i].pid || children[i].pid == pid) {
			children[i].pid = pid;
			children[i].txn = txn;
			return;
		}
}

static uint32_t child_take(pid_t pid)
{
	for (int i = 0; i < NCHILD; i++)
		if (children[i].pid == pid) {
			children[i].pid = 0;
			return children[i].txn;
		}
	return 0;
}

static void write_txn_record(enum jtype type, uint32_t txn, pid_t pid, int status, bool with_status)
{
	uint8_t buf[8192];
	char cwd[PATH_MAX];
	struct jbuild b;
	struct jseg *g;

	if (shim_segment(&g))
		return;
	jb_init(&b, buf, sizeof(buf), type, 0, txn);
	jb_u32(&b, F_PID, (uint32_t)pid);
	if (with_status)
		jb_u32(&b, F_STATUS, (uint32_t)status);
	if (type == J_TXN_BEGIN && shim.root) {
		jb_argv(&b, F_ARGV, shim.argv);
		if (b.overflow) {
			jb_init(&b, buf, sizeof(buf), type, 0, txn);
			jb_u32(&b, F_PID, (uint32_t)pid);
		}
		if (getcwd(cwd, sizeof(cwd)))
			jb_str(&b, F_CWD, cwd);
	}
	jseg_append(g, &b, NULL);
}

/* The transaction of this process's next record: the root takes its own
 * lazily; the first process of a tool call writes its J_TXN_BEGIN at its
 * first record. */
HIDDEN uint32_t shim_txn(void)
{
	if (shim.root && !shim.txn && shim.session_open) {
		shim.txn = jsession_next_txn(&shim.s);
		write_txn_record(J_TXN_BEGIN, shim.txn, getpid(), 0, false);
	} else if (shim.txn_fresh && shim.txn) {
		shim.txn_fresh = false;
		write_txn_record(J_TXN_BEGIN, shim.txn, getpid(), 0, false);
	}
	return shim.txn;
}

/* The root starts a child: the root's own transaction ends here. */
static void root_cut(void)
{
	if (shim.txn)
		write_txn_record(J_TXN_END, shim.txn, getpid(), 0, true);
	shim.txn = 0;
}

static bool not_a_tool_call(char *const argv[])
{
	const char *pats = shim_getenv("FTSBX_NOT_TOOL_CALLS");
	char line[4096];
	size_t n = 0;

	if (!argv)
		return false;
	for (char *const *a = argv; *a && n + 1 < sizeof(line); a++) {
		size_t l = strlen(*a);
		if (n + l + 2 > sizeof(line))
			break;
		if (n)
			line[n++] = ' ';
		memcpy(line + n, *a, l);
		n += l;
	}
	line[n] = 0;
	if (!pats)
		pats = "*from multiprocessing.* import *:*multiprocessing.resource_tracker*:"
		       "*multiprocessing.forkserver*";
	for (const char *p = pats; *p;) {
		char pat[512];
		size_t l = strcspn(p, ":");
		if (l < sizeof(pat)) {
			memcpy(pat, p, l);
			pat[l] = 0;
			if (l && fnmatch(pat, line, 0) == 0)
				return true;
		}
		p += l + (p[l] == ':');
	}
	return false;
}

/* The slots of the seq page (format.h) where a child that is not a tool
 * call leaves the transaction it was given, so that the root, reaping it,
 * neither ends nor rewinds a transaction that never was. */
#define RELEASED_SLOTS 896
static uint32_t *released(void)
{
	return (uint32_t *)((char *)shim.s.ctr + 512);
}

/* An exec in a fresh tool-call child that turns out to be the agent's own
 * machinery: move it out of the transaction. */
HIDDEN void txn_exec(char *const argv[])
{
	if (shim.txn_fresh && not_a_tool_call(argv)) {
		if (shim.session_open || shim_segment(&(struct jseg *){ NULL }) == 0)
			__atomic_store_n(&released()[shim.txn % RELEASED_SLOTS], shim.txn, __ATOMIC_RELEASE);
		shim.txn = 0;
		shim.txn_fresh = false;
	}
}

static bool was_released(uint32_t t)
{
	uint32_t *slot = &released()[t % RELEASED_SLOTS];

	return __atomic_compare_exchange_n(slot, &t, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* The transaction a child about to be started by posix_spawn or system
 * belongs to (ARGV: its command line). */
HIDDEN uint32_t txn_for_spawn(char *const argv[])
{
	if (!shim.root || !shim.session_open)
		return shim_txn();
	if (not_a_tool_call(argv))
		return 0;
	root_cut();
	return jsession_next_txn(&shim.s);
}

HIDDEN void txn_spawned(pid_t pid, uint32_t txn)
{
	if (shim.root && txn)
		child_put(pid, txn);
}

EXPORT pid_t fork(void)
{
	uint32_t t = 0;
	pid_t pid;

	shim_ensure();
	if (!shim_ready || shim_busy || !shim.root || !shim.session_open)
		return REAL(fork)();
	shim_busy = true;
	root_cut();
	t = jsession_next_txn(&shim.s);
	shim_busy = false;
	pid = REAL(fork)();
	if (pid == 0) {
		shim.root = false;
		shim.txn = t;
		shim.txn_fresh = true;
	} else if (pid > 0) {
		child_put(pid, t);
	}
	return pid;
}

/* Run txreplay to rewind transaction TXN, unwrapped. */
static void rewind_txn(uint32_t txn, int status)
{
	char tx[PATH_MAX], num[16], line[PATH_MAX + 256];
	const char *env_tx = shim_getenv("FTSBX_TXREPLAY");
	char *env[512];
	size_t k = 0;
	int st = 0;
	pid_t pid;

	if (env_tx && *env_tx) {
		snprintf(tx, sizeof(tx), "%s", env_tx);
	} else {
		/* beside the shim (build/), else PREFIX/bin for PREFIX/lib/ftsbx/ */
		snprintf(tx, sizeof(tx), "%s", shim.self);
		char *slash = strrchr(tx, '/');
		size_t room = sizeof(tx) - (size_t)(slash ? slash + 1 - tx : 0);
		snprintf(slash ? slash + 1 : tx, room, "txreplay");
		if (access(tx, X_OK) < 0)
			snprintf(slash ? slash + 1 : tx, room, "../../bin/txreplay");
	}
	snprintf(num, sizeof(num), "%u", txn);
	for (char **e = environ; e && *e && k + 1 < sizeof(env) / sizeof(env[0]); e++)
		if (strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "FTSBX_", 6))
			env[k++] = *e;
	env[k] = NULL;
	char *argv[] = { tx, "rewind", shim.journal, "--txn", num, NULL };
	pid = REAL(fork)();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0)
			dup2(null, 1);
		REAL(execve)(tx, argv, env);
		_exit(127);
	}
	if (pid > 0)
		while (REAL(waitpid)(pid, &st, 0) < 0 && errno == EINTR)
			;
	snprintf(line, sizeof(line), "ftsbx: tool call (transaction %u) %s %d: %s\n", txn,
		 WIFSIGNALED(status) ? "killed by signal" : "exited with",
		 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
		 pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "its changes were rewound"
		 : "its rewind did not finish; see txreplay list");
	if (write(2, line, strlen(line)) < 0)
		return;
}

/* The root reaped PID with STATUS. */
static void reaped(pid_t pid, int status)
{
	uint32_t t;

	if (!shim.root || pid <= 0 || (!WIFEXITED(status) && !WIFSIGNALED(status)))
		return;
	t = child_take(pid);
	if (!t || was_released(t))
		return;
	shim_busy = true;
	write_txn_record(J_TXN_END, t, pid, status, true);
	if (guard_rewind_counts(status, NULL))
		rewind_txn(t, status);
	shim_busy = false;
}

HIDDEN void txn_system_done(uint32_t txn, int status)
{
	if (!shim.root || !txn || status == -1)
		return;
	shim_busy = true;
	write_txn_record(J_TXN_END, txn, 0, status, true);
	if (guard_rewind_counts(status, NULL))
		rewind_txn(txn, status);
	shim_busy = false;
}

#define REAP(call, pidexpr, statusp) do {                        \
	int e_, st_ = 0;                                         \
	pid_t r_;                                                \
	shim_ensure();                                           \
	if (!shim_ready || !shim.root || shim_busy)              \
		return call;                                     \
	int *sp_ = (statusp) ? (statusp) : &st_;                 \
	r_ = (pidexpr);                                          \
	if (r_ > 0) {                                            \
		e_ = errno;                                      \
		reaped(r_, *sp_);                                \
		errno = e_;                                      \
	}                                                        \
	return r_;                                               \
} while (0)

EXPORT pid_t waitpid(pid_t pid, int *s, int o) { REAP(REAL(waitpid)(pid, s, o), REAL(waitpid)(pid, sp_, o), s); }
EXPORT pid_t wait(int *s) { REAP(REAL(wait)(s), REAL(wait)(sp_), s); }
EXPORT pid_t wait3(int *s, int o, struct rusage *u) { REAP(REAL(wait3)(s, o, u), REAL(wait3)(sp_, o, u), s); }
EXPORT pid_t wait4(pid_t pid, int *s, int o, struct rusage *u)
{
	REAP(REAL(wait4)(pid, s, o, u), REAL(wait4)(pid, sp_, o, u), s);
}

EXPORT int waitid(idtype_t t, id_t id, siginfo_t *info, int o)
{
	int r;

	shim_ensure();
	r = REAL(waitid)(t, id, info, o);
	if (r == 0 && shim_ready && shim.root && !shim_busy && info && info->si_pid > 0 && !(o & WNOWAIT) &&
	    (info->si_code == CLD_EXITED || info->si_code == CLD_KILLED || info->si_code == CLD_DUMPED)) {
		int e = errno;
		int status = info->si_code == CLD_EXITED ? (info->si_status & 0xff) << 8 : info->si_status & 0x7f;
		reaped(info->si_pid, status);
		errno = e;
	}
	return r;
}
