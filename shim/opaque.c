/*
 * opaque.c - programs the shim cannot see into, found at exec by looking at
 * the ELF file: static binaries (no PT_INTERP: no preloading at all; a
 * static-pie one too, not the loader run as a program), programs of
 * another ELF class or machine (32-bit, x32) or of another C library
 * (musl's loader), which the shim cannot be loaded into (a musl program
 * runs without LD_PRELOAD), set-user-ID and set-group-ID programs (the loader drops LD_PRELOAD
 * for them) and Go programs (their runtime makes system calls itself, even
 * when linked dynamically: a Go build-ID note), and what each file is kept
 * per inode while it stays unchanged (kind_of). The policy says what to do
 * ([programs]): refuse, or allow with a warning and a record; allowed ones
 * are confined to the writable roots by Landlock where the kernel has it,
 * so that they cannot write anywhere else. Landlock cannot except a
 * directory inside a root, so keep the journal outside the writable roots
 * (the default, ~/.local/state, is).
 */
#include <dirent.h>
#include <elf.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "shim.h"
#include "../policy/policy.h"

/* FILE as execvp would find it, into OUT (false when not found). */
HIDDEN bool shim_find_program(const char *file, char out[PATH_MAX])
{
	const char *path = shim_getenv("PATH");

	if (!file || !*file)
		return false;
	if (strchr(file, '/')) {
		size_t n = strnlen(file, PATH_MAX - 1);
		memcpy(out, file, n);
		out[n] = 0;
		return true;
	}
	for (const char *s = path ? path : "/usr/local/bin:/usr/bin:/bin"; *s;) {
		size_t n = strcspn(s, ":");
		if (n && n + strlen(file) + 2 < PATH_MAX) {
			memcpy(out, s, n);
			out[n] = '/';
			strcpy(out + n + 1, file);
			if (access(out, X_OK) == 0)
				return true;
		}
		s += n + (s[n] == ':');
	}
	return false;
}

/* Kinds of this file's own, judged as the policy's [programs] static,
 * which the shim cannot be loaded into: a program of another ELF class or
 * machine (a 32-bit or x32 program, an emulated one: its loader passes
 * LD_PRELOAD on to what it runs); one whose loader is musl's (it would fail
 * to start, the shim's libc symbols not found), which runs without
 * LD_PRELOAD (exec_no_preload), and so do the programs it starts. And,
 * while the file is looked at, one that names no loader (static_pie tells
 * the rest). */
#define PO_FOREIGN  PO_KINDS
#define PO_OTHERLD  (PO_KINDS + 1)
#define PO_NOINTERP (PO_KINDS + 2)
#if defined(__x86_64__)
#define SHIM_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define SHIM_MACHINE EM_AARCH64
#endif

/* Whether the loader named (N bytes, its NUL included) is musl's, by its
 * file's name: ld-musl-ARCH.so.1, wherever it lies. Any other is taken for
 * glibc's, whatever its name (Homebrew's lib/ld.so, a Nix store's). */
static bool musl_loader(const char *name, size_t n)
{
	const char *end = memchr(name, 0, n), *base = name;

	if (!end)
		return false;   /* not a name: the kernel's exec fails on it */
	for (const char *s = name; s < end; s++)
		if (*s == '/')
			base = s + 1;
	return !strncmp(base, "ld-musl-", 8);
}

/* The kind of the ELF file in BUF (N bytes of its start), or -1; *SHORT:
 * a program header or note lay beyond N (more of the file could change the
 * answer). */
static int elf_kind(const unsigned char *buf, size_t n, bool *short_read)
{
	Elf64_Ehdr eh;
	bool interp = false, go = false, other = false;

	*short_read = false;
	if (n < EI_NIDENT || memcmp(buf, ELFMAG, SELFMAG))
		return -1;      /* a script: its interpreter is checked */
	if (buf[EI_CLASS] == ELFCLASS32)
		return PO_FOREIGN;
	if (n < sizeof(eh) || buf[EI_CLASS] != ELFCLASS64)
		return -1;
	memcpy(&eh, buf, sizeof(eh));
#ifdef SHIM_MACHINE
	if (eh.e_machine != SHIM_MACHINE)
		return PO_FOREIGN;
#endif
	for (int i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		size_t off = eh.e_phoff + (size_t)i * sizeof(ph);
		if (off + sizeof(ph) > n) {
			*short_read = true;
			break;
		}
		memcpy(&ph, buf + off, sizeof(ph));
		if (ph.p_type == PT_INTERP) {
			interp = true;
			if (ph.p_offset + ph.p_filesz > n)
				*short_read = true;
			else if (ph.p_filesz)
				other = musl_loader((const char *)buf + ph.p_offset, ph.p_filesz);
		}
		if (ph.p_type == PT_NOTE && ph.p_offset + ph.p_filesz > n)
			*short_read = true;
		if (ph.p_type == PT_NOTE && ph.p_offset + ph.p_filesz <= n) {
			/* the Go build ID: a note named "Go" (Go's linker
			 * writes the name "Go\0\0", of size 4; 3 is the size
			 * the ELF convention would give it) */
			for (size_t o = ph.p_offset; o + 12 <= ph.p_offset + ph.p_filesz;) {
				Elf64_Nhdr nh;
				memcpy(&nh, buf + o, sizeof(nh));
				bool named_go = nh.n_namesz == 3 || nh.n_namesz == 4;
				if (named_go && o + 15 > n)
					*short_read = true;
				if (named_go && o + 15 <= n && !memcmp(buf + o + 12, "Go", 3))
					go = true;
				o += 12 + ((nh.n_namesz + 3) & ~3u) + ((nh.n_descsz + 3) & ~3u);
			}
		}
	}
	if (!interp && eh.e_type == ET_EXEC)
		return PO_STATIC;
	if (go)
		return PO_GO;
	if (other)
		return PO_OTHERLD;
	/* every program header read, and none names a loader */
	return !interp && eh.e_type == ET_DYN && !*short_read && eh.e_phnum ? PO_NOINTERP : -1;
}

/* Whether the ELF file FD (HEAD: its first 1024 bytes) that names no
 * loader says it is a position-independent executable (DF_1_PIE in its
 * dynamic section): a static-pie program. The loader run as a program
 * (PO_LDSO: it honours LD_PRELOAD, so the program it runs is seen into;
 * refused only where [programs] ldso = refuse) and a library say nothing
 * of the kind. Apart, as opaque_kind_more, for its buffer. */
static __attribute__((noinline)) bool static_pie(int fd, const unsigned char head[1024])
{
	Elf64_Ehdr eh;
	Elf64_Dyn dyn[128];

	memcpy(&eh, head, sizeof(eh));
	for (int i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		size_t off = eh.e_phoff + (size_t)i * sizeof(ph);
		if (off + sizeof(ph) > 1024)
			return false;
		memcpy(&ph, head + off, sizeof(ph));
		if (ph.p_type != PT_DYNAMIC)
			continue;
		size_t len = ph.p_filesz < sizeof(dyn) ? ph.p_filesz : sizeof(dyn);
		ssize_t got = pread(fd, dyn, len, (off_t)ph.p_offset);
		for (size_t k = 0; got > 0 && k < (size_t)got / sizeof(dyn[0]) && dyn[k].d_tag != DT_NULL; k++)
			if (dyn[k].d_tag == DT_FLAGS_1)
				return dyn[k].d_un.d_val & DF_1_PIE;
		return false;
	}
	return false;
}

/* The rest of the first 8 KiB of FD (HEAD: its first 1024 bytes), when
 * those decide. Apart, so that its buffer is on the stack only then: an
 * exec in a shell's fork child writes every new page of stack it reaches
 * (a page fault each). */
static __attribute__((noinline)) int opaque_kind_more(int fd, const unsigned char head[1024], int kind)
{
	unsigned char buf[8192];
	bool short_read;
	ssize_t more;

	memcpy(buf, head, 1024);
	if ((more = pread(fd, buf + 1024, sizeof(buf) - 1024, 1024)) > 0)
		kind = elf_kind(buf, (size_t)(1024 + more), &short_read);
	return kind;
}

/* What kind of opaque program PATH is, or -1; *ST: the file's identity
 * (st_ino 0 when the file could not be read). The first 8 KiB decide
 * (the program headers and the notes in them); 1 KiB is read first, which
 * holds them in most programs, and the rest only when the answer could
 * depend on it. */
static int opaque_kind(const char *path, struct stat *st)
{
	unsigned char buf[1024];
	bool short_read;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC), kind;

	st->st_ino = 0;
	if (fd < 0)
		return -1;
	if (fstat(fd, st) < 0) {
		st->st_ino = 0;
		close(fd);
		return -1;
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		return -1;
	}
	if (st->st_mode & (S_ISUID | S_ISGID)) {
		close(fd);
		return PO_SETUID;
	}
	n = pread(fd, buf, sizeof(buf), 0);
	kind = elf_kind(buf, n > 0 ? (size_t)n : 0, &short_read);
	if (short_read && n == (ssize_t)sizeof(buf))
		kind = opaque_kind_more(fd, buf, kind);
	if (kind == PO_NOINTERP)
		kind = static_pie(fd, buf) ? PO_STATIC : PO_LDSO;
	close(fd);
	return kind;
}

/*
 * The kinds of the programs already looked at, by inode: the agent runs the
 * same few programs again and again, and a look is four system calls (an
 * open, an fstat, a read and a close) where the cache's check is one stat.
 * An entry holds the file's identity when it was read: device, inode,
 * mode, size, modification and change times. Any write, truncation, chmod,
 * chown or rename over the file changes its change time (which no program
 * can set), and a new file at the same inode has its own: a stat that
 * matches the entry in every field is the file that was read. A change
 * within the same clock tick as the file's last one would keep its change
 * time (timestamps are coarse), so files changed less than two seconds
 * before they are read are not kept (as git does for its racy index
 * entries). Files that could not be opened are not kept either: that
 * depends on who asks.
 *
 * Lock-free (exec hooks run in vfork children, on several threads and in
 * signal handlers): each entry has a sequence number, odd while an entry is
 * written; a reader that sees it odd or changed takes it as a miss.
 */
#define NKIND 64
static struct kind_entry {
	unsigned seq;
	int kind;
	dev_t dev;
	ino_t ino;
	mode_t mode;
	off_t size;
	struct timespec mtim, ctim;
} kinds[NKIND];

static struct kind_entry *kind_slot(const struct stat *st)
{
	uint64_t h = ((uint64_t)st->st_dev * 0x9e3779b97f4a7c15ull) ^ (uint64_t)st->st_ino;

	return &kinds[(h * 0x9e3779b97f4a7c15ull) >> 58];
}

#define LD(f) __atomic_load_n(&e->f, __ATOMIC_RELAXED)
#define ST(f, v) __atomic_store_n(&e->f, v, __ATOMIC_RELAXED)

/* Whether this process ever kept a kind: a shell's fork child finds its
 * parent's cache empty, and its first look at it would be a page fault. */
static bool kinds_kept HOT_DATA;
/* Set around the judgement of an exec in place (exec.c): its answer goes
 * with the process image, and a fork child's write to the cache would be a
 * page fault of its own. */
HIDDEN __thread bool kind_keep_off __attribute__((tls_model("initial-exec")));

static bool kind_cached(const struct stat *st, int *kind)
{
	if (!__atomic_load_n(&kinds_kept, __ATOMIC_ACQUIRE))
		return false;

	struct kind_entry *e = kind_slot(st);
	unsigned seq = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
	bool same = !(seq & 1) && LD(ino) == st->st_ino && LD(dev) == st->st_dev && LD(mode) == st->st_mode &&
		    LD(size) == st->st_size && LD(mtim.tv_sec) == st->st_mtim.tv_sec &&
		    LD(mtim.tv_nsec) == st->st_mtim.tv_nsec && LD(ctim.tv_sec) == st->st_ctim.tv_sec &&
		    LD(ctim.tv_nsec) == st->st_ctim.tv_nsec;

	*kind = LD(kind);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return same && __atomic_load_n(&e->seq, __ATOMIC_RELAXED) == seq;
}

static void kind_keep(const struct stat *st, int kind)
{
	struct kind_entry *e;
	struct timespec now;
	unsigned seq;

	if (kind_keep_off || !st->st_ino || clock_gettime(CLOCK_REALTIME, &now) ||
	    now.tv_sec - st->st_ctim.tv_sec < 2 || now.tv_sec - st->st_mtim.tv_sec < 2)
		return;
	e = kind_slot(st);
	seq = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
	if ((seq & 1) || !__atomic_compare_exchange_n(&e->seq, &seq, seq + 1, false, __ATOMIC_ACQUIRE,
						      __ATOMIC_RELAXED))
		return;         /* another writer has it */
	__atomic_thread_fence(__ATOMIC_RELEASE);        /* the odd number before the fields */
	ST(kind, kind);
	ST(dev, st->st_dev);
	ST(ino, st->st_ino);
	ST(mode, st->st_mode);
	ST(size, st->st_size);
	ST(mtim.tv_sec, st->st_mtim.tv_sec);
	ST(mtim.tv_nsec, st->st_mtim.tv_nsec);
	ST(ctim.tv_sec, st->st_ctim.tv_sec);
	ST(ctim.tv_nsec, st->st_ctim.tv_nsec);
	__atomic_store_n(&e->seq, seq + 2, __ATOMIC_RELEASE);
	__atomic_store_n(&kinds_kept, true, __ATOMIC_RELEASE);
}

/* opaque_kind, from the cache when PATH's file is one already read; KNOWN
 * (if not NULL, st_ino not 0): PATH's file as stat would give it. */
static int kind_of(const char *path, const struct stat *known)
{
	struct stat st;
	int kind;

	if (known && known->st_ino && kind_cached(known, &kind))
		return kind;
	if ((!known || !known->st_ino) && stat(path, &st) == 0 && kind_cached(&st, &kind))
		return kind;
	kind = opaque_kind(path, &st);
	kind_keep(&st, kind);
	return kind;
}

HIDDEN bool opaque_program(const char *file)
{
	char path[PATH_MAX];
	int kind;

	return shim_find_program(file, path) && (kind = kind_of(path, NULL)) >= 0 && kind != PO_LDSO;
}

static const char *const kind_name[PO_OTHERLD + 1] = {
	[PO_STATIC] = "a static binary", [PO_SETUID] = "a set-user-ID program",
	[PO_GO] = "a Go program", [PO_LDSO] = "the dynamic loader run as a program",
	[PO_FOREIGN] = "a program of another architecture (32-bit, or another machine's)",
	[PO_OTHERLD] = "a program of another C library (musl's: it runs, and what it starts, without the shim)",
};

HIDDEN __thread bool exec_no_preload __attribute__((tls_model("initial-exec")));

/* Add a rule: ACCESS beneath DIR. False (errno set) where DIR cannot be
 * opened; LISTED (or NULL): the listings of its directories (policy/
 * dirlist.c), from which a missing root is known without an open. */
static bool allow_beneath_in(int rs, const char *dir, uint64_t access, struct dirlist *listed)
{
	struct landlock_path_beneath_attr pb = { .allowed_access = access };

	if (listed && dirlist_there(listed, dir) == 0) {
		errno = ENOENT;
		return false;
	}
	pb.parent_fd = open(dir, O_PATH | O_CLOEXEC);
	if (pb.parent_fd < 0)
		return false;
	syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
	close(pb.parent_fd);
	return true;
}

static bool allow_beneath(int rs, const char *dir, uint64_t access)
{
	return allow_beneath_in(rs, dir, access, NULL);
}

/* The ancestors a ruleset's build opened for missing roots already (the
 * default's missing roots under HOME lead to HOME or ~/.local a dozen
 * times: one rule each is enough). */
struct seen_dirs {
	unsigned n;
	char dir[8][128];
};

/* Whether DIR is in SEEN; remembered if not. A directory whose open failed
 * is remembered too: the walk that failed there went on up to one that a
 * rule covers it with. */
static bool ancestor_seen(struct seen_dirs *seen, const char *dir)
{
	size_t len = strlen(dir);

	if (len >= sizeof(seen->dir[0]))
		return false;
	for (unsigned i = 0; i < seen->n && i < 8; i++)
		if (!strcmp(seen->dir[i], dir))
			return true;
	memcpy(seen->dir[seen->n++ % 8], dir, len + 1);
	return false;
}

/* A rule binds to a directory that exists now. A root that does not yet
 * (~/.npm, ~/.cache, ~/.local/lib in a new HOME) would stay closed to the
 * whole session: the session's own domain opens its nearest existing
 * ancestor instead, when that lies in HOME (not HOME's parents), and the
 * shim's path rules keep the rest of HOME closed to every program it sees
 * into. A program it cannot see into gets its own domain at its exec, from
 * the roots that exist then, with no such widening. */
static void allow_missing_root(int rs, const char *root, uint64_t access, struct seen_dirs *seen,
			       struct dirlist *listed)
{
	const char *home = shim_getenv("HOME");
	size_t hn = home ? strlen(home) : 0;
	char dir[PATH_MAX];
	char *slash;

	while (hn > 1 && home[hn - 1] == '/')
		hn--;
	if (hn < 2 || home[0] != '/' || strncmp(root, home, hn) || (root[hn] && root[hn] != '/') ||
	    strlen(root) >= sizeof(dir))
		return;
	strcpy(dir, root);
	while ((slash = strrchr(dir, '/')) && (size_t)(slash - dir) >= hn) {
		*slash = 0;
		if (ancestor_seen(seen, dir) || allow_beneath_in(rs, dir, access, listed))
			return;
	}
}

/* What the session's seccomp filter refuses (EPERM), on every ABI of the
 * machine, raw system calls and static programs included: calls that no
 * journal can undo and that act on the whole machine (restarting it, its
 * kernel modules, swap, clock, host name, I/O ports, process accounting,
 * BPF programs), and open_by_handle_at, which opens a file by its handle
 * where no path rule (hidden, outside the roots) and no Landlock rule is
 * asked. A root agent's ctypes reboot(), or busybox's, would otherwise take
 * the host down. */
static const long machine_calls[] = {
	SYS_reboot, SYS_kexec_load, SYS_init_module, SYS_finit_module, SYS_delete_module, SYS_swapon,
	SYS_swapoff, SYS_sethostname, SYS_setdomainname, SYS_settimeofday, SYS_clock_settime,
	SYS_acct, SYS_bpf, SYS_open_by_handle_at,
#ifdef SYS_kexec_file_load
	SYS_kexec_file_load,
#endif
#ifdef SYS_iopl
	SYS_iopl, SYS_ioperm,
#endif
};
#ifdef __x86_64__
/* the same calls, and io_uring_setup, as a 32-bit program makes them (int 0x80;
 * clock_settime64 too) */
static const long machine_calls_i386[] = { 88, 283, 128, 350, 129, 87, 115, 74, 121, 79, 264, 404,
					   51, 357, 342, 110, 101 };
#define IO_URING_I386 425
_Static_assert(sizeof(machine_calls_i386) <= sizeof(machine_calls), "session_filter sizes f by machine_calls");
#endif

#define RET(v)   ((struct sock_filter)BPF_STMT(BPF_RET | BPF_K, (v)))
#define LOAD(m)  ((struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, m)))
#define IFEQ(k)  ((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)(k), 0, 1))
#define JEQ(k, t, e) ((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)(k), (t), (e)))
/* the low 32 bits of argument I (a mode_t) */
#define LOAD_ARG(i) ((struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, \
	offsetof(struct seccomp_data, args[i]) + (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? 4 : 0)))

/* One ABI's numbers: io_uring_setup, the machine_calls, mknod and
 * mknodat (-1: the ABI has no such call), whose mode is argument 1 and 2,
 * and ioctl. */
struct abi { uint32_t arch; bool x32; long io_uring, mknod, mknodat, ioctl, ioctl_x32; const long *nrs; size_t n; };

/* One ABI's block at F: when the call's arch is A's, refuse io_uring_setup
 * and the machine calls, mknod(at) of a character or block device, and
 * ioctl(TIOCSTI), which types into a terminal: into the shell the agent
 * was started from, which runs it once the session is over, outside the
 * policy and the journal; else skip to the next block. The mode and the
 * ioctl's request are the only arguments looked at, and only for those
 * three calls: the kernel still caches the answer for every other call. */
static size_t abi_block(struct sock_filter *f, const struct abi *a)
{
	size_t k = 0, jump;
	const long mk[2] = { a->mknod, a->mknodat };

	f[k++] = LOAD(arch);
	jump = k++;
	f[k++] = LOAD(nr);
	if (a->x32)
		f[k++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, ~0x40000000u);
	f[k++] = IFEQ(a->io_uring);
	f[k++] = RET(SECCOMP_RET_ERRNO | ENOSYS);
	for (size_t i = 0; i < a->n; i++) {
		f[k++] = IFEQ(a->nrs[i]);
		f[k++] = RET(SECCOMP_RET_ERRNO | EPERM);
	}
	for (int i = 0; i < 2; i++) {
		if (mk[i] < 0)
			continue;
		f[k++] = JEQ(mk[i], 0, 6);
		f[k++] = LOAD_ARG(i + 1);
		f[k++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, S_IFMT);
		f[k++] = JEQ(S_IFCHR, 2, 0);
		f[k++] = JEQ(S_IFBLK, 1, 0);
		f[k++] = RET(SECCOMP_RET_ALLOW);
		f[k++] = RET(SECCOMP_RET_ERRNO | EPERM);
	}
	f[k++] = JEQ(a->ioctl, 1, 0);
	f[k++] = JEQ(a->ioctl_x32, 0, 4);       /* x32's own number (masked above) */
	f[k++] = LOAD_ARG(1);
	f[k++] = JEQ(TIOCSTI, 0, 1);
	f[k++] = RET(SECCOMP_RET_ERRNO | EPERM);
	f[k++] = RET(SECCOMP_RET_ALLOW);
	f[k++] = RET(SECCOMP_RET_ALLOW);
	f[jump] = JEQ(a->arch, 0, k - jump - 1);
	return k;
}

/*
 * Once no_new_privs is set (after the Landlock domain): io_uring_setup
 * fails with ENOSYS in this process and everything it starts, raw system
 * calls and static programs included (see IO_URING_WHY), the
 * machine_calls with EPERM, and so does
 * making a device node (a c 1 1 node in a writable root would be
 * /dev/mem). Apart from mknod's, the filter looks at the call's number
 * only, so the kernel caches its answer for every other call; it still
 * puts each system call of the session on the slower entry path (about
 * 50 ns here). False when no filter could be set.
 */
static bool session_filter(void)
{
	enum { NM = sizeof(machine_calls) / sizeof(machine_calls[0]) };
	struct sock_filter f[2 * (4 + 2 * (NM + 1) + 2 * 7 + 6 + 1) + 1];
	size_t k = 0;

#if defined(__x86_64__)
	static const struct abi abis[] = {
		{ AUDIT_ARCH_X86_64, true, SYS_io_uring_setup, SYS_mknod, SYS_mknodat, SYS_ioctl, 514, machine_calls, NM },
		{ AUDIT_ARCH_I386, false, IO_URING_I386, 14, 297, 54, 54, machine_calls_i386,
		  sizeof(machine_calls_i386) / sizeof(machine_calls_i386[0]) },
	};
#elif defined(__aarch64__)
	static const struct abi abis[] = {
		{ AUDIT_ARCH_AARCH64, false, SYS_io_uring_setup, -1, SYS_mknodat, SYS_ioctl, SYS_ioctl, machine_calls, NM },
	};
#else
	return false;   /* no arch known to check the numbers against */
#endif
	for (size_t i = 0; i < sizeof(abis) / sizeof(abis[0]); i++)
		k += abi_block(f + k, &abis[i]);
	f[k++] = RET(SECCOMP_RET_ALLOW);   /* another ABI: none is ours to judge */
	struct sock_fprog prog = { .len = (unsigned short)k, .filter = f };

	/* SPEC_ALLOW: where the kernel's spec_store_bypass mode is "seccomp"
	 * (the default of kernels before 5.16), a filter without it turns on
	 * the store-bypass mitigation for the whole process and everything it
	 * starts, a slowdown of every program of the session that the same
	 * program run natively never pays. The filter guards the machine
	 * against an agent's mistakes, not against a side channel; a program
	 * that wants the mitigation still asks for it with prctl. */
	return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW, &prog) == 0 ||
	       prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0;
}

/* Landlock's later ABIs, which this system's <linux/landlock.h> may not
 * know yet (their numbers are the kernel's ABI). */
#define LL_TRUNCATE     (1ULL << 14)    /* ABI 3: truncate, O_TRUNC */
#define LL_IOCTL_DEV    (1ULL << 15)    /* ABI 5: ioctl on a device */
#define LL_SCOPE_SIGNAL (1ULL << 1)     /* ABI 6: signals to processes outside */
struct ll_ruleset { uint64_t fs, net, scoped; };

/* The devices of policy_devices, ACCESS on each: the names /dev holds
 * that it lists (a directory such as pts/, beneath), and the virtual
 * console the root runs at. getdents64 and not readdir: this can run in a
 * vfork child, before an exec. */
static void allow_devices(int rs, uint64_t access)
{
	char buf[4096], name[256], path[300];
	int fd = open("/dev", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	uint64_t own = policy_own_consoles();   /* the console the agent runs at, if it does */
	long n;

	if (fd < 0)
		return;
	while ((n = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0)
		for (long off = 0; off < n;) {
			const struct dirent64 *d = (const struct dirent64 *)(buf + off);
			size_t k = strnlen(d->d_name, sizeof(name) - 2);

			off += d->d_reclen;
			memcpy(name, d->d_name, k);
			name[k] = d->d_type == DT_DIR ? '/' : 0;
			name[k + 1] = 0;
			int vt = policy_console_number(name);
			if (d->d_name[0] != '.' && (policy_device_ok(name) || (vt >= 0 && (own >> vt & 1)))) {
				memcpy(path, "/dev/", 5);
				memcpy(path + 5, d->d_name, k + 1);
				allow_beneath(rs, path, access);
			}
		}
	close(fd);
}

#define DEVICE_NODES (LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_BLOCK)

/* A Landlock layer that refuses device nodes and nothing else. */
static bool device_layer(void)
{
	struct ll_ruleset attr = { .fs = DEVICE_NODES };
	int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
	bool ok = rs >= 0 && syscall(SYS_landlock_restrict_self, rs, 0) == 0;

	if (rs >= 0)
		close(rs);
	return ok;
}

/* Confine this process and everything it starts to the writable roots
 * (and the journal, when JOURNAL is not NULL: the shim writes it): writes,
 * creations, removals, renames, truncations; device nodes are made
 * nowhere, and only policy_devices are written or driven (ioctl); with
 * signals = session, no signal leaves the root's domain.
 *
 * Device nodes are refused by the seccomp filter, not by Landlock, where
 * the kernel has seccomp filters (asked before the ruleset is made; one
 * that cannot be set after all gets a Landlock layer that refuses device
 * nodes, device_layer): a rule that grants every right the ruleset handles
 * ends Landlock's walk of a rename's two directories at the first ruled
 * ancestor (the root, the journal). With MAKE_CHAR and MAKE_BLOCK handled
 * and granted nowhere, each rename across directories (rm's unlink is one
 * into the journal) walked both to the mount's root and a third time from
 * the file: 10 % of an rm -rf.
 *
 * Truncation by path (truncate(2), O_TRUNC without write access) is
 * handled only in a program's own layer (JOURNAL NULL: one the shim cannot
 * see into), not in the session's: Landlock checks it at every open, a
 * read-only one too, as a walk from the file to the mount's root, which
 * made an open+close 35 % slower (760 -> 1030 ns; without it +55 ns). In
 * the processes the shim is in, it checks truncation itself; what the
 * session's layer leaves open is a truncate by a raw system call written
 * into a program the shim is in (not one made through syscall(), which
 * the shim checks). A program the shim cannot see into (static or
 * static-pie, Go, 32-bit) and its children get the program's layer,
 * truncation included. */
HIDDEN bool landlock_roots(const struct policy *pol, const char *journal)
{
	struct ll_ruleset attr = {
		.fs = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
		      LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_DIR |
		      LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
		      LANDLOCK_ACCESS_FS_MAKE_SYM,
	};
	int abi = (int)syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	uint32_t errno_action = SECCOMP_RET_ERRNO;
	uint64_t roots, dev;
	int rs, ok = 1;
	bool filters;

	if (abi < 1)
		return false;
	filters = syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &errno_action) == 0;
	if (!filters)
		attr.fs |= DEVICE_NODES;
	attr.fs |= (abi >= 2 ? LANDLOCK_ACCESS_FS_REFER : 0) | (abi >= 3 && !journal ? LL_TRUNCATE : 0) |
		   (abi >= 5 ? LL_IOCTL_DEV : 0);
	/* The root's domain, which the whole session shares, keeps signals in;
	 * a program's own (nested: no journal) adds none, so that a static
	 * kill may still signal the session's processes outside it. */
	if (abi >= 6 && journal && policy_signals_session(pol))
		attr.scoped = LL_SCOPE_SIGNAL;
	rs = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
	if (rs < 0)
		return false;
	roots = attr.fs & ~(uint64_t)DEVICE_NODES;
	dev = attr.fs & (LANDLOCK_ACCESS_FS_WRITE_FILE | LL_IOCTL_DEV);
	/* the session's roots: the default's some forty caches under HOME,
	 * most of them missing, found so in HOME's listing (the root's
	 * constructor: an opaque program's layer is made in a vfork child,
	 * where the listings' malloc may not run) */
	struct seen_dirs seen = { 0 };
	struct dirlist listed = { .n = 0 }, *dl = journal ? &listed : NULL;
	for (size_t i = 0; policy_root(pol, i); i++)
		if (!allow_beneath_in(rs, policy_root(pol, i), roots, dl) && journal && errno == ENOENT)
			allow_missing_root(rs, policy_root(pol, i), roots, &seen, dl);
	if (dl)
		dirlist_free(dl);
	if (journal)
		allow_beneath(rs, journal, roots);
	/* the terminals, /dev/null and the accelerators, /dev/shm, and a
	 * process's own /proc files (no rule can name another's) stay writable */
	allow_devices(rs, dev);
	allow_beneath(rs, "/dev/shm", roots);
	allow_beneath(rs, "/proc", attr.fs & (LANDLOCK_ACCESS_FS_WRITE_FILE | LL_TRUNCATE));
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || syscall(SYS_landlock_restrict_self, rs, 0) < 0)
		ok = 0;
	close(rs);
	/* tried wherever asked (the probe may fail where prctl's way works);
	 * one that could not be set after all, where the probe said it could:
	 * a layer of its own refuses device nodes everywhere */
	if (ok && !session_filter() && filters)
		ok = device_layer();
	return ok;
}

/* PATH is a program of KIND the shim cannot see into: refused, or let
 * through with a warning. Apart from opaque_exec_known, so that its
 * buffer is on the stack only for such a program. */
static __attribute__((noinline)) int opaque_verdict(const struct policy *pol, const char *path, int kind,
						    char *const argv[])
{
	char why[PATH_MAX + 160];

	if (policy_opaque(pol, kind >= PO_KINDS ? PO_STATIC : kind) == PO_REFUSE) {
		if (kind == PO_LDSO)
			snprintf(why, sizeof(why), "[programs] ldso: %s", kind_name[kind]);
		else
			snprintf(why, sizeof(why), "[programs] %s: the shim cannot see into %s",
				 kind == PO_SETUID ? "setuid" : kind == PO_GO ? "go" : "static", kind_name[kind]);
		return shim_refuse("exec", path, NULL, argv, why, EPERM);
	}
	if (kind == PO_LDSO)
		return 0;       /* it preloads the shim into what it runs: seen into */
	exec_no_preload = kind == PO_OTHERLD;
	bool confined = policy_landlock(pol) != PL_OFF && landlock_roots(pol, NULL);
	if (!confined && policy_landlock(pol) == PL_REQUIRE)
		return shim_refuse("exec", path, NULL, argv, "[policy] landlock = on, but the kernel has none",
				   EPERM);
	snprintf(why, sizeof(why), "ftsbx: warning: '%s' is %s: its changes are not journaled%s\n", path,
		 kind_name[kind], confined ? "; confined to the writable roots by Landlock" : "");
	if (write(2, why, strlen(why)) < 0)
		return 0;
	return 0;
}

/* Before an exec of FILE (ARGV): 0 to go on, or the errno that refuses.
 * KNOWN (if not NULL): the program's file when FILE (else ARGV[0]) names it
 * by a path, as policy_exec_stat found it (guard.c). */
/* The kind of the program FILE (else ARGV[0]) names, into PATH as execvp
 * finds it; -1 when none or not found. KNOWN: see opaque_exec_known. */
static int program_kind(const char *file, char *const argv[], const struct stat *known, char path[PATH_MAX])
{
	const char *name = file ? file : argv && argv[0] ? argv[0] : NULL;

	if (!shim_find_program(name, path))
		return -1;
	return kind_of(path, strchr(name, '/') ? known : NULL);
}

HIDDEN int opaque_exec_known(const struct policy *pol, const char *file, char *const argv[],
			     const struct stat *known)
{
	char path[PATH_MAX];
	int kind = program_kind(file, argv, known, path);

	return kind < 0 ? 0 : opaque_verdict(pol, path, kind, argv);
}

HIDDEN void opaque_unloadable(const char *file, char *const argv[])
{
	char path[PATH_MAX];

	exec_no_preload = program_kind(file, argv, NULL, path) == PO_OTHERLD;
}

HIDDEN int opaque_exec(const struct policy *pol, const char *file, char *const argv[])
{
	return opaque_exec_known(pol, file, argv, NULL);
}
