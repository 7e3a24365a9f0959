# policy/rules.mk - the policy engine's part of the one make (issue 6),
# included by GNUmakefile. The engine links inih statically: Debian's
# libinih.a is PIC (no absolute relocations), so it goes into libftsbx.so
# as it goes into the tools, and costs no shared library at exec.
#
#   $(B)/libpolicy.a        the engine, for the shim and the tools
#   $(B)/ftsbx              `ftsbx policy check`, `ftsbx explain`
#   $(B)/test/policy_unit   the parser and decision tests (cmocka)
#   make fuzz-policy        the parser under libFuzzer (FUZZ_SECONDS)

POLICY_SRC  := $(wildcard policy/*.c)
POLICY_OBJ  := $(POLICY_SRC:policy/%.c=$(B)/policy/%.o)
POLICY_LIBS := $(INIH_A)

# policies/default.ini, compiled in as the built-in default: its text, and
# its key = value lines as inih reads them (tools/ini_table.c, run here).
$(B)/policy/default_ini.h: policies/default.ini $(B)/policy/default_tab.h | $(B)/policy
	xxd -i $< | sed 's/^unsigned/static const unsigned/' > $@

$(B)/ini_table: tools/ini_table.c policy/internal.h policy/policy.h | $(B)/policy
	$(CC) $(BASEFLAGS) -o $@ $< $(INIH_A)

$(B)/policy/default_tab.h: policies/default.ini $(B)/ini_table | $(B)/policy
	$(B)/ini_table $< policies_default_lines > $@.tmp && mv $@.tmp $@

$(B)/policy/%.o: policy/%.c $(wildcard policy/*.h) $(B)/policy/default_ini.h $(B)/.flags | $(B)/policy
	$(CC) $(ALLFLAGS) -I$(B)/policy -c -o $@ $<

$(B)/policy:
	mkdir -p $@

$(B)/libpolicy.a: $(POLICY_OBJ)
	rm -f $@ && ar rcs $@ $^

$(B)/tools/ftsbx.o: policy/policy.h

$(B)/ftsbx: $(B)/tools/ftsbx.o $(B)/tools/run.o $(B)/libpolicy.a $(B)/libjournal.a
	$(CC) $(SANFLAGS) $(TOOL_LDFLAGS) -o $@ $^ $(POLICY_LIBS) $(TOOL_LIBS)

$(B)/test/policy_unit.o: policy/policy.h policy/internal.h

$(B)/test/policy_unit: $(B)/test/policy_unit.o $(B)/libpolicy.a
	$(CC) $(SANFLAGS) -o $@ $^ $(POLICY_LIBS) $(shell pkg-config --libs cmocka)

all: $(B)/ftsbx $(B)/libpolicy.a

test: $(B)/test/policy_unit policy-unit

policy-unit: $(B)/test/policy_unit
	$(B)/test/policy_unit

# The parser under libFuzzer, with the sanitizers; test/corpus/policy-seed
# holds the starting inputs (the shipped policies are copied in).
fuzz-policy: $(B)/policy/default_ini.h $(B)/policy/default_tab.h | $(B)/test
	clang -std=c11 -D_GNU_SOURCE -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -g -O1 \
	  -fsanitize=fuzzer,address,undefined -I$(B)/policy \
	  -o $(B)/fuzz_policy test/fuzz_policy.c policy/*.c $(INIH_A)
	mkdir -p $(B)/fuzz-policy-corpus
	cp policies/*.ini $(B)/fuzz-policy-corpus/
	$(B)/fuzz_policy -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -artifact_prefix=$(B)/ $(B)/fuzz-policy-corpus

.PHONY: policy-unit fuzz-policy
