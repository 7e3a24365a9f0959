/*
 * state.c - the shim's process state: the constructor, the lookup of the
 * real functions (at first use), the session and transaction taken from the
 * environment (FTSBX_JOURNAL, FTSBX_TXN; the first process of a session
 * creates both and exports them), this process's segment opened at its
 * first record (a forked child gets its own), and refusal reports.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "shim.h"

#define HOOK(ret, name, params, args, fail, pre) HIDDEN ret(*real_##name) params REAL_DATA;
#include "hooks.def"
#include "hooks-extra.def"
#undef HOOK

/* The library is linked without the C runtime's start files (GNUmakefile:
 * no _init or _fini, whose page every process would fault in at start or
 * exit; the constructor and destructor are in .init_array and .fini_array).
 * Their one definition the library still needs is the handle that
 * pthread_atfork registers its handler under. */
HIDDEN void *__dso_handle = &__dso_handle;

HIDDEN __thread bool shim_busy __attribute__((tls_model("initial-exec")));
HIDDEN bool shim_ready HOT_DATA;
HIDDEN struct shim_state shim HOT_DATA = { .journal = shim.journal_in, .self = shim.self_in };
static char journal_long[PATH_MAX], self_long[PATH_MAX];

/* Point TO (shim.journal or shim.self) at a buffer that holds N bytes. */
STARTUP_TEXT static char *room(char **to, char *longer, size_t n)
{
	if (n > SHIM_SHORT_PATH)
		*to = longer;
	return *to;
}
static pthread_mutex_t seg_lock HOT_DATA = PTHREAD_MUTEX_INITIALIZER;   /* a fork child resets it */
HIDDEN int spawn_opens_lock_word HOT_DATA;     /* exec.c's; a fork child resets it too */

HIDDEN void *shim_dlsym(const char *name)
{
	void *p = NULL;

	/* dlsym(RTLD_NEXT) may hand back the oldest version of a versioned
	 * symbol (glibc bug 14932): ask for the current posix_spawn. */
	if (!strncmp(name, "posix_spawn", 11))
		p = dlvsym(RTLD_NEXT, name, "GLIBC_2.15");
	if (!p)
		p = dlsym(RTLD_NEXT, name);
	if (!p) {
		static const char msg[] = "ftsbx: the C library lacks a function the program calls\n";
		if (write(2, msg, sizeof(msg) - 1) < 0)
			_exit(127);
		_exit(127);
	}
	return p;
}

extern char **environ;

/* getenv and setenv of our own: a host program may define its own (bash
 * does, and its versions know nothing before its main runs), and the
 * shim's run before that. Reads scan environ; a set builds a new environ
 * array (only in the constructor, where allocation is fine) holding a copy
 * of NAME=VALUE. */
STARTUP_TEXT HIDDEN char *shim_getenv(const char *name)
{
	/* byte by byte, no libc: most variables differ at their first byte,
	 * and the constructor runs this before anything else */
	for (char **e = environ; e && *e; e++) {
		const char *v = *e, *n = name;
		while (*n && *v == *n) {
			v++;
			n++;
		}
		if (!*n && *v == '=')
			return (char *)v + 1;
	}
	return NULL;
}

/* Put the string VAR ("NAME=VALUE", which must stay valid) into environ. */
HIDDEN void shim_putenv(char *var)
{
	size_t n = strcspn(var, "="), count = 0, k = 0;
	char **arr;

	for (char **e = environ; e && *e; e++)
		count++;
	arr = malloc((count + 2) * sizeof(*arr));
	if (!arr)
		return;
	for (char **e = environ; e && *e; e++)
		if (strncmp(*e, var, n) || (*e)[n] != '=')
			arr[k++] = *e;
	arr[k++] = var;
	arr[k] = NULL;
	environ = arr;  /* the old array stays: others may hold it */
}

HIDDEN void shim_setenv(const char *name, const char *value)
{
	char *var = malloc(strlen(name) + strlen(value) + 2);

	if (!var)
		return;
	sprintf(var, "%s=%s", name, value);
	shim_putenv(var);
}

/* Write a whole message to stderr with the real write (no stdio). */
static void say_raw(const char *s)
{
	size_t n = strlen(s);

	while (n) {
		ssize_t w = write(2, s, n);
		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

HIDDEN void shim_say(const char *what, const char *path, int err, const char *why)
{
	char line[PATH_MAX + 512];

	if (!path)
		snprintf(line, sizeof(line), "ftsbx: %s: %s%s%s%s\n", what, strerror(err), why ? " (" : "",
			 why ? why : "", why ? ")" : "");
	else if (why)
		snprintf(line, sizeof(line), "ftsbx: %s '%s': %s (%s)\n", what, path ? path : "",
			 strerror(err), why);
	else
		snprintf(line, sizeof(line), "ftsbx: %s '%s': %s\n", what, path ? path : "", strerror(err));
	say_raw(line);
}

/* The inodes of the session's directories, for the off-limits test, taken
 * at its first need: a shell that opens the session only for its
 * children's exec records never asks. log/ and objects/ are opened at
 * their own first need (journal.h), so each is taken once it is open. */
static void note_journal_dirs(void)
{
	__atomic_store_n(&shim.jdirs_known, 0, __ATOMIC_RELEASE);
}

HIDDEN bool shim_journal_dir(const struct stat *st)
{
	unsigned known = __atomic_load_n(&shim.jdirs_known, __ATOMIC_ACQUIRE);

	if (known != 7) {
		const int fds[3] = { shim.s.dirfd, shim.s.logfd, shim.s.objfd };
		struct stat d;
		for (int i = 0; i < 3; i++)
			if (!(known & 1u << i) && fds[i] >= 0 && fstat(fds[i], &d) == 0) {
				shim.jdirs[i].dev = d.st_dev;
				shim.jdirs[i].ino = d.st_ino;
				known |= 1u << i;
			}
		__atomic_store_n(&shim.jdirs_known, known, __ATOMIC_RELEASE);
	}
	for (int i = 0; i < 3; i++)
		if ((known & 1u << i) && st->st_dev == shim.jdirs[i].dev && st->st_ino == shim.jdirs[i].ino)
			return true;
	return false;
}

/* Open the session (under seg_lock). The flags (JS_DURABLE) come from the
 * policy, set by guard_init before the open, which would clear them. */
static int open_session(void)
{
	unsigned flags = shim.s.flags;
	int err = jsession_open(&shim.s, shim.journal, &(struct jsession_info){ 0 });

	shim.s.flags |= flags;
	if (!err) {
		note_journal_dirs();
		shim.session_open = true;
	}
	return err;
}

/*
 * `ftsbx run` creates the session while the command starts (tools/run.c) and
 * hands the root the read end of a pipe (FTSBX_SESSION_READY=FD:INODE) that it
 * closes once the session is there. The root compiles its policy meanwhile
 * and waits only then, at its first shim_session() (guard.c's, before the
 * policy is published). Whether ftsbx managed or not, the root then opens
 * the session, or creates it as any root does: the wait saves time, it
 * decides nothing.
 */
static int ready_fd = -1;

/* Take the descriptor out of the environment: nothing below the root sees it. */
STARTUP_TEXT static void take_ready_fd(void)
{
	static const char name[] = "FTSBX_SESSION_READY=";
	const char *v = shim_getenv(STARTUP_STR("FTSBX_SESSION_READY"));
	struct stat st;
	size_t k = 0;
	char **e;

	if (!v)
		return;
	/* FD:INODE: a descriptor inherited past a program without the shim
	 * (a static root) may be another pipe by now */
	char *colon;
	int fd = (int)strtol(v, &colon, 10);
	unsigned long long ino = *colon == ':' ? strtoull(colon + 1, NULL, 10) : 0;
	if (fd > 2 && fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && st.st_ino == ino)
		ready_fd = fd;
	for (e = environ; e[k]; k++)
		;
	for (size_t i = 0; i < k; i++)
		if (!strncmp(e[i], name, sizeof(name) - 1)) {
			memmove(e + i, e + i + 1, (k - i) * sizeof(*e));   /* the NULL too */
			break;
		}
}

/* The new root's session: opened, or created (and DIR with it); a root
 * without one cannot run. */
static void open_root_session(void)
{
	static char *argv[] = { (char *)"(ftsbx session)", NULL };
	static const struct jsession_info info = { .argv = argv };
	unsigned flags = shim.s.flags;
	char c;
	int err;

	if (ready_fd >= 0) {
		ssize_t n;
		while ((n = read(ready_fd, &c, 1)) < 0 && errno == EINTR)
			;
		/* 'P': the policy is in the session for this root (tools/run.c) */
		shim.policy_given = n == 1 && c == 'P';
		close(ready_fd);
		ready_fd = -1;
	}
	err = jsession_open(&shim.s, shim.journal, &info);
	shim.s.flags |= flags;
	if (err) {
		shim_say("cannot open the journal", shim.journal, -err, "nothing may run unjournaled");
		_exit(126);
	}
	shim.session_open = true;
	note_journal_dirs();
}

/* Open the session on first use; open this process's segment on its first
 * record (again in a forked child). Called inside a hook. */
/* The session, opened at the first need (not the segment). */
HIDDEN bool shim_session(void)
{
	if (!shim.session_open && shim.created)
		open_root_session();    /* in the constructor: one thread */
	if (shim.session_open)
		return true;
	shim_atfork();
	pthread_mutex_lock(&seg_lock);
	if (!shim.session_open)
		open_session();
	pthread_mutex_unlock(&seg_lock);
	return shim.session_open;
}

/* This process's pid, kept by the atfork child handler instead of a
 * getpid() system call per change. */
static pid_t my_pid HOT_DATA;   /* a fork child writes it */

static void atfork_child(void);

/*
 * The atfork child handler (a fork child gets its own pid and an unlocked
 * seg_lock) is registered when there is something for it to reset: before
 * my_pid is first kept and seg_lock first taken, and before every fork the
 * fork hook makes. Most processes (readers: cat, grep, a compiler's cc1)
 * never journal anything, and the registration's first call cost every one
 * of them about 5 us (a lazy binding, a page of libc's code and one of its
 * data). A fork inside the C library that no hook sees (daemon()) in a
 * process that kept nothing needs no reset.
 */
HIDDEN void shim_atfork(void)
{
	static bool done HOT_DATA;

	if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE) && !__atomic_exchange_n(&done, true, __ATOMIC_ACQ_REL))
		pthread_atfork(NULL, NULL, atfork_child);
}

HIDDEN pid_t shim_pid(void)
{
	if (!my_pid)
		shim_atfork();
	return my_pid ? my_pid : (my_pid = getpid());
}

HIDDEN int shim_segment(struct jseg **g)
{
	pid_t pid = shim_pid();
	int err = 0;

	guard_ready();          /* the policy says how durable the records are */
	if (!shim.session_open && shim.created)
		open_root_session();
	pthread_mutex_lock(&seg_lock);
	if (!shim.session_open)
		err = open_session();
	if (!err && (!shim.seg_open || shim.seg_pid != pid)) {
		if (shim.seg_open && shim.seg_pid != pid)
			jseg_close(&shim.g);    /* the parent's, inherited through fork */
		shim.seg_open = false;
		err = jseg_open(&shim.g, &shim.s, NULL);
		if (!err) {
			shim.seg_open = true;
			shim.seg_pid = pid;
		}
	}
	pthread_mutex_unlock(&seg_lock);
	*g = &shim.g;
	return err;
}

/* Before an exec (the new program knows nothing of it) and at exit: give
 * a shared segment back (journal.h); the next record takes one again. Not
 * in a vfork child, which writes its parent's. */
HIDDEN void shim_segment_release(void)
{
	if (!shim.seg_open)
		return;
	pthread_mutex_lock(&seg_lock);
	if (shim.seg_open && shim.seg_pid == shim_pid() && shim.g.lane >= 0) {
		pthread_mutex_lock(&shim.g.lock);       /* no other thread mid-record */
		jseg_close(&shim.g);
		pthread_mutex_unlock(&shim.g.lock);
		shim.seg_open = false;
	}
	pthread_mutex_unlock(&seg_lock);
}

__attribute__((destructor)) static void shim_dtor(void)
{
	/* (seg_open first: a process that wrote nothing runs no code beyond
	 * the start of the text at its exit either) */
	if (fetched_self > 0 && !txn_vfork_child())    /* (no system call for others) */
		fetched_exit();
	if (shim_ready && shim.seg_open && !txn_vfork_child())
		shim_segment_release();
}

/* LOUD: said on stderr, and counted against the transaction (a refusal the
 * root's reaping reports), else only recorded. */
static int refuse_record(const char *op, const char *path, const char *path2, char *const *argv,
			 const char *rule, int err, bool loud)
{
	uint8_t buf[8192];
	struct jbuild b;
	struct jseg *g;

	if (loud)
		shim_say("refused", path, err, rule);
	if (shim_segment(&g))
		return err;
	jb_init(&b, buf, sizeof(buf), J_REFUSE, 0, shim_txn());
	jb_str(&b, F_OP, op);
	jb_str(&b, F_RULE, rule);
	jb_u32(&b, F_ERRNO, (uint32_t)err);
	jb_str(&b, F_PATH, path);
	jb_str(&b, F_PATH2, path2);
	jb_argv(&b, F_ARGV, argv);
	jseg_append(g, &b, NULL);
	if (loud && shim_txn())         /* for the root's reaping: guard_rewind_counts */
		__atomic_store_n((uint32_t *)(void *)((char *)shim.s.ctr + JL_REFUSED_AT) +
				 shim_txn() % JL_REFUSED_SLOTS, shim_txn(), __ATOMIC_RELEASE);
	return err;
}

HIDDEN int shim_refuse(const char *op, const char *path, const char *path2, char *const *argv,
		       const char *rule, int err)
{
	return refuse_record(op, path, path2, argv, rule, err, true);
}

HIDDEN int shim_refuse_quietly(const char *op, const char *path, const char *rule, int err)
{
	return refuse_record(op, path, NULL, NULL, rule, err, false);
}

static void atfork_child(void)
{
	/* as pthread_mutex_init(&seg_lock, NULL) does, without a call into
	 * a page of libc's code the child has not mapped */
	seg_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	spawn_opens_lock_word = 0;      /* another thread held it at the fork */
	mapped_lock_word = 0;
	range_lock_word = 0;
	park_lock_word = 0;
	my_pid = getpid();
	jseg_owner_forked(my_pid);
}


/*
 * The constructor runs in every process the session starts. Each libc
 * function the shim calls for the first time in a process costs a lazy
 * binding of its PLT entry (about 700 instructions, more than most of
 * these calls): the constructor's path keeps to a few (strlen, memcpy,
 * open, fstat, mmap, close, pthread_atfork) and does its small string work
 * in loops of its own (same_bytes here, exec.c's env_capture).
 */

/* S[0..N) == T[0..N)? */
STARTUP_TEXT HIDDEN bool same_bytes(const char *s, const char *t, size_t n)
{
	while (n && *s == *t) {
		s++;
		t++;
		n--;
	}
	return !n;
}

/* The decimal number S, if it is one (at most 9 digits), else strtoul's. */
STARTUP_TEXT static unsigned long dec(const char *s)
{
	unsigned long v = 0;
	int i = 0;

	for (; i < 10 && s[i] >= '0' && s[i] <= '9'; i++)
		v = v * 10 + (unsigned long)(s[i] - '0');
	return i && i < 10 && !s[i] ? v : strtoul(s, NULL, 10);
}

/* Is P an absolute path that path_abs leaves as it is (no empty, "." or
 * ".." component, no trailing slash, well within PATH_MAX)? */
STARTUP_TEXT static bool normal_abs(const char *p)
{
	size_t i = 0;

	if (p[0] != '/')
		return false;
	if (!p[1])
		return true;
	for (; p[i]; i++)
		if (p[i] == '/' && (p[i + 1] == '/' || !p[i + 1] ||
				    (p[i + 1] == '.' && (p[i + 2] == '/' || !p[i + 2] ||
							 (p[i + 2] == '.' && (p[i + 3] == '/' || !p[i + 3]))))))
			return false;
	return i < PATH_MAX - 2;
}

/* This library's path: the LD_PRELOAD entry that names it, else dladdr. */
STARTUP_TEXT static void self_path(void)
{
	const char *pre = shim_getenv(STARTUP_STR("LD_PRELOAD"));
	Dl_info info;

	for (const char *s = pre; s && *s;) {
		size_t n = 0;
		while (s[n] && s[n] != ' ' && s[n] != ':')
			n++;
		if (n >= 11 && n < PATH_MAX && same_bytes(s + n - 11, STARTUP_STR("libftsbx.so"), 11)) {
			room(&shim.self, self_long, n + 1);
			for (size_t i = 0; i < n; i++)
				shim.self[i] = s[i];
			shim.self[n] = 0;
			if (shim.self[0] == '/')
				return;
		}
		s += n + (s[n] != 0);
	}
	if (dladdr((void *)self_path, &info) && info.dli_fname)
		snprintf(room(&shim.self, self_long, strlen(info.dli_fname) + 1), PATH_MAX, "%s", info.dli_fname);
}

/* The first process of a session (no FTSBX_TXN yet) creates the session
 * and its transaction and exports both to everything it starts. */
STARTUP_TEXT static void start_session(void)
{
	const char *j = shim_getenv(STARTUP_STR("FTSBX_JOURNAL")), *t = shim_getenv(STARTUP_STR("FTSBX_TXN"));
	char buf[PATH_MAX];

	take_ready_fd();

	if (!j || !*j) {
		jsession_default_dir(buf, sizeof(buf), shim_getenv("XDG_STATE_HOME"), shim_getenv("HOME"));
		shim_setenv("FTSBX_JOURNAL", buf);
		j = shim_getenv("FTSBX_JOURNAL");
	}
	if (normal_abs(j))      /* as the root exports it: path_abs would copy it */
		memcpy(room(&shim.journal, journal_long, strlen(j) + 1), j, strlen(j) + 1);
	else if (path_abs(room(&shim.journal, journal_long, PATH_MAX), AT_FDCWD, j)) {
		say_raw("ftsbx: FTSBX_JOURNAL is too long\n");
		_exit(126);
	}
	shim.journal_len = strlen(shim.journal);
	if (!same_bytes(j, shim.journal, shim.journal_len + 1))
		shim_setenv("FTSBX_JOURNAL", shim.journal);
	if (t && *t) {
		const char *root = shim_getenv(STARTUP_STR("FTSBX_ROOT"));
		shim.txn = (uint32_t)dec(t);
		/* the root itself, after an exec (bash -c 'exec agent'): its
		 * programs get FTSBX_TXN=0 (txn.c), so a process with another
		 * transaction asks for no getpid(). In transaction 0 too: a
		 * process a starter started as its machinery. A multiprocessing
		 * worker (spawn, forkserver) runs the agent's code, and what it
		 * starts are tool calls as well (txn.c); other machinery (a
		 * language server named in FTSBX_NOT_TOOL_CALLS) keeps its
		 * children in transaction 0. */
		if (!shim.txn) {
			shim.root = root && (pid_t)strtol(root, NULL, 10) == getpid();
			for (char **a = shim.argv; !shim.root && a && *a && !shim.machinery; a++)
				shim.machinery = strstr(*a, "multiprocessing") != NULL;
		}
		if (shim.root || shim.machinery) {
			if (!jsession_open(&shim.s, shim.journal, NULL)) {
				shim.session_open = true;
				note_journal_dirs();
			}
		}
		if (ready_fd >= 0)      /* meant for a new root only */
			close(ready_fd);
		ready_fd = -1;
		return;
	}
	shim.root = true;
	shim.created = true;
	shim.txn = 0;           /* the root's own transaction starts at its first change */
	snprintf(buf, sizeof(buf), "%d", (int)getpid());
	shim_setenv("FTSBX_ROOT", buf);
	shim_setenv("FTSBX_TXN", "0");
	if (ready_fd < 0)
		open_root_session();
	/* else: guard_init opens it, once ftsbx run has made it and, mostly,
	 * compiled the policy into it */
}

/* Whether the path the exec was given (AT_EXECFN) is one of ARGV[1..]:
 * the kernel ran a script's interpreter (or binfmt_misc a handler) and
 * passed it the script's path so, at any depth of #! scripts. Taken here,
 * before the program can reorder its argv (getopt) or write over it;
 * fetched.c then asks the kernel's own name of the program. */
static bool execfn_in_argv(int argc, char **argv)
{
	const char *fn = (const char *)getauxval(AT_EXECFN);
	size_t n;

	if (!argv || !fn)
		return true;
	n = strlen(fn) + 1;
	for (int i = 1; i < argc && argv[i]; i++)
		if (same_bytes(argv[i], fn, n))
			return true;
	return false;
}

/* glibc passes argc, argv and envp to the constructors of shared objects. */
__attribute__((constructor)) static void shim_ctor(int argc, char **argv, char **envp)
{
	(void)envp;
	shim.argv = argv;
	shim.execfn_in_argv = execfn_in_argv(argc, argv);
	shim_init();
}

STARTUP_TEXT HIDDEN void shim_init(void)
{
	static bool started HOT_DATA;

	if (shim_ready || __atomic_exchange_n(&started, true, __ATOMIC_ACQ_REL))
		return;
	shim_busy = true;
	self_path();
	start_session();
	guard_init(shim.created);
	if (shim.created)
		shim_session();
	/* A durable session (the policy says so) is on disk before the first
	 * change; creation itself writes no fsync. */
	if (shim.created && (shim.s.flags & JS_DURABLE)) {
		int err = jsession_sync(&shim.s);
		if (err) {
			shim_say("cannot sync the journal", shim.journal, -err, "nothing may run unjournaled");
			_exit(126);
		}
	}
	env_capture();
	shim_busy = false;
	shim_ready = true;
}
