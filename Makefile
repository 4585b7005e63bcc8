# Makefile - builds liboptree (static and shared), the tests, the examples
# and the benchmarks. `make demo` and `make test` are the two entry points;
# `make deps` installs what a fresh Debian machine lacks.

CC       ?= cc
PREFIX   ?= /usr/local
BUILD    ?= build
SANFLAGS ?=
OPT      ?= -O2
CPPFLAGS += -Iinclude -Isrc -D_POSIX_C_SOURCE=200809L
CFLAGS   += -std=c11 $(OPT) -g -Wall -Wextra -Werror -fPIC -ffp-contract=off \
            -fno-math-errno $(SANFLAGS)
LDLIBS   += -lsleef -lopenblas -lm -lpthread
LDFLAGS  += $(SANFLAGS)
PYTHON   ?= /usr/bin/python3
RUN      := $(if $(filter /%,$(BUILD)),$(BUILD),./$(BUILD))

SRCS  := $(wildcard src/*.c)
OBJS  := $(SRCS:src/%.c=$(BUILD)/obj/%.o)
TSRCS := $(wildcard tests/*.c)
TOBJS := $(TSRCS:tests/%.c=$(BUILD)/tobj/%.o)
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
LIBA  := $(BUILD)/liboptree.a
LIBSO := $(BUILD)/liboptree.so

.PHONY: all lib tests examples demo test check deps install clean bench
all: lib tests examples

lib: $(LIBA) $(LIBSO)

$(BUILD)/obj/%.o: src/%.c include/optree.h src/internal.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(LIBA): $(OBJS)
	@rm -f $@
	ar rcs $@ $^

$(LIBSO): $(OBJS)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tobj/%.o: tests/%.c tests/test.h include/optree.h src/internal.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

tests: $(BUILD)/test_optree
$(BUILD)/test_optree: $(TOBJS) $(LIBA)
	$(CC) $(LDFLAGS) -o $@ $(TOBJS) $(LIBA) $(LDLIBS)

examples: $(EXAMPLES)
$(BUILD)/examples/%: examples/%.c include/optree.h $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LIBA) $(LDFLAGS) $(LDLIBS)

deps:
	@sh tools/deps.sh

demo: deps
	@$(MAKE) --no-print-directory $(BUILD)/examples/tour
	$(RUN)/examples/tour

# Everything: unit tests, NumPy differential tests, the sanitizer pass and
# the examples under valgrind; ends with one "N passed, N failed" line.
test: deps
	@sh tools/test.sh

# The unit tests alone, in this build.
check: tests
	$(RUN)/test_optree

install: lib
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/optree.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(LIBA) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIBSO) $(DESTDIR)$(PREFIX)/lib/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|0.1.0|' tools/optree.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/optree.pc

clean:
	rm -rf build
