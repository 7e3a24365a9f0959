/*
 * fuzz_policy.c - libFuzzer target for the policy parser (`make
 * fuzz-policy`). Each input is parsed as a policy; a policy that loads is
 * put through its compiled block (policy_from_blob must accept it, and
 * reject it cut short or with a bit flipped) and asked a few decisions.
 * The input is also handed to the sh -c scanner as a command string under
 * the built-in policy, so the shell reader is fuzzed with the same bytes.
 * Nothing may crash, leak or read out of bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../policy/policy.h"

static struct policy *builtin;

static void decide(const struct policy *pol, const char *text)
{
	const char *why;
	char *const argv[] = { "bash", "-c", (char *)text, NULL };
	char *const argv2[] = { "env", "-i", "nice", "git", "push", "-f", (char *)text, NULL };

	policy_path(pol, "/home/u/.ssh/id_rsa", false, &why);
	policy_path(pol, "/w/ws/src/a.c", true, &why);
	policy_exec(pol, NULL, argv, "/usr/bin:/bin", &why);
	policy_exec(pol, NULL, argv2, "/usr/bin:/bin", &why);
	policy_signal(pol, -1, 9, false, &why);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct policy *pol, mapped;
	char err[512], *text;
	const void *p;
	size_t n;

	if (!builtin && policy_load(&builtin, NULL, err, sizeof(err)))
		abort();
	text = malloc(size + 1);
	memcpy(text, data, size);
	text[size] = 0;
	if (policy_load_text(&pol, "fuzz", text, size, err, sizeof(err)) == 0) {
		policy_blob(pol, &p, &n);
		void *copy = aligned_alloc(8, (n + 7) & ~(size_t)7);
		memcpy(copy, p, n);
		if (policy_from_blob(&mapped, copy, n) || !policy_intact(&mapped) ||
		    !policy_from_blob(&mapped, copy, n - 8))
			abort();
		/* a bit flipped anywhere (where the input says) is refused */
		size_t off = size ? ((size_t)data[0] << 8 | data[size - 1]) * 131 % n : 0;
		((unsigned char *)copy)[off] ^= (unsigned char)(1u << (size % 8));
		if (!policy_from_blob(&mapped, copy, n) && policy_intact(&mapped))
			abort();
		((unsigned char *)copy)[off] ^= (unsigned char)(1u << (size % 8));
		policy_from_blob(&mapped, copy, n);
		decide(&mapped, text);
		free(copy);
		policy_free(pol);
	}
	decide(builtin, text);
	free(text);
	return 0;
}
