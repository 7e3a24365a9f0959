/*
 * rewind.c - rewind a session (jrewind): choose the records to undo, refuse
 * when later transactions built on them, leave alone what changed behind the
 * journal's back (drift), undo the rest in strictly decreasing seq (DESIGN.md
 * invariant 3) and mark each undone record with a J_REWOUND record, so that
 * a rewind killed half-way is finished by running it again.
 *
 * The order matters: a mark is written after its undo, never before, so a
 * killed run leaves at most one record undone but unmarked; jundo() is
 * idempotent and the next run undoes it again ("already"). The drift check
 * would see that record's path as changed after the journal last saw it;
 * it is told apart because it looks exactly like the pre-image (see
 * looks_restored()).
 *
 * Path tables are uthash tables; this runs in txreplay, so it allocates.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uthash.h>
#include "dedup.h"
#include "internal.h"

#define NO_SETTLE INT64_MAX     /* settle time of a path a running txn touches */
/* A file's times come from the kernel's coarse clock, which lags
 * clock_gettime() (the records' times) by up to a tick: a change made
 * after a record can carry an earlier time than the record. */
#define COARSE_NS 50000000
#define OWN_GRACE_NS 1000000000  /* see index_records */

/* One entry of any table: a byte-string key (a path, a seq, a txn, a
 * dev+ino pair) and a value. */
struct kent {
	UT_hash_handle hh;
	int64_t v;
	size_t len;
	unsigned char key[];
};

/* P, or the end of txreplay when memory ran out (as reader.c does). */
static void *must(void *p)
{
	if (!p) {
		fputs("txreplay: out of memory\n", stderr);
		exit(1);
	}
	return p;
}

static struct kent *kt_find(struct kent *h, const void *key, size_t len)
{
	struct kent *e;

	HASH_FIND(hh, h, key, len, e);
	return e;
}

/* The entry for KEY, created with value V when absent. */
static struct kent *kt_put(struct kent **h, const void *key, size_t len, int64_t v)
{
	struct kent *e = kt_find(*h, key, len);

	if (e)
		return e;
	e = must(calloc(1, sizeof(*e) + len));
	memcpy(e->key, key, len);
	e->len = len;
	e->v = v;
	HASH_ADD_KEYPTR(hh, *h, e->key, len, e);
	return e;
}

static void kt_free(struct kent **h)
{
	struct kent *e, *t;

	HASH_ITER(hh, *h, e, t) {
		HASH_DEL(*h, e);
		free(e);
	}
}

static struct kent *pt_find(struct kent *h, const char *p) { return kt_find(h, p, strlen(p)); }
static struct kent *pt_put(struct kent **h, const char *p, int64_t v) { return kt_put(h, p, strlen(p), v); }
static struct kent *nt_find(struct kent *h, uint64_t n) { return kt_find(h, &n, sizeof(n)); }
static struct kent *nt_put(struct kent **h, uint64_t n, int64_t v) { return kt_put(h, &n, sizeof(n), v); }

static void kt_max(struct kent *e, int64_t v)
{
	if (v > e->v)
		e->v = v;
}

static void kt_min(struct kent *e, int64_t v)
{
	if (v < e->v)
		e->v = v;
}

/* Per-record state. */
#define R_UNDO    0x1   /* an undo record (J_CREATE..J_META) */
#define R_REWOUND 0x2   /* a J_REWOUND mark names it */
#define R_SEL     0x4   /* selected for this run */
#define R_SEEN    0x8   /* matched the selection (selected or already rewound) */

struct rw {
	const char *dir;
	const struct jrewind_opts *o;
	struct jrewind_stats *st;
	struct jreader r;
	size_t n;
	char **path, **path2;          /* per record (undo records only) */
	uint8_t *state;
	struct kent *marks;            /* seq -> time of its J_REWOUND mark */
	struct kent *ends;             /* txn -> time of its J_TXN_END */
	struct kent *late;             /* txns with a record after their end (a job they left running) */
	struct kent *txns;             /* transactions selected (txn mode) */
	struct kent *settle;           /* path -> settle time */
	struct kent *isettle;          /* dev+ino of a pre-image -> settle time */
	struct kent *undoing;          /* dev+ino an earlier run began to undo */
	struct kent *held;             /* paths left alone after drift or failure */
	struct kent *touched;          /* paths this run changed, and their parents */
	struct kent *inodes;           /* dev+ino this run changed */
	struct kent *markino;          /* seq -> the inode number its J_REWOUND mark names */
	struct kent *renewed;          /* dev+ino of a regular file an undo brought back as a new inode -> its number */
	struct kent *names;            /* dev+ino -> its name in namelist (other_name) */
	char **namelist;
	size_t nnames, capnames;
	bool names_read;
	struct jundo_way way;          /* see jundo_hints */
	struct jsession s;
	struct jseg g;
	bool seg_open;
	long crash_after, nundo;
};

static void say(struct rw *w, int level, const char *fmt, ...)
{
	char msg[PATH_MAX * 2 + 512];
	va_list ap;

	if (!w->o->say)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	w->o->say(w->o->ctx, level, msg);
}

static bool weak(const struct jrecord *c)
{
	return c->type == J_META && (c->flags & JR_WEAK);
}

/* ---- reading ------------------------------------------------------------ */

static void report_damage(struct rw *w)
{
	for (size_t i = 0; i < w->r.ndmg; i++) {
		const struct jdamage *d = &w->r.dmg[i];
		say(w, 1, "damage: %s at offset %llu: %s%s", d->file, (unsigned long long)d->offset,
		    d->what, d->tail ? "; the records before it still rewind" : "");
	}
}

/* Record C's undo (a J_CONTENT or J_REMOVE) left inode INO at its path:
 * a regular file's pre-image that was a copy (another filesystem than the
 * journal's) came back as a new inode, which an earlier J_RENAME of the
 * old one then finds where it left it (jundo_alias). */
static void renewed(struct rw *w, const struct jrecord *c, uint64_t ino)
{
	struct jstat j;

	if ((c->type != J_CONTENT && c->type != J_REMOVE) || !jrec_stat(c, F_STAT, &j) || !S_ISREG(j.mode) ||
	    !ino || ino == j.ino)
		return;
	uint64_t k[2] = { j.dev, j.ino };
	kt_put(&w->renewed, k, sizeof(k), 0)->v = (int64_t)ino;
}

/* The names in the directories the journal's paths lie in, by the dev+ino
 * their entries hold: read at the first need (a removed file with other
 * hard links, its pre-image a copy), and kept up as undos bring files back
 * (apply). A name found here is looked at again before it is used. */
static void names_put(struct rw *w, uint64_t dev, uint64_t ino, const char *path)
{
	uint64_t k[2] = { dev, ino };
	struct kent *e = kt_put(&w->names, k, sizeof(k), -1);

	if (e->v < 0) {
		if (w->nnames == w->capnames) {
			w->capnames = w->capnames ? 2 * w->capnames : 64;
			w->namelist = must(realloc(w->namelist, w->capnames * sizeof(*w->namelist)));
		}
		w->namelist[w->nnames] = NULL;
		e->v = (int64_t)w->nnames++;
	}
	free(w->namelist[e->v]);
	w->namelist[e->v] = must(strdup(path));
}

static void names_read_dir(struct rw *w, const char *dir)
{
	char p[PATH_MAX];
	struct dirent *de;
	struct stat ds;
	DIR *d = opendir(dir);

	if (!d)
		return;
	/* each entry's own device and number (fstatat): on overlayfs they are
	 * not its directory's device and the entry's d_ino */
	while ((de = readdir(d)))
		if ((de->d_type == DT_REG || de->d_type == DT_UNKNOWN) &&
		    fstatat(dirfd(d), de->d_name, &ds, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(ds.st_mode) &&
		    (size_t)snprintf(p, sizeof(p), "%s/%s", strcmp(dir, "/") ? dir : "", de->d_name) < sizeof(p))
			names_put(w, (uint64_t)ds.st_dev, (uint64_t)ds.st_ino, p);
	closedir(d);
}

static void names_read(struct rw *w)
{
	struct kent *dirs = NULL;
	char dir[PATH_MAX];

	w->names_read = true;
	for (size_t i = 0; i < w->n; i++)
		for (int k = 0; k < 2; k++) {
			const char *p = k ? w->path2[i] : w->path[i];
			if (p && *p && jpath_parent(p, dir) && !pt_find(dirs, dir)) {
				pt_put(&dirs, dir, 0);
				names_read_dir(w, dir);
			}
		}
	kt_free(&dirs);
}

/* P holds the inode J was (INO: or the one it came back as): a regular file
 * of its device, number, size and modification time. */
static bool holds(const char *p, const struct jstat *j, uint64_t ino)
{
	struct stat s;

	return lstat(p, &s) == 0 && S_ISREG(s.st_mode) && (uint64_t)s.st_dev == j->dev &&
	       (uint64_t)s.st_ino == ino && (uint64_t)s.st_size == j->size &&
	       (int64_t)s.st_mtim.tv_sec * 1000000000 + s.st_mtim.tv_nsec == j->mtime_ns;
}

/* jundo_hints.other_name: a name that holds the inode of the removed file
 * (J), else the new one it came back as, in any directory the
 * journal's paths lie in (where hard links made by `ln`, `cp -al` or a
 * tool call are). */
static bool other_name(void *ctx, const struct jstat *j, char out[PATH_MAX])
{
	struct rw *w = ctx;
	uint64_t k[2] = { j->dev, j->ino };
	struct kent *r = kt_find(w->renewed, k, sizeof(k));

	if (!w->names_read)
		names_read(w);
	for (int t = 0; t < 2; t++) {
		if (t) {
			if (!r)
				break;
			k[1] = (uint64_t)r->v;
		}
		struct kent *e = kt_find(w->names, k, sizeof(k));
		const char *p = e ? w->namelist[e->v] : NULL;
		if (p && strlen(p) < PATH_MAX && holds(p, j, k[1])) {
			strcpy(out, p);
			return true;
		}
	}
	return false;
}

/* The inode a J_RENAME's file (J: its metadata) is now, when an undo brought
 * it back as a new one: into ALIAS (dev, ino); false when none did. */
static bool renamed_alias(const struct rw *w, const struct jstat *j, uint64_t alias[2])
{
	uint64_t k[2] = { j->dev, j->ino };
	struct kent *e = S_ISREG(j->mode) ? kt_find(w->renewed, k, sizeof(k)) : NULL;

	if (!e)
		return false;
	alias[0] = j->dev;
	alias[1] = (uint64_t)e->v;
	return true;
}

/* Index the records: marks, transaction ends, paths of undo records. */
static void index_records(struct rw *w)
{
	uint64_t ref;

	w->n = w->r.nrec;
	w->path = must(calloc(w->n + 1, sizeof(*w->path)));
	w->path2 = must(calloc(w->n + 1, sizeof(*w->path2)));
	w->state = must(calloc(w->n + 1, 1));
	for (size_t i = 0; i < w->n; i++) {
		const struct jrecord *c = &w->r.rec[i];

		if (c->type == J_REWOUND && jrec_u64(c, F_SEQREF, &ref)) {
			kt_max(nt_put(&w->marks, ref, c->time_ns), c->time_ns);
			/* the inode that undo touched settles then, under every name */
			if (c->f[F_INODE].present && c->f[F_INODE].n == 16) {
				uint64_t ino[2];
				memcpy(ino, c->f[F_INODE].p, sizeof(ino));
				kt_max(kt_put(&w->isettle, c->f[F_INODE].p, 16, INT64_MIN), c->time_ns);
				nt_put(&w->markino, ref, 0)->v = (int64_t)ino[1];
			}
		} else if (c->type == J_UNDOING && c->f[F_INODE].present && c->f[F_INODE].n == 16) {
			/* an undo began here; if its run was killed before
			 * the mark, the inode's ctime is that run's own */
			kt_max(kt_put(&w->undoing, c->f[F_INODE].p, 16, INT64_MIN), c->time_ns);
		}
		else if (c->type == J_TXN_END && (c->flags & JR_HELD)) {
			/* a file the starter held open for writing as its own
			 * transaction was cut (an agent's log file): it wrote on
			 * through it where no hook sees a write, so the path has
			 * no settle time, as a running transaction's paths */
			char *p = jrec_strdup(c, F_PATH);
			if (p)
				kt_max(pt_put(&w->settle, p, NO_SETTLE), NO_SETTLE);
			free(p);
		}
		else if (c->type == J_TXN_END) {
			/* A starter's own transaction (its writes between two
			 * tool calls, JR_CUT) is cut when it starts a child, while another of its threads
			 * may be writing through a descriptor it just opened
			 * (an agent's write_file tool beside a shell tool in its
			 * thread pool): those writes settle within OWN_GRACE_NS. */
			int64_t t = c->time_ns + (c->flags & JR_CUT ? OWN_GRACE_NS : 0);
			kt_max(nt_put(&w->ends, c->txn, t), t);
		}
		else if (c->type >= J_CREATE && c->type <= J_META) {
			w->state[i] = R_UNDO;
			w->path[i] = jrec_strdup(c, F_PATH);
			w->path2[i] = jrec_strdup(c, F_PATH2);
			if (!w->path[i])        /* jundo() says what is wrong */
				w->path[i] = must(calloc(1, 1));
		}
	}
	/* in decreasing seq, as rewinds undo them: where two records brought
	 * back the same inode (its number reused), the earliest one's stands,
	 * the one an earlier rename of it meets next */
	for (size_t i = w->n; i-- > 0;)
		if ((w->state[i] & R_UNDO) && nt_find(w->marks, w->r.rec[i].seq)) {
			struct kent *m = nt_find(w->markino, w->r.rec[i].seq);
			w->state[i] |= R_REWOUND;
			if (m)
				renewed(w, &w->r.rec[i], (uint64_t)m->v);
		}
}

/* ---- selection ---------------------------------------------------------- */

static bool matches(const struct rw *w, const struct jrecord *c)
{
	if (w->o->txn)
		return nt_find(w->txns, c->txn) != NULL;
	return c->seq > w->o->to_seq;
}

/* Select every undo record that matches and is not rewound yet (a rewound
 * one counts as already done). Called again as a cascade grows. */
static void select_records(struct rw *w)
{
	for (size_t i = 0; i < w->n; i++) {
		if (!(w->state[i] & R_UNDO) || (w->state[i] & R_SEEN) || !matches(w, &w->r.rec[i]))
			continue;
		w->state[i] |= R_SEEN;
		if (w->state[i] & R_REWOUND)
			w->st->already++;
		else
			w->state[i] |= R_SEL;
	}
}

/* Call FN on P and on each of its ancestors ("/a/b/c": "/a/b", "/a", "/"). */
static bool any_ancestor(const char *p, bool (*fn)(void *, const char *), void *ctx)
{
	char buf[PATH_MAX];
	size_t n = strlen(p);

	if (n >= sizeof(buf))
		return false;
	memcpy(buf, p, n + 1);
	while (n > 1) {
		while (n > 1 && buf[n - 1] != '/')
			n--;
		buf[n > 1 ? n - 1 : 1] = 0;
		if (fn(ctx, buf))
			return true;
		if (n <= 1)
			break;
		n--;
	}
	return false;
}

/* The paths of the selected, non-weak records: EXACT maps a path to the
 * lowest seq that touches it, ABOVE maps every strict ancestor of one. */
struct deptab { struct kent *exact, *above; uint64_t seq; };

static bool put_above(void *ctx, const char *a)
{
	struct deptab *t = ctx;

	kt_min(pt_put(&t->above, a, (int64_t)t->seq), (int64_t)t->seq);
	return false;
}

static bool exact_before(void *ctx, const char *a)
{
	struct deptab *t = ctx;
	struct kent *e = pt_find(t->exact, a);

	return e && (uint64_t)e->v < t->seq;
}

static void deptab_add(struct deptab *t, const char *p, uint64_t seq)
{
	if (!p || !*p)
		return;
	kt_min(pt_put(&t->exact, p, (int64_t)seq), (int64_t)seq);
	t->seq = seq;
	any_ancestor(p, put_above, t);
}

/* Does a record at SEQ on P build on a selected record: the same path, a
 * path under one, or a path above one, touched earlier by the selection? */
static bool depends(struct deptab *t, const char *p, uint64_t seq)
{
	struct kent *e;

	if (!p || !*p)
		return false;
	t->seq = seq;
	if (exact_before(t, p) || any_ancestor(p, exact_before, t))
		return true;
	e = pt_find(t->above, p);
	return e && (uint64_t)e->v < seq;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* The path record I builds on: its own, but for a part of a removed
 * file saved into the inode the journal keeps (.../objects/D/S.ino, the
 * shim's kept_range), the path the removal S took that inode from: its
 * undo needs the inode still in objects/, where the removal's undo takes
 * it away. BUF holds such a path. */
static const char *dep_path(struct rw *w, size_t i, char buf[PATH_MAX])
{
	const struct jrecord *c = &w->r.rec[i], *rm;
	const char *p = w->path[i], *name = p ? strrchr(p, '/') : NULL;
	uint64_t seq = 0, ino[2];
	struct jstat j;
	const char *d;

	if (!name || c->type != J_CONTENT || !(c->flags & JR_RANGE) || !strstr(p, "/objects/"))
		return p;
	for (d = name + 1; *d >= '0' && *d <= '9' && seq < UINT64_MAX / 10; d++)
		seq = seq * 10 + (uint64_t)(*d - '0');
	if (d == name + 1 || strcmp(d, ".ino") || !(rm = jreader_find(&w->r, seq)) || rm->type != J_REMOVE ||
	    !rm->f[F_INODE].present || rm->f[F_INODE].n != sizeof(ino) || !rm->f[F_PATH].present ||
	    rm->f[F_PATH].n >= PATH_MAX || !jrec_stat(c, F_STAT, &j))
		return p;
	memcpy(ino, rm->f[F_INODE].p, sizeof(ino));
	if (ino[0] != j.dev || ino[1] != j.ino)
		return p;
	memcpy(buf, rm->f[F_PATH].p, rm->f[F_PATH].n);
	buf[rm->f[F_PATH].n] = 0;
	return buf;
}

/* Transactions outside the selection that built on it, sorted, in OUT
 * (malloc'd). Returns how many. */
static size_t find_dependents(struct rw *w, uint32_t **out)
{
	struct deptab t = { 0 };
	struct kent *found = NULL, *e, *tmp;
	char buf[PATH_MAX];
	size_t k = 0;

	for (size_t i = 0; i < w->n; i++) {
		if (!(w->state[i] & R_SEL) || weak(&w->r.rec[i]))
			continue;
		deptab_add(&t, dep_path(w, i, buf), w->r.rec[i].seq);
		deptab_add(&t, w->path2[i], w->r.rec[i].seq);
	}
	for (size_t i = 0; i < w->n; i++) {
		const struct jrecord *c = &w->r.rec[i];

		if (w->state[i] != R_UNDO || weak(c) || nt_find(w->txns, c->txn))
			continue;
		if (depends(&t, dep_path(w, i, buf), c->seq) || depends(&t, w->path2[i], c->seq))
			nt_put(&found, c->txn, 0);
	}
	*out = must(malloc((HASH_COUNT(found) + 1) * sizeof(**out)));
	HASH_ITER(hh, found, e, tmp) {
		uint64_t txn;
		memcpy(&txn, e->key, sizeof(txn));
		(*out)[k++] = (uint32_t)txn;
	}
	qsort(*out, k, sizeof(**out), cmp_u32);
	kt_free(&found);
	kt_free(&t.exact);
	kt_free(&t.above);
	return k;
}

/* Refuse (1) when later transactions depend on the selection, or with
 * JW_CASCADE take them in until nothing more depends. */
static int check_dependents(struct rw *w)
{
	uint32_t *dep;
	size_t k;

	while ((k = find_dependents(w, &dep)) > 0) {
		if (!(w->o->flags & JW_CASCADE)) {
			char list[4096] = "";
			size_t len = 0;
			for (size_t i = 0; i < k && len < sizeof(list) - 16; i++)
				len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%u",
							i ? ", " : "", dep[i]);
			say(w, 2, "transaction %u: later transactions %s changed the same paths; "
			    "rewind them first or use --cascade", w->o->txn, list);
			free(dep);
			return 1;
		}
		for (size_t i = 0; i < k; i++) {
			say(w, 0, "cascade: transaction %u changed the same paths; rewinding it too",
			    dep[i]);
			nt_put(&w->txns, dep[i], 0);
		}
		free(dep);
		select_records(w);
	}
	free(dep);
	return 0;
}

/* A selected weak record (a directory's times) whose path later work, left
 * in place, touched again: the times belong to that work now. */
static void skip_stale_weak(struct rw *w)
{
	struct kent *later = NULL, *e;

	for (size_t i = 0; i < w->n; i++) {
		if (w->state[i] != R_UNDO)
			continue;
		kt_max(pt_put(&later, w->path[i], 0), (int64_t)w->r.rec[i].seq);
		if (w->path2[i])
			kt_max(pt_put(&later, w->path2[i], 0), (int64_t)w->r.rec[i].seq);
	}
	for (size_t i = 0; i < w->n; i++) {
		if (!(w->state[i] & R_SEL) || !weak(&w->r.rec[i]))
			continue;
		e = pt_find(later, w->path[i]);
		if (e && (uint64_t)e->v > w->r.rec[i].seq) {
			w->state[i] &= (uint8_t)~R_SEL;
			w->st->skipped++;
		}
	}
	kt_free(&later);
}

/* ---- drift -------------------------------------------------------------- */

/* An earlier run undid record I (its J_REWOUND mark at MARK): that undo
 * added, removed or renamed entries of its paths' parent directories, so
 * their ctimes up to the mark are that run's own. (An undo killed before
 * its mark is done again by the next run, which touches them itself.) */
static void parents_undone(struct rw *w, size_t i, int64_t mark)
{
	char buf[PATH_MAX];
	const char *ps[2] = { w->path[i], w->path2[i] };

	for (int k = 0; k < 2; k++) {
		if (ps[k] && jpath_parent(ps[k], buf))
			kt_max(pt_put(&w->settle, buf, INT64_MIN), mark);
	}
}

/* The settle time of each path: when the journal last saw it settle (the
 * end of a transaction that touched it, a rewind mark). A transaction still
 * open (no J_TXN_END) gives its paths no settle time at all, and so does
 * one with a record after its end: a process it left running (a server
 * started with nohup, a job in the background) changes its files on, also
 * through descriptors it opened before the end, where no hook sees a
 * change (the shim captures a path afresh after its transaction's end, and
 * records each program start, so such a process leaves a record at its
 * first exec or change of a path). */
static void compute_settle(struct rw *w)
{
	for (size_t i = 0; i < w->n; i++) {
		const struct jrecord *c = &w->r.rec[i];
		struct kent *end = c->txn ? nt_find(w->ends, c->txn) : NULL;

		if (end && c->time_ns > end->v && c->type != J_TXN_END)
			nt_put(&w->late, c->txn, 0);
	}
	for (size_t i = 0; i < w->n; i++) {
		const struct jrecord *c = &w->r.rec[i];
		struct kent *end = nt_find(w->ends, c->txn), *mark = nt_find(w->marks, c->seq);
		int64_t t = end && !nt_find(w->late, c->txn) ? end->v : NO_SETTLE;

		if (!(w->state[i] & R_UNDO))
			continue;
		if (mark) {
			parents_undone(w, i, mark->v);
			t = end && end->v > mark->v ? end->v : mark->v;
		}
		kt_max(pt_put(&w->settle, w->path[i], INT64_MIN), t);
		if (w->path2[i])
			kt_max(pt_put(&w->settle, w->path2[i], INT64_MIN), t);
		/* The same inode under another name (a hard link, a renamed
		 * directory) settles with it: a rewind of that name's record
		 * changes this one's ctime too. */
		struct jstat j;
		if (t != NO_SETTLE && jrec_stat(c, F_STAT, &j)) {
			uint64_t k[2] = { j.dev, j.ino };
			kt_max(kt_put(&w->isettle, k, sizeof(k), INT64_MIN), t);
		}
	}
}

static int64_t ctime_ns(const struct stat *s)
{
	return (int64_t)s->st_ctim.tv_sec * 1000000000 + s->st_ctim.tv_nsec;
}

static bool inode_touched(struct rw *w, const struct stat *s)
{
	uint64_t k[2] = { (uint64_t)s->st_dev, (uint64_t)s->st_ino };

	return kt_find(w->inodes, k, sizeof(k)) != NULL;
}

/* lstat P (which may be NULL) into *ST: NULL when nothing is there, else ST. */
static const struct stat *look(const char *p, struct stat *st)
{
	return p && lstat(p, st) == 0 ? st : NULL;
}

/* The inode S (NULL: none) is one this run changes. */
static void touch_inode(struct rw *w, const struct stat *s)
{
	uint64_t k[2];

	if (!s)
		return;
	k[0] = (uint64_t)s->st_dev;
	k[1] = (uint64_t)s->st_ino;
	kt_put(&w->inodes, k, sizeof(k), 0);
}

/* Put P and its parent directory ("/a/b" for "/a/b/c") into table H. */
static void put_with_parent(struct kent **h, const char *p)
{
	char buf[PATH_MAX];

	if (!p || !*p)
		return;
	pt_put(h, p, 0);
	if (jpath_parent(p, buf))
		pt_put(h, buf, 0);
}

/* A path this run changes: it, its parent and its inode (S, what is at P
 * now, or NULL) are exempt from the drift check from now on. */
static void touch_path(struct rw *w, const char *p, const struct stat *s)
{
	put_with_parent(&w->touched, p);
	touch_inode(w, s);
}

/* The path is already exactly its pre-image: a rewind killed after this
 * undo and before its mark restored it, and its ctime is that rewind's.
 * Type, owner, mode, size and the mtime to the nanosecond (which rewind
 * restores and no edit reproduces) must all match; a rename is back when
 * its source holds the renamed inode again. */
static bool looks_restored(const struct rw *w, const struct jrecord *c, const struct stat *s)
{
	uint64_t alias[2];
	struct jstat j;

	if (c->type == J_CREATE || !jrec_stat(c, F_STAT, &j))
		return false;
	if (c->type == J_RENAME)
		return ((uint64_t)s->st_dev == j.dev && (uint64_t)s->st_ino == j.ino) ||
		       (renamed_alias(w, &j, alias) && (uint64_t)s->st_dev == alias[0] &&
			(uint64_t)s->st_ino == alias[1]);
	if ((s->st_mode & S_IFMT) != (j.mode & S_IFMT) || s->st_uid != j.uid || s->st_gid != j.gid)
		return false;
	if (!S_ISLNK(s->st_mode) && (s->st_mode & 07777) != (j.mode & 07777))
		return false;
	if (S_ISREG(s->st_mode) && (uint64_t)s->st_size != j.size)
		return false;
	return (int64_t)s->st_mtim.tv_sec * 1000000000 + s->st_mtim.tv_nsec == j.mtime_ns;
}

/* Did record I's path (S: what is there now, NULL: nothing) change after
 * the journal last saw it? */
static bool drifted(struct rw *w, size_t i, const struct stat *s)
{
	const struct jrecord *c = &w->r.rec[i];
	struct kent *settle;

	if ((w->o->flags & JW_FORCE) || weak(c) || !s)
		return false;
	if (pt_find(w->touched, w->path[i]) || inode_touched(w, s))
		return false;
	settle = pt_find(w->settle, w->path[i]);
	if (!settle || settle->v == NO_SETTLE || settle->v == INT64_MIN || ctime_ns(s) <= settle->v)
		return false;
	uint64_t k[2] = { (uint64_t)s->st_dev, (uint64_t)s->st_ino };
	struct kent *is = kt_find(w->isettle, k, sizeof(k));
	if (is && is->v != INT64_MIN && ctime_ns(s) <= is->v)
		return false;
	struct kent *u = kt_find(w->undoing, k, sizeof(k));
	if (u && ctime_ns(s) >= u->v - COARSE_NS && (!is || is->v < u->v))
		return false;           /* an interrupted run of ours changed it */
	return !looks_restored(w, c, s);
}

static bool is_held(struct rw *w, size_t i)
{
	return pt_find(w->held, w->path[i]) || (w->path2[i] && pt_find(w->held, w->path2[i]));
}

/* Leave record I's paths alone from now on: every lower-seq record on them
 * too, and on their parents (whose entries are not all back, so neither
 * their times nor their removal may be undone yet). */
static void hold(struct rw *w, size_t i)
{
	put_with_parent(&w->held, w->path[i]);
	put_with_parent(&w->held, w->path2[i]);
}

/* ---- applying ----------------------------------------------------------- */

/* Open this run's own segment for its marks. On a full filesystem the
 * session's reserve (format.h) is freed once to make room. */
static int open_marks(struct rw *w)
{
	int err;

	if (w->seg_open)
		return 0;
	err = jsession_open(&w->s, w->dir, NULL);
	if (err)
		return err;
	err = jseg_open(&w->g, &w->s, NULL);
	if (err == -ENOSPC && jsession_release_reserve(&w->s) == 0)
		err = jseg_open(&w->g, &w->s, NULL);
	if (err) {
		jsession_close(&w->s);
		return err;
	}
	w->seg_open = true;
	return 0;
}

/* Append the J_REWOUND mark for SEQ through this run's own segment, with
 * the inode its undo touched (INO: dev, ino; zero when none), whose ctime
 * the undo moved under every name it has. */
static int mark(struct rw *w, enum jtype type, uint64_t seq, const uint64_t ino[2])
{
	uint8_t buf[256];
	struct jbuild b;
	int err = open_marks(w);

	if (err)
		return err;
	jb_init(&b, buf, sizeof(buf), type, 0, 0);
	jb_u64(&b, F_SEQREF, seq);
	if (ino[1])
		jb_bytes(&b, F_INODE, ino, 16);
	err = jseg_append(&w->g, &b, NULL);
	if (err == -ENOSPC && jsession_release_reserve(&w->s) == 0)
		err = jseg_append(&w->g, &b, NULL);
	return err;
}

/* Crash testing hook: FTSBX_REWIND_CRASH_AFTER=N kills this process with
 * SIGKILL right after its N-th undo, before that undo's mark is written:
 * the worst moment. The test suite runs the rewind again and checks that it
 * finishes the job. */
static void crash_hook(struct rw *w)
{
	if (w->crash_after > 0 && ++w->nundo == w->crash_after)
		raise(SIGKILL);
}

static const char *arrow(const char *p2)
{
	return p2 ? " -> " : "";
}

/* Undo record I, whose paths hold BEFORE[0] and BEFORE[1] (NULL:
 * nothing); *AFTER is what its first path holds then (NULL: nothing).
 * 0 done (or already), 1 left alone, -errno to stop. */
static int apply(struct rw *w, size_t i, const struct stat *const before[2], const struct stat **after,
		 struct stat *buf)
{
	const struct jrecord *c = &w->r.rec[i];
	const char *p2 = w->path2[i] ? w->path2[i] : "";
	const struct stat *was = before[0] ? before[0] : before[1];
	char msg[PATH_MAX + 512];
	int ret, err;

	*after = before[0];
	if (w->o->flags & JW_DRY_RUN) {
		say(w, 0, "would undo %llu %s %s%s%s", (unsigned long long)c->seq, jtype_name(c->type),
		    w->path[i], arrow(w->path2[i]), p2);
		return 0;
	}
	uint64_t ino[2] = { 0, 0 };
	if (was) {
		ino[0] = (uint64_t)was->st_dev;
		ino[1] = (uint64_t)was->st_ino;
	}
	if (ino[1] && (err = mark(w, J_UNDOING, c->seq, ino)) < 0) {
		say(w, 2, "cannot write into '%s': %s", w->dir, strerror(-err));
		return err;
	}
	struct jstat j;
	struct jundo_hints h = { .other_name = other_name, .ctx = w, .way = &w->way };
	if (c->type == J_RENAME && jrec_stat(c, F_STAT, &j))
		renamed_alias(w, &j, h.alias);
	ret = jundo_hinted(&w->r, c, &h, msg, sizeof(msg));
	*after = look(w->path[i], buf);
	if (ret >= 0 && *after && S_ISREG((*after)->st_mode)) {
		renewed(w, c, (uint64_t)(*after)->st_ino);
		if (w->names_read)
			names_put(w, (uint64_t)(*after)->st_dev, (uint64_t)(*after)->st_ino, w->path[i]);
	}
	if (!ino[1] && *after) {
		ino[0] = (uint64_t)(*after)->st_dev;
		ino[1] = (uint64_t)(*after)->st_ino;
	}
	crash_hook(w);
	if (ret < 0) {
		say(w, 2, "undo %llu %s %s%s%s: %s", (unsigned long long)c->seq, jtype_name(c->type),
		    w->path[i], arrow(w->path2[i]), p2, msg);
		w->st->failed++;
		/* a directory's times that cannot be set (another user's)
		 * leave its entries, and its parent's own records, to go on */
		if (!weak(c))
			hold(w, i);
		return 1;
	}
	err = mark(w, J_REWOUND, c->seq, ino);
	if (err) {
		say(w, 2, "cannot write the rewind mark of seq %llu to '%s': %s",
		    (unsigned long long)c->seq, w->dir, strerror(-err));
		return err;
	}
	say(w, 0, "undo %llu %s %s%s%s: %s%s%s%s", (unsigned long long)c->seq, jtype_name(c->type),
	    w->path[i], arrow(w->path2[i]), p2, ret ? "already" : "restored",
	    *msg ? " (" : "", msg, *msg ? ")" : "");
	if (ret)
		w->st->already++;
	else
		w->st->undone++;
	return 0;
}

/* Undo the selection in strictly decreasing seq. Returns how many were
 * selected, or -errno when it had to stop. */
static long apply_all(struct rw *w)
{
	long selected = 0;
	int err;

	/* Be able to record progress before changing anything. */
	for (size_t i = 0; i < w->n && !(w->o->flags & JW_DRY_RUN); i++) {
		if (w->state[i] & R_SEL) {
			err = open_marks(w);
			if (err) {
				say(w, 2, "cannot write rewind marks into '%s': %s", w->dir, strerror(-err));
				return err;
			}
			break;
		}
	}
	for (size_t i = w->n; i-- > 0;) {
		if (!(w->state[i] & R_SEL))
			continue;
		selected++;
		if (is_held(w, i)) {
			w->st->skipped++;
			continue;
		}
		/* one lstat of each path before the undo and one after serve
		 * the drift check, the inodes this run changes and the marks */
		struct stat now[3];
		const struct stat *before[2] = { look(w->path[i], &now[0]), look(w->path2[i], &now[1]) };
		const struct stat *after;

		if (drifted(w, i, before[0])) {
			say(w, 1, "drift: %s changed after the journal last saw it; left alone "
			    "(--force undoes it anyway)", w->path[i]);
			w->st->drift++;
			hold(w, i);
			continue;
		}
		touch_inode(w, before[0]);
		touch_inode(w, before[1]);
		err = apply(w, i, before, &after, &now[2]);
		touch_path(w, w->path[i], after);
		if (w->path2[i])
			touch_path(w, w->path2[i], look(w->path2[i], &now[1]));
		if (err < 0)
			return err;
	}
	return selected;
}

static void cleanup(struct rw *w)
{
	for (size_t i = 0; i < w->n; i++) {
		free(w->path[i]);
		free(w->path2[i]);
	}
	free(w->path);
	free(w->path2);
	free(w->state);
	kt_free(&w->marks);
	kt_free(&w->ends);
	kt_free(&w->late);
	kt_free(&w->txns);
	kt_free(&w->settle);
	kt_free(&w->isettle);
	kt_free(&w->undoing);
	kt_free(&w->held);
	kt_free(&w->touched);
	kt_free(&w->inodes);
	kt_free(&w->markino);
	kt_free(&w->renewed);
	kt_free(&w->names);
	for (size_t i = 0; i < w->nnames; i++)
		free(w->namelist[i]);
	free(w->namelist);
	if (w->seg_open) {
		jseg_close(&w->g);
		jsession_close(&w->s);
	}
	jreader_close(&w->r);
}

int jrewind(const char *dir, const struct jrewind_opts *o, struct jrewind_stats *st)
{
	struct jrewind_stats dummy;
	struct rw w = { .dir = dir, .o = o };
	const char *crash = getenv("FTSBX_REWIND_CRASH_AFTER");
	char err[PATH_MAX + 256];
	long selected;
	int ret;

	w.st = st ? st : &dummy;
	memset(w.st, 0, sizeof(*w.st));
	w.crash_after = crash ? strtol(crash, NULL, 10) : 0;
	ret = jreader_open(&w.r, dir, err, sizeof(err));
	if (ret < 0) {
		say(&w, 2, "%s", err);
		jreader_close(&w.r);
		return ret;
	}
	report_damage(&w);
	index_records(&w);
	if (o->txn)
		nt_put(&w.txns, o->txn, 0);
	select_records(&w);
	ret = o->txn ? check_dependents(&w) : 0;
	if (ret)
		goto out;
	skip_stale_weak(&w);
	compute_settle(&w);
	selected = apply_all(&w);
	if (selected < 0) {
		ret = (int)selected;
		goto out;
	}
	if (selected == 0)
		say(&w, 0, "nothing to do");
	/* the transaction's processes may live on (a job it left running, a
	 * group's next member): their next changes are captured afresh */
	if (w.seg_open && (w.st->undone || w.st->already))
		dedup_rewound(&w.s);
	ret = w.st->drift || w.st->failed ? 1 : 0;
out:
	cleanup(&w);
	return ret;
}
