/*
 * dlsym.c - a library handle does not lead around the hooks.
 *
 * dlsym(dlopen("libc.so.6"), "execv") (Python's ctypes.CDLL("libc.so.6"),
 * perl's DynaLoader, a JIT's FFI) searches that library alone, so it hands
 * back the C library's execv, not the shim's: an exec, open, connect or
 * kill that no hook sees. The shim's dlsym asks the real one and, where the
 * answer is the C library's own definition of a function the shim
 * interposes, gives the shim's instead, as a lookup in the global scope
 * would. Any other answer is passed on as it is.
 *
 * RTLD_NEXT and RTLD_DEFAULT lookups are the caller's: glibc finds the
 * caller's object from dlsym's return address, so those are not calls but
 * jumps to the real dlsym, in a few lines of assembly that leave the return
 * address alone (a C tail call is up to the compiler). The real dlsym is
 * found at the first call, by dlvsym (not interposed).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "shim.h"

/* The real dlsym, and what the assembly below jumps to. */
HIDDEN void *(*shim_real_dlsym_ptr)(void *, const char *);

HIDDEN void *(*shim_real_dlsym(void))(void *, const char *)
{
	void *(*p)(void *, const char *) = __atomic_load_n(&shim_real_dlsym_ptr, __ATOMIC_ACQUIRE);

	if (!p) {
		p = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
		if (!p)
			p = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
		if (!p)
			abort();        /* no dlsym to hand on to: nothing can be looked up */
		__atomic_store_n(&shim_real_dlsym_ptr, p, __ATOMIC_RELEASE);
	}
	return p;
}

/* The interposed names, sorted at first use, with the shim's definitions. */
#define HOOK(ret, name, params, args, fail, pre) extern char hook_sym_##name __asm__(#name);
#include "hooks.def"
#include "hooks-extra.def"
#undef HOOK
extern char hook_sym_execl __asm__("execl"), hook_sym_execlp __asm__("execlp"), hook_sym_execle __asm__("execle");
/* glibc's other exported names for hooked functions (fdguard.c, txn.c,
 * pending.c, exec.c) */
extern char hook_sym___close __asm__("__close"), hook_sym___dup2 __asm__("__dup2"),
	hook_sym__IO_fclose __asm__("_IO_fclose"), hook_sym___clone __asm__("__clone"),
	hook_sym___vfork __asm__("__vfork"), hook_sym___fcntl __asm__("__fcntl"),
	hook_sym___write __asm__("__write"), hook_sym___pwrite64 __asm__("__pwrite64"),
	hook_sym__IO_fdopen __asm__("_IO_fdopen"), hook_sym__IO_popen __asm__("_IO_popen"),
	hook_sym___libc_pwrite __asm__("__libc_pwrite"), hook_sym___write_nocancel __asm__("__write_nocancel"),
	hook_sym___mmap __asm__("__mmap"), hook_sym___mprotect __asm__("__mprotect"),
	hook_sym___munmap __asm__("__munmap"), hook_sym___madvise __asm__("__madvise");

struct named { const char *name; void *fn; };
static const struct named table[] = {
#define HOOK(ret, name, params, args, fail, pre) { #name, &hook_sym_##name },
#include "hooks.def"
#include "hooks-extra.def"
#undef HOOK
	{ "execl", &hook_sym_execl }, { "execlp", &hook_sym_execlp }, { "execle", &hook_sym_execle },
	{ "__close", &hook_sym___close }, { "__dup2", &hook_sym___dup2 }, { "_IO_fclose", &hook_sym__IO_fclose },
	{ "__clone", &hook_sym___clone }, { "__vfork", &hook_sym___vfork }, { "__fcntl", &hook_sym___fcntl },
	{ "__write", &hook_sym___write }, { "__pwrite64", &hook_sym___pwrite64 },
	{ "_IO_fdopen", &hook_sym__IO_fdopen }, { "_IO_popen", &hook_sym__IO_popen },
	{ "__libc_pwrite", &hook_sym___libc_pwrite }, { "__write_nocancel", &hook_sym___write_nocancel },
	{ "__mmap", &hook_sym___mmap }, { "__mprotect", &hook_sym___mprotect }, { "__munmap", &hook_sym___munmap },
	{ "__madvise", &hook_sym___madvise },
};
#define NTABLE (sizeof(table) / sizeof(table[0]))
/* TABLE's indices in name order (in .bss: the one page of data every
 * process touches stays one, shim.h), made by the first lookup. */
static uint16_t order[NTABLE];
static int sorted;              /* 0 no, 1 being sorted, 2 yes */

static int by_name(const void *a, const void *b)
{
	return strcmp(table[*(const uint16_t *)a].name, table[*(const uint16_t *)b].name);
}

static void *ours(const char *s)
{
	int st = __atomic_load_n(&sorted, __ATOMIC_ACQUIRE);
	size_t lo = 0, hi = NTABLE;

	if (st != 2) {
		if (st != 0 || !__atomic_compare_exchange_n(&sorted, &st, 1, false, __ATOMIC_ACQ_REL,
							    __ATOMIC_ACQUIRE)) {
			for (size_t i = 0; i < NTABLE; i++)     /* another thread sorts */
				if (!strcmp(table[i].name, s))
					return table[i].fn;
			return NULL;
		}
		for (size_t i = 0; i < NTABLE; i++)
			order[i] = (uint16_t)i;
		qsort(order, NTABLE, sizeof(order[0]), by_name);
		__atomic_store_n(&sorted, 2, __ATOMIC_RELEASE);
	}
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(s, table[order[mid]].name);
		if (!c)
			return table[order[mid]].fn;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* The base address of the object holding F, or NULL. */
static void *object_of(const void *f)
{
	Dl_info info;

	return dladdr(f, &info) ? info.dli_fbase : NULL;
}

/* dlsym of a library handle (the assembly's other case). */
HIDDEN void *shim_dlsym_handle(void *h, const char *s)
{
	void *r = shim_real_dlsym()(h, s), *f;
	static void *libc HOT_DATA;

	if (!r || !s || !(f = ours(s)) || f == r)
		return r;
	if (!libc)
		libc = object_of((const void *)&getpid);
	return object_of(r) == libc ? f : r;
}

#if defined(__x86_64__)
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym, @function\n"
	"dlsym:\n"
	"	cmpq $-1, %rdi\n"              /* RTLD_NEXT */
	"	je 1f\n"
	"	testq %rdi, %rdi\n"            /* RTLD_DEFAULT */
	"	jne shim_dlsym_handle\n"
	"1:	movq shim_real_dlsym_ptr(%rip), %rax\n"
	"	testq %rax, %rax\n"
	"	je 2f\n"
	"	jmp *%rax\n"
	"2:	pushq %rdi\n"
	"	pushq %rsi\n"
	"	subq $8, %rsp\n"
	"	call shim_real_dlsym\n"
	"	addq $8, %rsp\n"
	"	popq %rsi\n"
	"	popq %rdi\n"
	"	jmp *%rax\n"
	".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym, %function\n"
	"dlsym:\n"
	"	cmn x0, #1\n"                  /* RTLD_NEXT */
	"	b.eq 1f\n"
	"	cbnz x0, shim_dlsym_handle\n"  /* not RTLD_DEFAULT */
	"1:	adrp x16, shim_real_dlsym_ptr\n"
	"	ldr x16, [x16, :lo12:shim_real_dlsym_ptr]\n"
	"	cbz x16, 2f\n"
	"	br x16\n"
	"2:	stp x0, x1, [sp, #-32]!\n"
	"	str x30, [sp, #16]\n"
	"	bl shim_real_dlsym\n"
	"	mov x16, x0\n"
	"	ldr x30, [sp, #16]\n"
	"	ldp x0, x1, [sp], #32\n"
	"	br x16\n"
	".size dlsym, .-dlsym\n");
#else
EXPORT void *dlsym(void *h, const char *s)
{
	if (h == RTLD_NEXT || h == RTLD_DEFAULT)
		return shim_real_dlsym()(h, s);         /* a tail call, with luck */
	return shim_dlsym_handle(h, s);
}
#endif
