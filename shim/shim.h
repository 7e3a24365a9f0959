/*
 * shim.h - what the files of libftsbx.so share: the real_* pointers (one
 * per row of hooks.def and hooks-extra.def), the hook context that guards
 * against re-entry and keeps errno, and the pre-change checks.
 *
 * Every hook has the same shape: hook_enter (re-entered or not ready:
 * straight to the real function), a pre-change check that journals the
 * undo record or refuses, the real call, hook_leave. Inside a hook the
 * thread is marked busy, so the journal library's own libc calls (open,
 * linkat, write ...) pass through the hooks untouched.
 */
#ifndef FTSBX_SHIM_H
#define FTSBX_SHIM_H

#include <aio.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <limits.h>
#include <mqueue.h>
#include <pty.h>
#include <sched.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/uio.h>
#include <signal.h>
#include <sys/pidfd.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <sys/types.h>
#include <utime.h>
#include "../journal/journal.h"

/* Straight to the kernel (x86-64), for the few calls of the session's
 * mapping at start and of an exec in a shell's fork child: through libc,
 * a wrapper's first call in a process costs a page of libc's code (a fork
 * child maps none of it yet) and often a lazy binding, and some names are
 * the shim's own hooks. The result, or -errno. */
#include <sys/syscall.h>
#if defined(__x86_64__)
static inline long shim_raw6(long nr, long a, long b, long c, long d, long e, long f)
{
	register long r10 __asm__("r10") = d, r8 __asm__("r8") = e, r9 __asm__("r9") = f;
	long r;

	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return r;
}
#define SHIM_RAW 1
#endif

#define HIDDEN __attribute__((visibility("hidden")))
#define EXPORT __attribute__((visibility("default")))
/* The code of a read-only open and its close, kept together in .text.hot
 * (after the constructor's .text.startup): a few pages, not one per file. */
#define HOT __attribute__((hot))
/* What every process writes at start goes with the initialised data, on
 * the page the loader writes anyway (its relocations of the .got.plt, the
 * zeroing of the page's end): each page a process first writes costs it a
 * fault, and on a machine that virtualises page tables a fault costs as
 * much as a few dozen system calls. The real functions' pointers
 * (REAL_DATA, zero at start) follow in .bss, its first bytes, most of them
 * on that page too (layout.ld; test_shim_layout.py checks where they are).
 * The library is bound lazily (GNUmakefile: -z lazy), and its .got.plt
 * shares that page. */
#define HOT_DATA __attribute__((section(".data.ftsbx_hot")))
#define REAL_DATA __attribute__((section(".bss.ftsbx_real")))
/* The constructor's path (state.c, exec.c, guard.c), at the start of the
 * text: in the pages the loader reads anyway. */
#define STARTUP_TEXT __attribute__((section(".text.startup")))
/* A string the constructor reads, beside its code rather than in .rodata,
 * whose page a process that runs nothing else would fault in for it. */
#define STARTUP_RODATA __attribute__((section(".text.startup.str")))
#define STARTUP_STR(s) ({                                                        \
	static const char s_[] STARTUP_RODATA = s;                                \
	s_; })

#define HOOK(ret, name, params, args, fail, pre) extern HIDDEN ret(*real_##name) params;
#include "hooks.def"
#include "hooks-extra.def"
#undef HOOK

/* The real function, looked up at its first use: a process pays for the
 * symbols it calls, not for the whole table (resolving all of them at start
 * doubled the cost of an exec of /bin/true). Two threads racing here store
 * the same pointer. */
HIDDEN void *shim_dlsym(const char *name);
#define REAL(name) (*({                                                          \
	if (__builtin_expect(real_##name == NULL, 0))                             \
		real_##name = (__typeof__(real_##name))shim_dlsym(#name);         \
	&real_##name; }))

struct hook_ctx {
	int saved_errno;
};

/* The per-thread guard: true while the thread runs shim code. */
extern HIDDEN __thread bool shim_busy __attribute__((tls_model("initial-exec")));
extern HIDDEN bool shim_ready;
HIDDEN void shim_init(void);

/* Another library's constructor may call a hook before our constructor
 * ran (libselinux's calls fopen): initialise on that first call. */
static inline void shim_ensure(void)
{
	if (__builtin_expect(!shim_ready, 0))
		shim_init();
}

static inline bool hook_enter(struct hook_ctx *c)
{
	shim_ensure();
	if (!shim_ready || shim_busy)
		return false;
	shim_busy = true;
	c->saved_errno = errno;
	return true;
}

/* txn.c: tool calls a starter reaped inside a hook (a SIGCHLD handler's
 * wait, as bash's): ended when the hook leaves. */
extern HIDDEN int txn_pending;
HIDDEN void txn_reap_pending(void);

/* Before the real call: the caller must see libc's errno, not ours. */
static inline void hook_leave(struct hook_ctx *c)
{
	if (__builtin_expect(txn_pending, 0))
		txn_reap_pending();
	errno = c->saved_errno;
	shim_busy = false;
}

/* Refuse: errno = ERR, one line on stderr (written by the pre-check). */
static inline void hook_refuse(struct hook_ctx *c, int err)
{
	(void)c;
	if (__builtin_expect(txn_pending, 0))
		txn_reap_pending();
	shim_busy = false;
	errno = err;
}

/* A lock of a table of this process's, held for a few loads and stores
 * with signals blocked (a handler's call must not wait for the code it
 * interrupted); a fork child frees its word (state.c: another thread may
 * have held it at the fork). */
static inline void shim_spin(int *word)
{
	while (__atomic_exchange_n(word, 1, __ATOMIC_ACQUIRE))
		sched_yield();
}

static inline void shim_unspin(int *word)
{
	__atomic_store_n(word, 0, __ATOMIC_RELEASE);
}

/* The same where a signal handler's call may want it: signals blocked. */
static inline void shim_spin_lock(int *word, sigset_t *old)
{
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, old);
	shim_spin(word);
}

static inline void shim_spin_unlock(int *word, const sigset_t *old)
{
	shim_unspin(word);
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* Pre-change checks: 0 (go on) or the errno that refuses the call, or
 * PRE_DONE where the check made the change itself (pre_remove: an unlink,
 * an rmdir the journal makes): the hook returns success without the real
 * call (never an errno's value). */
#define PRE_DONE (-1)
HIDDEN int pre_open(int dirfd, const char *path, int flags);
/* The same, leaving the absolute path in ABS ("" when none was made). */
HIDDEN int pre_open_abs(int dirfd, const char *path, int flags, char abs[PATH_MAX], bool *later);
HIDDEN int pre_fopen(int dirfd, const char *path, const char *mode);
HIDDEN int pre_freopen(const char *path, const char *mode, FILE *f);
/* pre_remove's flags: AT_REMOVEDIR, 0 (unlink) or REMOVE_ANY (remove()). */
#define REMOVE_ANY 0x40000000
HIDDEN int pre_remove(int dirfd, const char *path, int flags);
HIDDEN int pre_rename(int od, const char *o, int nd, const char *n, unsigned flags);
HIDDEN int pre_create(int dirfd, const char *path);
HIDDEN int pre_mknod(int dirfd, const char *path, mode_t mode);     /* pre_create, no device nodes */
HIDDEN int pre_mkdir(int dirfd, const char *path);
HIDDEN int pre_bind(const struct sockaddr *sa, socklen_t len);
HIDDEN int pre_link(int od, const char *o, int nd, const char *n, int flags);
HIDDEN int pre_symlink(int dirfd, const char *path);
HIDDEN int pre_path(int dirfd, const char *path, enum jcap_op op, int follow);
HIDDEN int pre_pathat(int dirfd, const char *path, enum jcap_op op, int atflags);
HIDDEN int pre_fd(int fd, enum jcap_op op);
HIDDEN int pre_fd_pending(int fd, const struct stat *st);
HIDDEN int pre_pending_at(char p[PATH_MAX], const struct stat *st);
HIDDEN int pre_fd_range(int fd, const struct stat *st, struct jrange *want);
HIDDEN int fd_name_now(char p[PATH_MAX], int fd, const struct stat *st);
HIDDEN int pre_ftruncate(int fd, off_t n);     /* pending.c */
HIDDEN void pre_cut(off_t n);
HIDDEN void shim_lock_fd(int fd, const struct stat *st);
HIDDEN bool user_bytes(const void *arg, void *v, size_t n);
HIDDEN int pre_truncate(const char *path, off_t n);
HIDDEN int pre_setfl(int fd, int newfl);
HIDDEN int pre_ioctl(int fd, unsigned long req, const void *arg);   /* inode flags */
HIDDEN int pre_file_setattr(int dirfd, const char *path, const void *attr, size_t size, unsigned atflags);
/* P is a descriptor's link (/proc/self/fd/N, /dev/fd/N) to REAL, a removed
 * file the journal keeps in objects/ (renamed there, hooks.c). */
HIDDEN bool shim_fd_of_removed(const char *p, const char *real);

/* path.c: absolute, lexically normalised paths; cached cwd. */
HIDDEN int path_abs(char out[PATH_MAX], int dirfd, const char *path);
/* The same without a copy: *ABS is PATH itself when it is absolute and normal. */
HIDDEN int path_abs_ref(char out[PATH_MAX], int dirfd, const char *path, const char **abs);
HIDDEN int path_fd(char out[PATH_MAX], int fd);
HIDDEN int path_fd_read(char out[PATH_MAX], int fd, bool fresh);
HIDDEN void cwd_refresh(void);
HIDDEN const char *cwd_get(void);
HIDDEN pid_t shim_pid(void);
HIDDEN bool path_under(const char *path, const char *dir, size_t dirlen);
HIDDEN void fdcache_put(int fd, const char *path);
HIDDEN void fdcache_drop(int fd);
HIDDEN void fdcache_drop_range(unsigned lo, unsigned hi);
HIDDEN void fdcache_forget(const char *path);
HIDDEN void fdcache_distrust(void);
HIDDEN void cwd_distrust(void);
HIDDEN void fdcache_syscall(long n, const long a[6]);
HIDDEN bool path_fd_cached(int fd, char out[PATH_MAX]);
HIDDEN bool fdcache_distrusted(void);

/* pending.c: descriptors that may write a file in place, whose pre-image
 * waits for their first write */
HIDDEN bool pend_any(void);
HIDDEN bool pend_has_fd(int fd);
HIDDEN int pend_opened(int fd, int flags);
HIDDEN void pend_setfl(int fd, int newfl);
HIDDEN bool pend_named(int fd, const struct stat *st, char out[PATH_MAX]);
HIDDEN int pend_take(int fd);
HIDDEN int pend_take_all(bool inherited);
HIDDEN int pend_take_inode(const char *path);
HIDDEN int pend_reader(int fd);
HIDDEN void pend_unpark(unsigned lo, unsigned hi);
HIDDEN int pend_take_id(dev_t dev, ino_t ino, bool *found);
/* before a call that writes through FD: 0 (shim_unlock after the real
 * call) or -1 with errno set (refused, said) */
HIDDEN int pend_before(int fd);
HIDDEN bool pend_id_of(int fd, dev_t *dev, ino_t *ino);
/* mapped.c: read-only shared mappings of pending files */
HIDDEN void mapped_forget(dev_t dev, ino_t ino);
extern HIDDEN int mapped_lock_word;
extern HIDDEN int range_lock_word;
extern HIDDEN int park_lock_word;        /* pending.c's */       /* pending.c's */
HIDDEN int mapped_syscall(long n, const long a[6]);
HIDDEN bool mapped_any(void);
HIDDEN int mapped_take_range(uintptr_t lo, size_t n);
HIDDEN int pend_flush_all(bool inherited);
HIDDEN void pend_drop(int fd);
HIDDEN void pend_drop_range(unsigned lo, unsigned hi);
HIDDEN int pend_dup_before(int from, int to);
HIDDEN int pend_dup(int from, int to);

/* state.c: the session, this process's segment, the transaction. */
#define SHIM_SHORT_PATH 160
struct shim_state {
	char *journal;                 /* the session directory, normalised */
	size_t journal_len;
	char *self;                    /* this library's path, for LD_PRELOAD */
	uint32_t txn;                  /* 0 in the root: its own txn is taken lazily */
	bool root;                     /* the session's first process (FTSBX_ROOT) */
	bool machinery;                /* a multiprocessing process a starter started: a starter (txn.c) */
	bool created;                  /* this process created the session */
	bool policy_given;             /* ftsbx run compiled the policy for this root (state.c) */
	bool txn_fresh;                /* a tool call's child: J_TXN_BEGIN not written yet */
	char **argv;                   /* this process's argv, from the constructor */
	bool execfn_in_argv;           /* the exec's path is one of argv[1..]: a script's (fetched.c) */
	struct jsession s;
	struct jseg g;
	bool session_open, seg_open;
	pid_t seg_pid;
	struct { dev_t dev; ino_t ino; } jdirs[3];   /* session, log/, objects/ */
	unsigned jdirs_known;          /* bit I: jdirs[I] taken since the session was opened */
	/* journal and self point here, or at PATH_MAX buffers in .bss for
	 * longer paths: every process writes both at start, and these lie on
	 * the data page the loader writes anyway (state.c) */
	char journal_in[SHIM_SHORT_PATH], self_in[SHIM_SHORT_PATH];
};
extern HIDDEN struct shim_state shim;
HIDDEN int shim_segment(struct jseg **g);
/* Is ST one of the session's directories (the session, log/, objects/)? */
HIDDEN bool shim_journal_dir(const struct stat *st);
HIDDEN void shim_segment_release(void);
/* The atfork handler, registered at the first need (state.c). */
HIDDEN void shim_atfork(void);
/* Whether the N bytes at S and T are equal (the constructor's own loop). */
HIDDEN bool same_bytes(const char *s, const char *t, size_t n);
HIDDEN bool shim_session(void);
/* Release the path locks a pre-change check took (after the real call). */
HIDDEN void shim_unlock(void);
HIDDEN void shim_say(const char *what, const char *path, int err, const char *why);
HIDDEN int shim_refuse(const char *op, const char *path, const char *path2, char *const *argv,
		       const char *rule, int err);
/* A refusal the kernel could have made itself (another process's
 * environment), which programs meet in passing (ps reads every one):
 * recorded, not said, not counted against the transaction. */
HIDDEN int shim_refuse_quietly(const char *op, const char *path, const char *rule, int err);

HIDDEN char *shim_getenv(const char *name);
HIDDEN void shim_setenv(const char *name, const char *value);
HIDDEN void shim_putenv(char *var);

/* txn.c: transactions. A tool call's key is the id the root took for it
 * at its start (its transaction, unless it joined a group's). */
HIDDEN uint32_t shim_txn(void);
HIDDEN void txn_exec(char *const argv[], char *const envp[]);
HIDDEN uint32_t txn_exec_txn(void);
HIDDEN bool txn_vfork_child(void);
HIDDEN uint32_t txn_for_spawn(char *const argv[], char *const envp[], uint32_t *key);
HIDDEN void txn_records_for(bool on, uint32_t t);
HIDDEN bool txn_multiplexer(const char *argv0);
/* spawnacts.c: 0, or the errno that refuses a spawn with file action list FA */
HIDDEN int spawn_opens_check(const void *fa, uint32_t t);
extern HIDDEN int spawn_opens_lock_word;
HIDDEN void txn_spawned(pid_t pid, uint32_t key);
HIDDEN void txn_system_done(uint32_t key, int status);
/* exec.c: the key of the tool call popen started for stream F (0: none), forgotten. */
HIDDEN uint32_t popen_forget(FILE *f);

/* guard.c: the policy. Each returns 0 (go on) or the errno that refuses;
 * guard_write returns 1 for a path that is written but not journaled. */
HIDDEN void guard_init(bool first);
HIDDEN int open_read_judge(int d, const char *p);
HIDDEN int open_read_fd(int d, const char *p, int f);
HIDDEN bool guard_active(void);        /* enforce mode: reads are judged */
HIDDEN bool guard_audit(void);         /* audit mode: refusals recorded, not made */
HIDDEN bool guard_workspace_under(const char *p);
HIDDEN void guard_ready(void);         /* the mapped policy checked (once), before a first record */
HIDDEN int guard_read(const char *p);
HIDDEN int guard_write(const char *op, const char *p, mode_t type);
HIDDEN int guard_create(const char *p, bool dir);    /* guard_write of a new name */
HIDDEN int guard_device_node(const char *p); /* mknod of a device: refused */
/* FILE: the program as the exec names it; SEARCH: looked up through PATH
 * when it has no slash (execvp, posix_spawnp), not argv[0]. */
HIDDEN int guard_exec(const char *file, bool search, char *const argv[]);
HIDDEN bool guard_fetcher(const char *name);  /* NAME (a base name) is a fetcher */
HIDDEN bool guard_carrier(const char *name);  /* ... a carrier (cp, tar, cat ...) */
HIDDEN bool guard_fetch_pipe(uint64_t ino);   /* a pipe a fetcher writes */
HIDDEN int guard_carried_pipe(uint64_t ino, const char *path, const char *by);
/* fetched.c: the mark a fetcher leaves on what it writes */
HIDDEN extern int fetched_self;        /* a fetcher: 1; a carrier: 2; neither: 0; not known yet: -1 */
HIDDEN void fetched_close_slow(int fd);
HIDDEN int fetched_opened_slow(int fd, bool writes);
HIDDEN bool fetched_reads_stdin(const char *prog, char *const argv[]);   /* a carrier run so reads its stdin */
/* (inline: every close asks, and nearly every process is no fetcher) */
static inline void fetched_closing(int fd)
{
	if (__builtin_expect(fetched_self != 0, 0))
		fetched_close_slow(fd);
}
/* FD was just opened, to read (a carrier's source?) or to WRITE (its
 * copy?): 0, or the errno that refuses the open (fetched.c); every open
 * asks */
static inline int fetched_opened(int fd, bool writes)
{
	if (__builtin_expect(fetched_self != 0 && fetched_self != 1, 0))
		return fetched_opened_slow(fd, writes);
	return 0;
}
HIDDEN void fetched_exit(void);
HIDDEN int fetched_xattr(const char *path, int fd, const char *name, bool set);
HIDDEN int guard_mark(const char *path);     /* a change of the mark: refused */
HIDDEN int guard_inode_flags(int fd, const char *path);  /* a change of inode flags: refused */
HIDDEN bool fetched_marked(const char *path, int fd, char by[32]);
HIDDEN int guard_unnamed(const char *op, const char *p);
HIDDEN int guard_signal(pid_t target, int sig);
HIDDEN int guard_process(pid_t target, const char *op);
HIDDEN int guard_pidfd(int pidfd, int sig);
HIDDEN int guard_pidfd_getfd(int pidfd);
HIDDEN int guard_ptrace(long req, pid_t pid);
HIDDEN int guard_connect(const struct sockaddr *sa, socklen_t len);
HIDDEN int guard_connected(int fd, const char *path);
HIDDEN bool guard_fork_of(pid_t pid, pid_t root);
HIDDEN int guard_group(pid_t who, const char *op);
HIDDEN bool guard_journaled(const char *dir);
HIDDEN bool guard_in_workspace(const char *p);
HIDDEN bool guard_rewind_counts(int status, bool refused, char *const argv[]);

/* opaque.c: static, setuid and Go programs at exec. */
struct policy;
HIDDEN int opaque_exec(const struct policy *pol, const char *file, char *const argv[]);
/* True while an exec in place is judged: what it learns of the program's
 * kind is not cached (opaque.c). */
extern HIDDEN __thread bool kind_keep_off __attribute__((tls_model("initial-exec")));
/* The same, with the program's file as the policy found it (KNOWN may be NULL). */
HIDDEN int opaque_exec_known(const struct policy *pol, const char *file, char *const argv[],
			     const struct stat *known);
HIDDEN bool landlock_roots(const struct policy *pol, const char *journal);
/* Set by the judgement of an exec (guard_exec): the program is one the
 * shim cannot be loaded into and that fails to start with it (musl's), so
 * env_fix passes it no LD_PRELOAD. opaque_unloadable sets it where the
 * policy does not judge programs (audit, off). */
extern HIDDEN __thread bool exec_no_preload __attribute__((tls_model("initial-exec")));
HIDDEN void opaque_unloadable(const char *file, char *const argv[]);
/* FILE as execvp would find it through PATH, into OUT (false: not found). */
HIDDEN bool shim_find_program(const char *file, char out[PATH_MAX]);
/* Whether the program FILE names (through PATH) is one the shim cannot see
 * into (static, setuid, Go, ld.so). */
HIDDEN bool opaque_program(const char *file);
/* io_uring does file operations no hook sees: it is refused as if the
 * kernel had none (ENOSYS: libuv, liburing users fall back to plain
 * calls), by the syscall() hook and, in a confined session, by seccomp. */
#define IO_URING_WHY "io_uring would change files behind the journal"

/* exec.c: environment stickiness. */
HIDDEN void env_capture(void);
HIDDEN char **env_fix(char *const envp[], char **buf, size_t cap);

#endif
