/*
 * spawnacts.c - posix_spawn's file actions: the opens a list holds, kept
 * as they are added, judged and journaled at the spawn (exec.c's
 * spawn_hook asks spawn_opens_check).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <string.h>
#include "shim.h"

/*
 * posix_spawn's file actions open in the child, inside glibc, where no
 * hook sees them (os.posix_spawn's POSIX_SPAWN_OPEN). The opens an action
 * list holds are kept here as they are added (the list itself is glibc's
 * and opaque), and judged and journaled at the spawn, in the child's
 * transaction, before the child makes them. A relative path is taken from
 * this process's working directory at the add (an addchdir_np before it
 * is not followed). A list that holds more than the table does fails its
 * spawn (ENOMEM): nothing unjudged runs.
 */
#define SPAWN_OPENS 16
static struct spawn_open {
	const void *fa;         /* NULL: free */
	int flags;
	char path[PATH_MAX];
} spawn_opens[SPAWN_OPENS];
/* lists with an open the table could not keep, and why (ENOMEM: no room;
 * ENAMETOOLONG: no absolute path of it) */
static struct { const void *fa; int err; } spawn_bad[4];

static void spawn_opens_lock(void)
{
	shim_spin(&spawn_opens_lock_word);
}

static void spawn_opens_unlock(void)
{
	shim_unspin(&spawn_opens_lock_word);
}

/* Forget the opens of list FA (a new list at its address, or its end). */
static void spawn_opens_drop(const void *fa)
{
	spawn_opens_lock();
	for (int i = 0; i < SPAWN_OPENS; i++)
		if (spawn_opens[i].fa == fa)
			spawn_opens[i].fa = NULL;
	for (size_t i = 0; i < sizeof(spawn_bad) / sizeof(spawn_bad[0]); i++)
		if (spawn_bad[i].fa == fa)
			spawn_bad[i].fa = NULL;
	spawn_opens_unlock();
}

/* List FA holds an open the table could not keep (ERR): its spawns fail.
 * With no room for that either, the oldest such list is forgotten (its
 * opens stay: the table being full, they are why). */
static void spawn_opens_bad(const void *fa, int err)
{
	size_t n = sizeof(spawn_bad) / sizeof(spawn_bad[0]), i = 0;

	while (i < n && spawn_bad[i].fa && spawn_bad[i].fa != fa)
		i++;
	if (i == n) {
		memmove(spawn_bad, spawn_bad + 1, (n - 1) * sizeof(spawn_bad[0]));
		i = n - 1;
	}
	spawn_bad[i].fa = fa;
	spawn_bad[i].err = err;
}

EXPORT int posix_spawn_file_actions_init(posix_spawn_file_actions_t *fa)
{
	spawn_opens_drop(fa);
	return REAL(posix_spawn_file_actions_init)(fa);
}

EXPORT int posix_spawn_file_actions_destroy(posix_spawn_file_actions_t *fa)
{
	spawn_opens_drop(fa);
	return REAL(posix_spawn_file_actions_destroy)(fa);
}

EXPORT int posix_spawn_file_actions_addopen(posix_spawn_file_actions_t *fa, int fd, const char *p, int fl, mode_t m)
{
	char abs[PATH_MAX];
	int i = 0;

	if (shim_ready) {
		bool ok = path_abs(abs, AT_FDCWD, p) == 0;
		spawn_opens_lock();
		while (ok && i < SPAWN_OPENS && spawn_opens[i].fa)
			i++;
		if (ok && i < SPAWN_OPENS) {
			spawn_opens[i].fa = fa;
			spawn_opens[i].flags = fl;
			memcpy(spawn_opens[i].path, abs, strlen(abs) + 1);
		} else {
			spawn_opens_bad(fa, ok ? ENOMEM : ENAMETOOLONG);
		}
		spawn_opens_unlock();
	}
	return REAL(posix_spawn_file_actions_addopen)(fa, fd, p, fl, m);
}

/* Judge and journal the opens of list FA, in transaction T, one by one
 * out of the table's lock (a capture may copy a large file, and a fork
 * meanwhile must not find the lock held): 0 or the errno that refuses the
 * spawn. */
HIDDEN int spawn_opens_check(const void *fa, uint32_t t)
{
	char path[PATH_MAX];
	int err = 0, flags = 0;

	if (!fa)
		return 0;
	spawn_opens_lock();
	for (size_t i = 0; i < sizeof(spawn_bad) / sizeof(spawn_bad[0]); i++)
		if (spawn_bad[i].fa == fa)
			err = spawn_bad[i].err;
	spawn_opens_unlock();
	txn_records_for(true, t);
	for (int i = 0; !err; i++) {
		spawn_opens_lock();
		while (i < SPAWN_OPENS && spawn_opens[i].fa != fa)
			i++;
		if (i < SPAWN_OPENS) {
			flags = spawn_opens[i].flags;
			memcpy(path, spawn_opens[i].path, strlen(spawn_opens[i].path) + 1);
		}
		spawn_opens_unlock();
		if (i >= SPAWN_OPENS)
			break;
		if ((flags & O_ACCMODE) == O_RDONLY && !(flags & (O_CREAT | O_TRUNC)) && guard_active()) {
			err = open_read_judge(AT_FDCWD, path);
			if (err != EACCES && err != EPERM)
				err = 0;        /* the kernel's answer: the spawn says it */
		} else {
			err = pre_open(AT_FDCWD, path, flags);
			shim_unlock();
		}
	}
	txn_records_for(false, 0);
	return err;
}
