/*
 * txn.c - transactions for unmodified agent loops (DESIGN.md, "Transactions
 * and the journal").
 *
 * The session's root is its first wrapped process (FTSBX_ROOT holds its
 * pid). A starter is the root or a session shell (below). Every process
 * tree the root starts (by fork, vfork, posix_spawn or
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
 * A session shell is a starter too. Harnesses that keep one shell open
 * and write each tool call to its stdin (SWE-agent, OpenHands, pexpect,
 * asyncio.create_subprocess_shell("/bin/bash")) would otherwise be one
 * transaction for the whole session. A shell (bash, sh, dash, zsh, ksh,
 * mksh, ash, busybox sh) that reads its commands from stdin or a terminal
 * (no -c string, no script operand) and is the root's tool call itself
 * (its parent is the root, or a shell the root started as `sh -c SHELL`),
 * or a tmux or screen window's shell (its parent the multiplexer's server)
 * decides so at its first need (its first record or child), and from then
 * on does what the root does: every child it starts (fork, vfork,
 * posix_spawn) is a transaction with its first exec's command line, ended
 * (and with rewind on failure, rewound) when the shell reaps it; its own
 * writes form transactions of their own, cut at each start of a child,
 * from the first on: the transaction the root gave it (which the root ends
 * when the harness closes the shell, often by a signal) keeps only its
 * start. A stdin shell deeper inside a tool
 * call (`bash -c 'echo ls | bash'`, make running sh) is not one: that call
 * stays one transaction. bash reaps from its SIGCHLD handler, possibly
 * inside a hook of its own: such a reaping is ended when that hook leaves.
 *
 * Children that are the agent's own machinery rather than tool calls
 * (Python's multiprocessing workers and resource tracker, by default; the
 * FTSBX_NOT_TOOL_CALLS patterns otherwise) are no transaction of the
 * root's. Python's are starters: a worker of a spawn or forkserver pool
 * runs the agent's code as the root does, its tool calls and its own
 * writes alike. Other machinery runs in transaction 0, with everything it
 * starts.
 *
 * The root learns each tool call's command line for the reaping (the
 * policy's [rewind] exceptions judge it) through a shared mapping it makes
 * before its first child: the child leaves it there at its first exec (or
 * the root, for posix_spawn and system). A harness may make consecutive
 * tool calls one transaction: children started with the same
 * FTSBX_TXN_GROUP in their environment share the transaction of the first
 * of them, until a child with another group, or none, starts.
 *
 * vfork stays a vfork (Python's subprocess uses it: a fork of a big agent
 * costs milliseconds of page-table copying per tool call). A C wrapper
 * cannot return twice from one stack frame, so vfork is a few instructions
 * of assembly around the real one (as compiler-rt's interceptors do); the
 * child, which shares the parent's memory until its exec, runs every hook
 * but the exec family as the real call, writes its exec record into the
 * parent's segment (opened before the vfork) and keeps its transaction in
 * thread-local memory of its own.
 */
#include <fnmatch.h>
#include <poll.h>
#include <sched.h>
#include <utmp.h>
#include <sodium.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>
#include "shim.h"
#include "../policy/policy.h"

extern char **environ;

/* Children of the root: pid and the id it was started with (its key: see
 * struct shared), one atomic word each, since the agent's threads start and
 * reap tool calls at once (no heap: a fixed table). Open addressing: a pid
 * is looked for from the slot its hash names onwards (the probe order), and
 * CHILD_REACH bounds how far any entry ever went, so that a look-up (also
 * of a pid that is not there) reads a few words, not the whole table. A put
 * takes the first slot in probe order that is empty or holds the same pid,
 * so an entry of a reused pid always comes before a stale one (a child
 * reaped before its put, by another thread's wait), which the put then
 * clears. Lock-free and async-signal-safe: these run between fork and exec,
 * in vfork paths and in a SIGCHLD handler's wait. */
#define NCHILD 1024
static uint64_t children[NCHILD];
static unsigned child_reach;            /* the farthest probe distance of any put, plus one */

static unsigned child_home(pid_t pid)
{
	return (uint32_t)pid * 0x9e3779b1u >> 22;      /* the top 10 bits: NCHILD slots */
}

static void child_put(pid_t pid, uint32_t key)
{
	uint64_t v = (uint64_t)(uint32_t)pid << 32 | key;
	unsigned h = child_home(pid), d;

	_Static_assert(NCHILD == 1u << 10, "child_home gives 10 bits");
	for (d = 0; d < NCHILD; d++) {
		uint64_t *slot = &children[(h + d) % NCHILD];
		uint64_t old = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
		while (old == 0 || old >> 32 == (uint32_t)pid) {
			unsigned reach = __atomic_load_n(&child_reach, __ATOMIC_ACQUIRE);
			/* the reach first: a take must not stop short of the entry */
			while (reach <= d && !__atomic_compare_exchange_n(&child_reach, &reach, d + 1, false,
									 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				;
			if (__atomic_compare_exchange_n(slot, &old, v, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				goto put;
		}
	}
	return;                 /* full: the call is not followed */
put:
	/* a stale entry of the same pid further on goes */
	for (unsigned reach = __atomic_load_n(&child_reach, __ATOMIC_ACQUIRE); ++d < reach;) {
		uint64_t *slot = &children[(h + d) % NCHILD];
		uint64_t old = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
		if (old >> 32 == (uint32_t)pid && old != v)
			__atomic_compare_exchange_n(slot, &old, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	}
}

static uint32_t child_take(pid_t pid)
{
	unsigned h = child_home(pid), reach = __atomic_load_n(&child_reach, __ATOMIC_ACQUIRE);

	for (unsigned d = 0; d < reach; d++) {
		uint64_t *slot = &children[(h + d) % NCHILD];
		uint64_t old = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
		while (old && old >> 32 == (uint32_t)pid)
			if (__atomic_compare_exchange_n(slot, &old, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				return (uint32_t)old;
	}
	return 0;
}

/* A transaction starter: the root, or a session shell (see starter()).
 * SHELL: 0 until decided, 1 in a session shell, -1 in every other process;
 * SHELL_INHERITED: a session shell still runs in the transaction the root
 * gave it (it has started no child yet). */
static bool starter(void);
/* A fork child of the root before its first exec: the key it was started
 * with (0 once decided, and in every other process). */
static uint32_t fork_key HOT_DATA;
static int shell HOT_DATA;
static bool shell_inherited;

/*
 * What the root and its children share about tool calls: an anonymous
 * shared mapping the root makes before its first child, so that fork
 * children inherit it (and vfork ones share it anyway); an exec drops it.
 * Each tool call has a key, the id the root took for it at its start: its
 * slot (key % NSLOT, tagged with the key) holds the transaction it runs in
 * (the key itself, or its group's) and its command line. A slot reused
 * before its tool call was reaped (NSLOT starts later) just loses the
 * command line. The current group's name and transaction are under a small
 * spin lock (held for a compare and a copy).
 */
#define NSLOT 256
#define SLOT_ARGV 2040
struct slot {
	uint32_t key, txn;
	char argv[SLOT_ARGV];           /* the words, each ended by a NUL; an empty word ends */
};
struct shared {
	uint32_t lock, group_txn;
	char group[248];
	struct slot slot[NSLOT];
};
static struct shared *sh;

/* The root's shared mapping, made at its first child (NULL if mmap fails). */
static struct shared *shared_get(void)
{
	struct shared *s = __atomic_load_n(&sh, __ATOMIC_ACQUIRE), *none = NULL;

	if (s || !starter())
		return s;
	s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED)
		return NULL;
	if (!__atomic_compare_exchange_n(&sh, &none, s, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		munmap(s, sizeof(*s));
		s = none;
	}
	return s;
}

static void shared_lock(struct shared *s)
{
	/* a holder killed inside (a few instructions) would hold it forever:
	 * after about a second of waiting, take it anyway */
	for (int i = 0; __atomic_exchange_n(&s->lock, 1, __ATOMIC_ACQUIRE) && i < 1000000; i++)
		sched_yield();
}

static void shared_unlock(struct shared *s)
{
	__atomic_store_n(&s->lock, 0, __ATOMIC_RELEASE);
}

/* Keep ARGV in KEY's slot, with TXN; a command line that does not fit is
 * not kept at all (a cut one could match an exception the whole does not). */
static void slot_put(struct shared *s, uint32_t key, uint32_t txn, char *const argv[])
{
	struct slot *sl = &s->slot[key % NSLOT];
	size_t n = 0;

	__atomic_store_n(&sl->key, 0, __ATOMIC_RELEASE);
	sl->txn = txn;
	for (char *const *a = argv; a && *a; a++) {
		size_t l = strlen(*a);
		if (n + l + 3 > SLOT_ARGV) {
			n = 0;
			break;
		}
		if (l)
			memcpy(sl->argv + n, *a, l);
		else
			sl->argv[n + l++] = ' ';        /* an empty word would end the list */
		n += l;
		sl->argv[n++] = 0;
	}
	sl->argv[n] = 0;
	__atomic_store_n(&sl->key, key, __ATOMIC_RELEASE);
}

/* KEY's transaction, and its command line into WORDS (NULL-ended, pointing
 * into STORE); false when its slot was never written or was reused. */
static bool slot_get(uint32_t key, uint32_t *txn, char *words[], size_t nwords, char store[SLOT_ARGV])
{
	struct slot *sl = sh ? &sh->slot[key % NSLOT] : NULL;
	size_t k = 0;

	if (!sl || __atomic_load_n(&sl->key, __ATOMIC_ACQUIRE) != key)
		return false;
	*txn = sl->txn;
	memcpy(store, sl->argv, SLOT_ARGV);
	store[SLOT_ARGV - 1] = store[SLOT_ARGV - 2] = 0;
	for (char *w = store; *w && k + 1 < nwords; w += strlen(w) + 1)
		words[k++] = w;
	words[k] = NULL;
	return __atomic_load_n(&sl->key, __ATOMIC_ACQUIRE) == key;
}

static const char *env_value(char *const envp[], const char *name)
{
	size_t n = strlen(name);

	for (char *const *e = envp; e && *e; e++)
		if ((*e)[0] == name[0] && !strncmp(*e, name, n) && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

/* The transaction of tool call KEY started with ENVP: KEY, or that of the
 * running group when ENVP names it (MAY_JOIN: the child has recorded
 * nothing under KEY yet). Its command line ARGV is kept for the reaping. */
static uint32_t tool_call_txn(uint32_t key, char *const argv[], char *const envp[], bool may_join)
{
	struct shared *s = sh;
	const char *group = env_value(envp, "FTSBX_TXN_GROUP");
	uint32_t txn = key;

	if (!s)
		return key;
	shared_lock(s);
	if (!may_join) {
		;                               /* it stays in its own */
	} else if (!group || !*group || strlen(group) >= sizeof(s->group)) {
		s->group_txn = 0;               /* the group, if any, ends here */
		s->group[0] = 0;
	} else if (s->group_txn && !strcmp(s->group, group)) {
		txn = s->group_txn;
	} else {
		strcpy(s->group, group);
		s->group_txn = key;
	}
	shared_unlock(s);
	slot_put(s, key, txn, argv);
	return txn;
}

/* FLAGS: JR_CUT for a starter's own transaction cut at a child's start. */
static void write_txn_record(enum jtype type, uint32_t txn, pid_t pid, int status, bool with_status, uint8_t flags)
{
	uint8_t buf[8192];
	char cwd[PATH_MAX];
	struct jbuild b;
	struct jseg *g;

	if (shim_segment(&g))
		return;
	jb_init(&b, buf, sizeof(buf), type, flags, txn);
	jb_u32(&b, F_PID, (uint32_t)pid);
	if (with_status)
		jb_u32(&b, F_STATUS, (uint32_t)status);
	if (type == J_TXN_BEGIN && !fork_key && starter()) {
		jb_argv(&b, F_ARGV, shim.argv);
		if (b.overflow) {
			jb_init(&b, buf, sizeof(buf), type, flags, txn);
			jb_u32(&b, F_PID, (uint32_t)pid);
		}
		if (getcwd(cwd, sizeof(cwd)))
			jb_str(&b, F_CWD, cwd);
	}
	jseg_append(g, &b, NULL);
}

/* A vfork child until its exec: its transaction, the key it was started
 * with (0 for a child of a process other than the root), and where the
 * vfork returns to. Thread-local: the child runs on the thread-local memory
 * of the parent's thread that called vfork, which waits meanwhile. */
static __thread struct {
	void *ret;
	uint32_t txn, key, spawn;
	bool on, child, decided, spawning;
} vf __attribute__((tls_model("initial-exec")));

/* The records of this thread go to transaction T (ON) until turned off:
 * the captures of a posix_spawn's file actions, made by the parent for
 * the child's tool call (exec.c). */
HIDDEN void txn_records_for(bool on, uint32_t t)
{
	vf.spawn = t;
	vf.spawning = on;
}

HIDDEN bool txn_vfork_child(void)
{
	return vf.child;
}

/* The transaction of this process's next record: a starter takes its own
 * lazily; the first process of a tool call writes its J_TXN_BEGIN at its
 * first record. */
HIDDEN uint32_t shim_txn(void)
{
	if (__builtin_expect(vf.child | vf.spawning, 0))
		return vf.child ? vf.txn : vf.spawn;
	if (__builtin_expect(!__atomic_load_n(&shell, __ATOMIC_RELAXED), 0) && shim.txn && !fork_key)
		(void)starter();        /* a session shell? (cut its own writes from its tool call) */
	if (!shim.txn && shim.session_open && starter()) {
		shim.txn = jsession_next_txn(&shim.s);
		write_txn_record(J_TXN_BEGIN, shim.txn, getpid(), 0, false, 0);
	} else if (shim.txn_fresh && shim.txn) {
		shim.txn_fresh = false;
		write_txn_record(J_TXN_BEGIN, shim.txn, getpid(), 0, false, 0);
	}
	return shim.txn;
}

/* The files held_files recorded already in this process (a rewind needs
 * one record of each): dev and inode, the last HELD_KEEP of them. */
#define HELD_KEEP 32
static struct { dev_t dev; ino_t ino; } held_seen[HELD_KEEP];
static unsigned held_next;

static bool held_before(const struct stat *st)
{
	for (unsigned i = 0; i < HELD_KEEP; i++)
		if (held_seen[i].ino == st->st_ino && held_seen[i].dev == st->st_dev)
			return true;
	held_seen[held_next % HELD_KEEP].dev = st->st_dev;
	held_seen[held_next++ % HELD_KEEP].ino = st->st_ino;
	return false;
}

/* The regular files this starter holds open for writing as its own
 * transaction TXN is cut (an agent's log file, its history database): it
 * may write on through them where no hook sees a write, so each gets a
 * J_TXN_END of TXN with JR_HELD and its path, which rewind's drift check
 * takes as a path still being changed. getdents64: no allocation. */
static void held_files(uint32_t txn)
{
	char buf[2048] __attribute__((aligned(8))), link[40], path[PATH_MAX], rec[PATH_MAX + 256];
	size_t jn = shim.journal ? strlen(shim.journal) : 0;
	bool busy = shim_busy;
	struct jbuild b;
	struct jseg *g;
	long n;
	int dfd;

	if (shim_segment(&g))
		return;
	shim_busy = true;       /* our own calls pass the hooks */
	dfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	while (dfd >= 0 && (n = syscall(SYS_getdents64, dfd, buf, sizeof(buf))) > 0)
		for (long off = 0; off < n;) {
			const struct dirent64 *d = (const struct dirent64 *)(const void *)(buf + off);
			struct stat st;
			int fd = 0, fl;
			ssize_t k;

			off += d->d_reclen;
			for (const char *c = d->d_name; *c >= '0' && *c <= '9' && fd < 1 << 24; c++)
				fd = fd * 10 + (*c - '0');
			if (d->d_name[0] < '0' || d->d_name[0] > '9' || fd == dfd || fd == g->fd)
				continue;
			fl = fcntl(fd, F_GETFL);
			if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
			    !st.st_nlink || held_before(&st))
				continue;
			snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
			k = readlink(link, path, sizeof(path) - 1);
			if (k <= 0 || path[0] != '/')
				continue;
			path[k] = 0;
			if (jn && !strncmp(path, shim.journal, jn) && (path[jn] == '/' || !path[jn]))
				continue;       /* the journal's own */
			jb_init(&b, rec, sizeof(rec), J_TXN_END, JR_CUT | JR_HELD, txn);
			jb_u32(&b, F_PID, (uint32_t)getpid());
			jb_str(&b, F_PATH, path);
			if (!b.overflow)
				jseg_append(g, &b, NULL);
		}
	if (dfd >= 0)
		close(dfd);
	shim_busy = busy;
}

/* A starter starts a child: its own transaction ends here. A session
 * shell's first one is the root's tool call: the root ends it. */
static void starter_cut(void)
{
	if (__atomic_load_n(&txn_pending, __ATOMIC_ACQUIRE))
		txn_reap_pending();
	if (shim.txn && !shell_inherited) {
		held_files(shim.txn);
		write_txn_record(J_TXN_END, shim.txn, getpid(), 0, true, JR_CUT);
	}
	shell_inherited = false;
	shim.txn = 0;
}

/* A starter is about to start a child: the key (new transaction) of that
 * tool call, with the shared area its command line will go to. */
static uint32_t tool_call_key(void)
{
	starter_cut();
	uint32_t key = jsession_next_txn(&shim.s);
	shared_get();
	return key;
}

#define NOT_TOOL_CALLS "*from multiprocessing.* import *:*multiprocessing.resource_tracker*:" \
		       "*multiprocessing.forkserver*"

static bool not_a_tool_call(char *const argv[])
{
	const char *pats = shim_getenv("FTSBX_NOT_TOOL_CALLS");
	char line[4096];
	size_t n = 0;

	if (!argv)
		return false;
	if (!pats) {
		/* every default pattern needs "multiprocessing" in one word
		 * (the line only puts spaces between them) */
		char *const *a = argv;
		while (*a && !strstr(*a, "multiprocessing"))
			a++;
		if (!*a)
			return false;
		pats = NOT_TOOL_CALLS;
	}
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
#define RELEASED_SLOTS JL_RELEASED_SLOTS
static uint32_t *released(void)
{
	return (uint32_t *)((char *)shim.s.ctr + JL_RELEASED_AT);
}

static void release(uint32_t key)
{
	if (shim.session_open || shim_segment(&(struct jseg *){ NULL }) == 0)
		__atomic_store_n(&released()[key % RELEASED_SLOTS], key, __ATOMIC_RELEASE);
}


/* The first exec of a tool call's child (ENVP: the environment it passes):
 * the agent's own machinery leaves the transaction, a group member joins
 * its group's, and the command line is kept for the root. */
HIDDEN void txn_exec(char *const argv[], char *const envp[])
{
	if (vf.child) {
		if (vf.key && !vf.decided) {
			vf.decided = true;
			if (not_a_tool_call(argv)) {
				release(vf.key);
				vf.txn = 0;
			} else {
				vf.txn = tool_call_txn(vf.key, argv, envp, true);
			}
		}
		return;
	}
	if (!fork_key)
		return;
	if (shim.txn_fresh && not_a_tool_call(argv)) {
		release(fork_key);
		shim.txn = 0;
		shim.txn_fresh = false;
	} else {
		uint32_t t = tool_call_txn(fork_key, argv, envp, shim.txn_fresh);
		if (t != shim.txn) {    /* joined a group whose first member began it */
			shim.txn = t;
			shim.txn_fresh = false;
		}
	}
	fork_key = 0;
}

/* state.c: register the atfork handler now (before a fork). */

/* The FTSBX_TXN of a program this process execs. */
HIDDEN uint32_t txn_exec_txn(void)
{
	if (vf.child)
		return vf.txn;
	return shim.root ? 0 : shim.txn;
}

static bool was_released(uint32_t t)
{
	uint32_t *slot = &released()[t % RELEASED_SLOTS];

	return __atomic_compare_exchange_n(slot, &t, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* The transaction of a child about to be started by posix_spawn or system
 * (ARGV, ENVP: its command line and environment); *KEY is what the root
 * passes to txn_spawned or txn_system_done once it started (0: nothing to
 * follow). */
HIDDEN uint32_t txn_for_spawn(char *const argv[], char *const envp[], uint32_t *key)
{
	*key = 0;
	if (!starter() || !shim.session_open)
		return shim_txn();
	if (not_a_tool_call(argv))
		return 0;
	*key = tool_call_key();
	return tool_call_txn(*key, argv, envp, true);
}

HIDDEN void txn_spawned(pid_t pid, uint32_t key)
{
	if (key && starter())
		child_put(pid, key);
}

/*
 * A process that is not a starter forks (a tool call's shell running
 * `ls && head`, a pipeline, make): each child that execs records its start,
 * and opened the session for that itself (about 17 system calls, and in a
 * fork child every page of code and stack it touches costs a fault). The
 * session is opened here instead, once, and every child inherits it; the
 * shell would open it anyway for its own last command, which it execs in
 * place. So are log/, where the children's lanes are (opened at the first
 * one's need: three system calls each), and the cached cwd the records
 * name (a getcwd each). A child that never execs nor writes leaves them
 * unused.
 */
static void session_for_children(void)
{
	int e = errno;

	shim_busy = true;
	if (shim_session()) {
		jsession_logfd(&shim.s);
		cwd_get();
	}
	shim_busy = false;
	errno = e;
}

/* The shim is bound lazily (GNUmakefile: -z lazy): each libc function it
 * calls is looked up at its first call in a process. A fork child would
 * look up, every time, what its parent never called (the exec path's
 * checks and records), and fault in the pages of the symbol tables it
 * reads. They are called once here, in the parent, harmlessly (empty
 * paths, no bytes). test_shim_layout.py: a fork child binds nothing before
 * it execs. */
static volatile uintptr_t warm_sink;    /* calls without side effects are not dropped */

static __attribute__((noinline)) void warm_libc(void)
{
	static volatile size_t zero;    /* no call the compiler can fold away */
	char buf[4] = "", link[4];
	struct timespec ts;
	pthread_mutex_t m;
	struct stat st;
	size_t n = zero;

	warm_sink = (uintptr_t)strchr(buf, (int)n + '/') + (uintptr_t)strchrnul(buf, (int)n + '/') +
	       (uintptr_t)memchr(buf, '/', n) + strnlen(buf, n);
	memset(buf, 0, n);
	sodium_memzero(buf, n);         /* libsodium's: __explicit_bzero_chk */
	(void)!readlink(buf, link, sizeof(link));
	(void)!getcwd(link, sizeof(link));      /* ERANGE, mostly: an exec's record */
	(void)!lstat(buf, &st);
	(void)!stat(buf, &st);
	(void)!write(-1, buf, n);
	(void)!getppid();
	(void)!clock_gettime(CLOCK_REALTIME, &ts);
	pthread_mutex_init(&m, NULL);
	pthread_mutex_lock(&m);         /* the journal's lanes */
	pthread_mutex_unlock(&m);
	(void)!flistxattr(-1, NULL, n); /* a pre-image's extended attributes */
	(void)!llistxattr(buf, NULL, n);
}

/* A fork child mostly execs: the real exec functions are looked up here,
 * once, in the parent, rather than by dlsym in every child, where the
 * symbol tables' pages it reads would each be a page fault of its own. */
static void warm_exec_path(void)
{
	static bool warm HOT_DATA;

	if (warm || !shim_ready)
		return;
	(void)REAL(execve);
	(void)REAL(execv);
	(void)REAL(execvp);
	(void)REAL(execvpe);
	(void)REAL(dup2);               /* a shell's redirections */
	(void)REAL(close_range);        /* Python's close_fds */
	(void)REAL(chdir);              /* cwd= */
	(void)REAL(kill);               /* the journal asks whether a lane's owner lives */
	int e = errno;
	warm_libc();
	errno = e;
	warm = true;
}

/* The lanes' owner id (journal.h: jseg_owner_warm), found once in a
 * process with a session before it forks, for its children to take. */
static void warm_owner(void)
{
	static bool warm HOT_DATA;

	if (warm || !shim.session_open)
		return;
	int e = errno;
	jseg_owner_warm(shim_pid());
	errno = e;
	warm = true;
}

EXPORT pid_t fork(void)
{
	uint32_t t = 0;
	pid_t pid;

	shim_ensure();
	if (shim_ready && vf.child) {
		/* a vfork child forking: the grandchild has memory of its own */
		pid = REAL(fork)();
		if (pid == 0) {
			shim.root = shim.machinery = false;
			shell = -1;
			shim.txn = vf.txn;
			shim.txn_fresh = false;
			fork_key = 0;
			vf.child = vf.on = false;
			shim_busy = false;
		}
		return pid;
	}
	/* a pending descriptor both sides keep open, and whichever writes
	 * first takes it: this side, which would not know the other did
	 * (pending.c), takes it now. Those closed at exec stay pending: a
	 * child that moves one to 0-2 takes it then. */
	if (shim_ready && !shim_busy && pend_flush_all(true))
		return -1;
	shim_atfork();          /* before glibc takes its atfork lock (state.c) */
	warm_exec_path();
	if (!shim_ready || shim_busy || !starter() || !shim.session_open) {
		if (shim_ready && !shim_busy && !shim.session_open)
			session_for_children();
		if (shim_ready && !shim_busy)
			warm_owner();
		pid = REAL(fork)();
		if (pid == 0)
			fork_key = 0;   /* a child of a fork child decides nothing */
		return pid;
	}
	shim_busy = true;
	t = tool_call_key();
	shim_busy = false;
	warm_owner();
	pid = REAL(fork)();
	if (pid == 0) {
		shim.root = shim.machinery = false;
		shell = -1;
		shim.txn = t;
		shim.txn_fresh = true;
		fork_key = t;
	} else if (pid > 0) {
		child_put(pid, t);
	}
	return pid;
}

/* forkpty as glibc writes it, but through the fork above: glibc's own
 * forks inside the C library, where no hook sees it (pexpect, pty.fork). */
EXPORT pid_t forkpty(int *amaster, char *name, const struct termios *termp, const struct winsize *winp)
{
	int master, slave, e;
	pid_t pid;

	if (openpty(&master, &slave, name, termp, winp) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		close(master);
		if (login_tty(slave))
			_exit(1);
		return 0;
	}
	e = errno;
	close(slave);
	if (pid < 0) {
		close(master);
		errno = e;
		return -1;
	}
	*amaster = master;
	return pid;
}

/*
 * vfork. txn_vfork_enter runs first (RET: where the caller continues): 0
 * to vfork here, else the call becomes a fork. The child needs this
 * process's segment open, since it cannot open one of its own in memory it
 * shares. After the real vfork, txn_vfork_leave runs in the child (which
 * marks itself: its hooks but the exec family pass through) and, once the
 * child has exec'd or exited, in the parent (which takes the thread back).
 */
struct vret { long r; void *ret; };

HIDDEN __attribute__((used)) int txn_vfork_enter(void *ret)
{
	struct jseg *g;

	shim_ensure();
	if (!shim_ready) {
		vf.on = false;
		vf.ret = ret;
		return REAL(vfork) ? 0 : 1;     /* resolved: the caller jumps through it */
	}
	/* a child in this memory would write pending descriptors past it
	 * (pending.c): a fork's has a table of its own */
	if (vf.child || shim_busy || !REAL(vfork) || pend_any() || mapped_any())
		return 1;
	shim_busy = true;
	shim_pid();             /* cached now: the child must not cache its own here */
	if (shim_segment(&g)) {
		shim_busy = false;
		return 1;
	}
	vf.key = 0;
	if (starter()) {
		vf.key = vf.txn = tool_call_key();
	} else {
		vf.txn = shim_txn();
	}
	vf.decided = false;
	vf.ret = ret;
	vf.on = true;
	shim_busy = false;
	return 0;
}

HIDDEN __attribute__((used)) struct vret txn_vfork_leave(long r)
{
	struct vret v = { r, vf.ret };
	int e;

	if (!vf.on)
		return v;
	if (r == 0) {
		vf.child = true;
		shim_busy = true;
		return v;
	}
	e = errno;
	vf.child = vf.on = false;
	shim_busy = false;
	if (r > 0 && vf.key)
		child_put((pid_t)r, vf.key);
	/* (a child that chdir'd before its exec left the cached cwd alone:
	 * path.c's chdir hook passes a vfork child through) */
	errno = e;
	return v;
}

HIDDEN __attribute__((used)) pid_t txn_vfork_fallback(void)
{
	return fork();
}

#if defined(__x86_64__)
/* The return address is kept in thread-local memory, not on the stack:
 * the child returns first and reuses the stack below the caller's frame. */
__asm__(
	"	.text\n"
	"	.globl	vfork\n"
	"	.type	vfork, @function\n"
	"	.globl	__vfork\n"      /* glibc exports it too */
	"	.type	__vfork, @function\n"
	"	.p2align 4\n"
	"vfork:\n"
	"__vfork:\n"
	"	movq	(%rsp), %rdi\n"
	"	subq	$8, %rsp\n"
	"	call	txn_vfork_enter\n"
	"	addq	$8, %rsp\n"
	"	testl	%eax, %eax\n"
	"	jnz	1f\n"
	"	popq	%rdi\n"
	"	movq	real_vfork(%rip), %rax\n"
	"	call	*%rax\n"
	"	movq	%rax, %rdi\n"
	"	call	txn_vfork_leave\n"
	"	jmp	*%rdx\n"
	"1:	jmp	txn_vfork_fallback\n"
	"	.size	vfork, .-vfork\n"
	"	.size	__vfork, .-__vfork\n");
#else
EXPORT pid_t vfork(void)
{
	return fork();          /* elsewhere a vfork child runs as a fork child */
}
EXPORT pid_t __vfork(void) { return fork(); }
#endif

/* From txreplay rewind's output OUT (N bytes): whether its summary line
 * ("rewound: U undone, A already, S skipped, D drift, F failed") counts
 * anything at all. A failed call that changed nothing (grep with no match,
 * a test run) had nothing to rewind, and its reaping says nothing. */
static bool rewound_something(const char *out, size_t n)
{
	static const char tag[] = "rewound: ";
	const char *p = NULL;

	for (size_t i = 0; i + sizeof(tag) - 1 <= n; i++)
		if ((i == 0 || out[i - 1] == '\n') && !memcmp(out + i, tag, sizeof(tag) - 1))
			p = out + i + sizeof(tag) - 1;
	if (!p)
		return true;    /* no summary: say what happened */
	for (; p < out + n && *p != '\n'; p++)
		if (*p >= '1' && *p <= '9')
			return true;
	return false;
}

/* The last "txreplay: error: ..." line of txreplay's output OUT (N bytes),
 * NUL-ended in place at its end, or NULL. */
static const char *last_error(char *out, size_t n)
{
	const char *found = NULL;

	if (n == 0)
		return NULL;
	out[n - 1] = 0;         /* its last byte: a newline, or cut */
	for (char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, "txreplay: ", 10) && strncmp(l, "txreplay: warning", 17))
			found = l + 10;
	return found;
}

/* Run txreplay to rewind transaction TXN, unwrapped. */
static void rewind_txn(uint32_t txn, int status, bool refused)
{
	char tx[PATH_MAX], num[16], line[PATH_MAX + 256], out[1024];
	size_t got = 0;
	int fds[2] = { -1, -1 };
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
	posix_spawn_file_actions_t fa;
	sigset_t chld, old;
	/* a SIGCHLD handler (bash's) must not reap txreplay before we do */
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	pthread_sigmask(SIG_BLOCK, &chld, &old);
	/* spawned, not forked: a fork of a big agent costs its page tables;
	 * its output read back for its summary line (the last kilobyte) */
	if (pipe2(fds, O_CLOEXEC) < 0)
		fds[0] = fds[1] = -1;
	if (posix_spawn_file_actions_init(&fa) ||
	    (fds[1] >= 0 ? posix_spawn_file_actions_adddup2(&fa, fds[1], 1) ||
			   posix_spawn_file_actions_adddup2(&fa, fds[1], 2)
			 : posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0)) ||
	    REAL(posix_spawn)(&pid, tx, &fa, NULL, argv, env))
		pid = -1;
	posix_spawn_file_actions_destroy(&fa);
	if (fds[1] >= 0)
		close(fds[1]);
	/* until its end of file, or until txreplay is gone and the pipe is
	 * empty: a fork of another thread of the agent may hold the write end
	 * open for as long as it lives */
	bool reaped = false;
	for (ssize_t r; pid > 0 && fds[0] >= 0;) {
		struct pollfd pf = { .fd = fds[0], .events = POLLIN };
		int n = poll(&pf, 1, reaped ? 0 : 50);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n < 0 || reaped)
				break;
			pid_t w = REAL(waitpid)(pid, &st, WNOHANG);
			/* (ECHILD: another thread's handler reaped it) */
			reaped = w == pid || (w < 0 && errno == ECHILD);
			continue;
		}
		if (got == sizeof(out)) {       /* keep the last half */
			memmove(out, out + sizeof(out) / 2, sizeof(out) / 2);
			got = sizeof(out) / 2;
		}
		r = read(fds[0], out + got, sizeof(out) - got);
		if (r > 0)
			got += (size_t)r;
		else if (r == 0 || errno != EINTR)
			break;
	}
	if (fds[0] >= 0)
		close(fds[0]);
	if (pid > 0 && !reaped)
		while (REAL(waitpid)(pid, &st, 0) < 0 && errno == EINTR)
			;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 && fds[0] >= 0 && !rewound_something(out, got))
		return;
	bool done = pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
	const char *why = done ? NULL : last_error(out, got);
	snprintf(line, sizeof(line), "ftsbx: tool call (transaction %u) %s %d%s: %s%s%.*s%s\n", txn,
		 WIFSIGNALED(status) ? "killed by signal" : "exited with",
		 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
		 refused ? " after a refused call" : "",
		 done ? "its changes were rewound" : "its rewind did not finish; see txreplay list",
		 why ? " (" : "", why ? (int)strcspn(why, "\n") : 0, why ? why : "", why ? ")" : "");
	if (write(2, line, strlen(line)) < 0)
		return;
}

static bool is_shell(const char *a0)
{
	const char *b = strrchr(a0, '/');
	static const char *const shells[] = { "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash" };

	b = b ? b + 1 : a0;
	for (size_t i = 0; i < sizeof(shells) / sizeof(shells[0]); i++)
		if (!strcmp(b, shells[i]))
			return true;
	return false;
}

/*
 * The command a tool call ran, as the policy's [rewind] exceptions see it.
 * Agents run tools through sh -c: a shell started with -c and a string that
 * is one plain command (words, quotes and globs; only "cd DIR &&" and
 * variable assignments, `CI=1 pytest`, before it) stands for that command,
 * its words made in BUF. Anything else the shell would expand, redirect,
 * pipe or sequence leaves ARGV as it is.
 */
static bool assignment(const char *p)
{
	size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789");

	return n && !(p[0] >= '0' && p[0] <= '9') && p[n] == '=';
}

static char *const *command_of(char *const argv[], char *buf, size_t cap, char *words[], size_t nmax)
{
	int argc = 0;

	while (argv && argv[argc])
		argc++;
	const char *string = argc && is_shell(argv[0]) ? policy_shell_string(argv, argc) : NULL;
	size_t n = 0, k = 0, cmd = 0;
	bool word = false, assign = false;

	if (!string)
		return argv;
	for (const char *p = string;; p++) {
		char c = *p;
		if (c == 0 || c == ' ' || c == '\t') {
			if (word) {
				buf[n++] = 0;
				word = false;
				if (assign)     /* the command comes after it */
					cmd = k;
				assign = false;
			}
			if (!c)
				break;
			continue;
		}
		if (n + 2 >= cap || k + 2 >= nmax)
			return argv;
		if (c == '&' && p[1] == '&' && !word) {
			/* only "cd DIR" may come before */
			if (k - cmd != 2 || strcmp(words[cmd], "cd"))
				return argv;
			cmd = k;
			p++;
			continue;
		}
		if (!word) {
			/* a comment, a tilde; an assignment before the command
			 * is skipped, another word with '=' there is not one */
			if (c == '#' || c == '~')
				return argv;
			if (k == cmd && (assign = assignment(p)) == false && strchr(p, '=') &&
			    strchr(p, '=') < p + strcspn(p, " \t"))
				return argv;
			words[k++] = buf + n;
			word = true;
		}
		if (c == '\'' || c == '"') {
			const char *end = strchr(p + 1, c);
			if (!end || (c == '"' && strpbrk(p + 1, "$`\\!") && strpbrk(p + 1, "$`\\!") < end) ||
			    n + (size_t)(end - p) + 2 >= cap)
				return argv;
			memcpy(buf + n, p + 1, (size_t)(end - p - 1));
			n += (size_t)(end - p - 1);
			p = end;
			continue;
		}
		if (strchr(";|&<>()$`\\{}!\n", c))
			return argv;
		buf[n++] = c;
	}
	words[k] = NULL;
	return k > cmd ? words + cmd : argv;
}

/*
 * Session shells. A harness that keeps one shell open and writes each tool
 * call to its stdin (SWE-agent, OpenHands, pexpect, asyncio's
 * create_subprocess_shell("/bin/bash")) makes that shell a starter too:
 * every child it starts is a transaction of its own, as the root's are.
 * A shell is a session shell when it reads its commands from stdin or a
 * terminal (no -c string, no script operand) and it is the root's tool
 * call itself: its parent is the root, or a shell the root started with
 * -c and a string that is just this shell's command line (sh -c /bin/bash,
 * when that sh did not exec it in place).
 */

/* Is ARGV0 (a program's first word) tmux or screen, a client or the
 * server (tmux forks its server from the client that started it, argv and
 * all)? guard.c asks it of a client's connect. */
HIDDEN bool txn_multiplexer(const char *argv0)
{
	const char *b = argv0 ? strrchr(argv0, '/') : NULL;

	b = b ? b + 1 : argv0;
	return b && (!strcmp(b, "tmux") || !strcmp(b, "screen") || !strcmp(b, "SCREEN"));
}

/* ARGV starts a shell that reads its commands from stdin or a terminal:
 * bash, /bin/bash, bash -i, bash -s ARGS, bash --norc -l, busybox sh. */
static bool stdin_shell(char *const argv[])
{
	const char *b = argv && argv[0] ? strrchr(argv[0], '/') : NULL;
	size_t i = 1;
	bool s = false;

	if (!argv || !argv[0])
		return false;
	b = b ? b + 1 : argv[0];
	if (*b == '-')          /* a login shell's argv[0]: -bash */
		b++;
	if (!strcmp(b, "busybox")) {
		if (!argv[1] || (strcmp(argv[1], "sh") && strcmp(argv[1], "ash")))
			return false;
		i = 2;
	} else if (!is_shell(b)) {
		return false;
	}
	for (; argv[i]; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--") || !strcmp(a, "-")) {
			i++;
			break;
		}
		if (a[0] == '-' && a[1] == '-') {       /* bash's long options */
			if ((!strcmp(a, "--rcfile") || !strcmp(a, "--init-file")) && !argv[++i])
				return false;
			continue;
		}
		if ((a[0] != '-' && a[0] != '+') || !a[1])
			break;
		for (const char *p = a + 1; *p; p++)
			if (*p == 'c')
				return false;
			else if (*p == 's')
				s = true;       /* the words after it are arguments */
			else if ((*p == 'o' || *p == 'O') && !argv[++i])
				return false;
	}
	return s || !argv[i];
}

/* PID's parent, from /proc (0 when unknown). */
static pid_t parent_of(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd, ppid = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');          /* the name may hold anything */
	if (!p || sscanf(p + 1, " %*c %d", &ppid) != 1)
		return 0;
	return (pid_t)ppid;
}

/* PID's command line, its words pointing into STORE. */
static bool cmdline_of(pid_t pid, char *store, size_t cap, char *words[], size_t nwords)
{
	char path[64];
	size_t k = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, store, cap - 1);
	close(fd);
	if (n <= 0 || (size_t)n == cap - 1)
		return false;           /* none, or more than we read */
	store[n] = 0;
	for (char *w = store; w < store + n && k + 1 < nwords; w += strlen(w) + 1)
		words[k++] = w;
	words[k] = NULL;
	return true;
}

/* Is this process a session shell? Decided once, at its first need (its
 * first child, or its first record after one). */
static bool detect_shell(void)
{
	const char *r = shim_getenv("FTSBX_ROOT");
	pid_t root = r ? (pid_t)strtol(r, NULL, 10) : 0, pp;
	char store[SLOT_ARGV], *words[64], inner[SLOT_ARGV], *iwords[64];
	char *const *cmd;

	if (!shim.txn || root <= 0 || !stdin_shell(shim.argv))
		return false;
	pp = getppid();
	/* the root, or a fork of it that has not exec'd: the agent itself as
	 * a worker (os.fork), or a root shell's coproc or subshell */
	if (pp == root || guard_fork_of(pp, root))
		return true;
	if (!cmdline_of(pp, store, sizeof(store), words, 64))
		return false;
	/* a window of a terminal multiplexer the session started (a harness
	 * that types each command into a tmux pane: OpenHands' libtmux): its
	 * server runs the pane's shell */
	if (txn_multiplexer(words[0]))
		return true;
	if (parent_of(pp) != root)
		return false;
	cmd = command_of(words, inner, sizeof(inner), iwords, 64);
	return cmd != words && stdin_shell(cmd);
}

/* Does this process start transactions: the root, or a session shell? */
static bool starter(void)
{
	int s = __atomic_load_n(&shell, __ATOMIC_ACQUIRE);

	/* The agent's machinery (a multiprocessing worker, spawned or from
	 * the forkserver) runs the agent's code too: a tool call it starts is
	 * one as the root's are, and its own writes form transactions of
	 * their own as the root's do (in transaction 0, no rewind of a tool
	 * call that it wrote after could name what to rewind first). */
	if (shim.root || shim.machinery)
		return true;
	/* A fork of the root that has not exec'd is the agent itself, as a
	 * worker (os.fork, multiprocessing's fork start method, a subshell of a
	 * root shell): what it starts are tool calls of their own, as the
	 * root's are. The transaction the root gave it is the root's to end. */
	if (fork_key && !vf.child) {
		if (s <= 0) {
			shell_inherited = true;
			__atomic_store_n(&shell, 1, __ATOMIC_RELEASE);
		}
		return true;
	}
	if (__builtin_expect(s == 0, 0)) {
		bool busy = shim_busy;

		if (!shim.argv || vf.child)
			return false;   /* before the constructor; a vfork child is not one */
		shim_busy = true;       /* our /proc reads pass the hooks */
		s = detect_shell() && shim_session() ? 1 : -1;
		shim_busy = busy;
		/* A session shell's own writes (echo x > f) are transactions of
		 * their own from the first on: the tool call the root gave it
		 * is the shell's whole life, and ends failed when the harness
		 * closes it by a signal or after a failed builtin, which would
		 * rewind them. */
		if (s > 0) {
			shim.txn = 0;
			shim.txn_fresh = false;
			shell_inherited = false;
		}
		__atomic_store_n(&shell, s, __ATOMIC_RELEASE);
	}
	return s > 0;
}

/* Tool call KEY ended with STATUS (PID: its process, 0 for system()):
 * its txn-end record, and its rewind when it failed and the policy says so
 * for its command line. */
static void ended(uint32_t key, pid_t pid, int status)
{
	char store[SLOT_ARGV], *words[256], inner[SLOT_ARGV], *iwords[256];
	uint32_t t = key;
	bool known = slot_get(key, &t, words, sizeof(words) / sizeof(words[0]), store);

	bool busy = shim_busy, refused;

	if (!t)
		return;
	shim_busy = true;
	write_txn_record(J_TXN_END, t, pid, status, true, 0);
	jcap_txn_ended(&shim.s, t);
	refused = __atomic_load_n((uint32_t *)(void *)((char *)shim.s.ctr + JL_REFUSED_AT) + t % JL_REFUSED_SLOTS,
				  __ATOMIC_ACQUIRE) == t;
	if (guard_rewind_counts(status, refused, known ? command_of(words, inner, sizeof(inner), iwords, 256) : NULL))
		rewind_txn(t, status, refused);
	shim_busy = busy;
}

/* A starter reaped PID with STATUS. */
static void reaped(pid_t pid, int status)
{
	uint32_t key;

	if (pid <= 0 || (!WIFEXITED(status) && !WIFSIGNALED(status)) || !starter())
		return;
	if (__atomic_load_n(&txn_pending, __ATOMIC_ACQUIRE))
		txn_reap_pending();
	key = child_take(pid);
	if (!key || was_released(key))
		return;
	ended(key, pid, status);
}

/*
 * A wait that returns inside the shim's own code on this thread is a signal
 * handler's (bash reaps from its SIGCHLD handler): the journal may be
 * mid-write under a lock here, so the reaping is kept (pid and status, one
 * word each) and ended when the interrupted hook leaves, or at the next
 * start or wait, whichever comes first.
 */
#define NPENDING 64
HIDDEN int txn_pending;
static uint64_t pending[NPENDING];

static void defer(pid_t pid, int status)
{
	uint64_t v = (uint64_t)(uint32_t)pid << 32 | (uint32_t)status;

	if (pid <= 0 || (!WIFEXITED(status) && !WIFSIGNALED(status)))
		return;
	for (int i = 0; i < NPENDING; i++) {
		uint64_t none = 0;
		if (__atomic_compare_exchange_n(&pending[i], &none, v, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			__atomic_add_fetch(&txn_pending, 1, __ATOMIC_ACQ_REL);
			return;
		}
	}
}

HIDDEN void txn_reap_pending(void)
{
	int e = errno;

	for (int i = 0; i < NPENDING; i++) {
		uint64_t v = __atomic_exchange_n(&pending[i], 0, __ATOMIC_ACQ_REL);
		if (v) {
			__atomic_sub_fetch(&txn_pending, 1, __ATOMIC_ACQ_REL);
			reaped((pid_t)(v >> 32), (int)(uint32_t)v);
		}
	}
	errno = e;
}

HIDDEN void txn_system_done(uint32_t key, int status)
{
	if (!key || status == -1 || !starter())
		return;
	ended(key, 0, status);
}

#define REAP(call, pidexpr, statusp) do {                        \
	int e_, st_ = 0;                                         \
	pid_t r_;                                                \
	shim_ensure();                                           \
	if (!shim_ready || !starter())                           \
		return call;                                     \
	int *sp_ = (statusp) ? (statusp) : &st_;                 \
	r_ = (pidexpr);                                          \
	if (r_ > 0) {                                            \
		e_ = errno;                                      \
		if (shim_busy)                                   \
			defer(r_, *sp_);                         \
		else                                             \
			reaped(r_, *sp_);                        \
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
	if (r == 0 && shim_ready && starter() && info && info->si_pid > 0 && !(o & WNOWAIT) &&
	    (info->si_code == CLD_EXITED || info->si_code == CLD_KILLED || info->si_code == CLD_DUMPED)) {
		int e = errno;
		int status = info->si_code == CLD_EXITED ? (info->si_status & 0xff) << 8 : info->si_status & 0x7f;
		if (shim_busy)
			defer(info->si_pid, status);
		else
			reaped(info->si_pid, status);
		errno = e;
	}
	return r;
}
