/*
 * dlsymlibc.c - looks functions up the ways a program may, under the shim:
 * through a handle of the C library itself (ctypes.CDLL("libc.so.6")), and
 * RTLD_NEXT and RTLD_DEFAULT, which are the caller's own lookups. Prints one
 * line per lookup: which object the answer is in, and whether dlerror()
 * stayed as the program left it. Then, with argv[1], unlinks it through the
 * C library's handle: the shim must journal that, as any unlink.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static const char *where(void *f)
{
	Dl_info info;
	const char *s;

	if (!f || !dladdr(f, &info) || !info.dli_fname)
		return "none";
	s = strrchr(info.dli_fname, '/');
	return s ? s + 1 : info.dli_fname;
}

int main(int argc, char **argv)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	int (*rm)(const char *);
	void *none;

	if (!libc)
		return 2;
	printf("handle unlink %s\n", where(dlsym(libc, "unlink")));
	printf("handle strlen %s\n", where(dlsym(libc, "strlen")));
	printf("next unlink %s\n", where(dlsym(RTLD_NEXT, "unlink")));
	printf("default unlink %s\n", where(dlsym(RTLD_DEFAULT, "unlink")));
	none = dlsym(libc, "no_such_function_here");
	printf("missing %s error %s\n", where(none), dlerror() ? "set" : "clear");
	dlsym(libc, "unlink");
	printf("after a hit, error %s\n", dlerror() ? "set" : "clear");
	/* glibc's other names of hooked functions */
	static const char *const other[] = { "__close", "__dup2", "_IO_fclose", "__clone", "__vfork", "pclose", NULL };
	for (const char *const *o = other; *o; o++)
		printf("handle %s %s\n", *o, where(dlsym(libc, *o)));
	if (argc > 1) {
		rm = (int (*)(const char *))dlsym(libc, "unlink");
		return rm(argv[1]) ? 1 : 0;
	}
	return 0;
}
