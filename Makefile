# Makefile - builds liboptree (static and shared), the tests, the examples
# and the benchmarks. `make demo` and `make test` are the two entry points;
# `make deps` installs what a fresh Debian machine lacks.

CC       ?= cc
PREFIX   ?= /usr/local
BUILD    ?= build
SANFLAGS ?=
OPT      ?= -O2
# Debug information: tools/test.sh builds its sanitizer trees with -g1
# (line tables: reports keep each frame's file and line), which compiles
# them a quarter faster than -g.
DEBUG    ?= -g
# Warnings are errors in `make test` and CI (tools/test.sh sets WERROR), not
# in a user's plain `make`, where a newer compiler's false warning must not
# break the build.
WERROR   ?=
# The layers of src/ (docs/ARCHITECTURE.md): every file sees the core's
# headers and its own folder's; a layer's private headers are on the
# include path of that layer's own objects alone (the pattern variables
# below), so a file above it that includes one does not compile, and a
# call without a declaration is an error
# (-Werror=implicit-function-declaration). tools/layers.py checks the same
# on the sources and the objects.
CPPFLAGS += -Iinclude -Isrc/core -D_POSIX_C_SOURCE=200809L
CFLAGS   += -std=c11 $(OPT) $(DEBUG) -Wall -Wextra $(WERROR) -fPIC -ffp-contract=off \
            -fno-math-errno -Werror=implicit-function-declaration $(SANFLAGS)
# The version lives in one place, include/optree.h; the shared library's
# SONAME carries its major number.
VERSION  := $(shell sed -n 's/^\#define OT_VERSION "\(.*\)"/\1/p' include/optree.h)
SOMAJOR  := $(firstword $(subst ., ,$(VERSION)))
# The public headers: optree.h, the op list it includes, and the sub-headers
# it includes at its end (installed as include/optree/*.h).
SUBHDRS  := $(wildcard include/optree/*.h)
HDRS     := include/optree.h include/optree_ops.h $(SUBHDRS)
LDLIBS   += -lzip -lsleef -lopenblas -lm -lpthread
LDFLAGS  += $(SANFLAGS)
PYTHON   ?= /usr/bin/python3
RUN      := $(if $(filter /%,$(BUILD)),$(BUILD),./$(BUILD))

LAYERS := core ref cpu cpu/jit front
SRCS  := $(foreach l,$(LAYERS),$(wildcard src/$(l)/*.c))
OBJS  := $(SRCS:src/%.c=$(BUILD)/obj/%.o)
TSRCS := $(wildcard tests/*.c)
# TSEL=WORD builds a test program of only the cases a run selecting WORD
# reaches (the runner matches a case's name or file): the files named with
# WORD or holding a TEST(...WORD...), plus main.c and fuzz.c, the only
# files whose functions others call. tools/test.sh's TSan phase runs the
# "thread" cases alone, and so compiles a third of the tests.
TSEL  ?=
ifneq ($(TSEL),)
TSRCS := tests/main.c tests/fuzz.c $(sort $(wildcard tests/*$(TSEL)*.c) \
         $(shell grep -l '^TEST([^)]*$(TSEL)' tests/test_*.c))
endif
TOBJS := $(TSRCS:tests/%.c=$(BUILD)/tobj/%.o)
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(filter-out examples/mlp_mpi.c,$(wildcard examples/*.c)))
# Tile kernels (src/cpu/kernels/): tile.inc compiled once per ISA by k_<isa>.c,
# each with its own flags (only these objects get -m flags), -O3 after
# CFLAGS. On aarch64 the NEON table joins the scalar one; elsewhere off x86
# only the scalar table and the dispatcher are built.
KMACH := $(shell $(CC) -dumpmachine)
KX86  := $(if $(filter x86_64-% i386-% i486-% i586-% i686-%,$(KMACH)),1)
KARM  := $(if $(filter aarch64-%,$(KMACH)),1)
KDIR  := src/cpu/kernels
KSRCS := $(KDIR)/dispatch.c $(KDIR)/k_scalar.c \
         $(if $(KX86),$(KDIR)/k_sse2.c $(KDIR)/k_avx2.c $(KDIR)/k_avx512.c) \
         $(if $(KARM),$(KDIR)/k_neon.c)
KOBJS := $(KSRCS:src/%.c=$(BUILD)/obj/%.o)
# The kernel objects never take -march/-mtune from OPT: each table gets only
# its own ISA's flags, since the dispatcher picks tables by CPUID at run time
# (an SSE2 table built with -march=native would not run on an older CPU).
KCFLAGS = $(filter-out -march=% -mtune=% -mcpu=%,$(CFLAGS))
KFLAGS_scalar :=
KFLAGS_sse2   :=
KFLAGS_avx2   := -mavx2 -mfma
KFLAGS_avx512 := -mavx512f -mavx2 -mfma
KFLAGS_neon   :=
OBJS  += $(KOBJS)
LIBA  := $(BUILD)/liboptree.a
LIBSO := $(BUILD)/liboptree.so

.PHONY: all python lib tests examples cli demo demo-cnn demo-lm bench-lm test test-arm64 check check-attn-long doc-check deps install clean bench bench-mlp fuzz fuzz-inputs fuzz-input-bins fuzz-tree mpi demo-mpi ulp-exhaustive half-exhaustive math-speed FORCE
# all first: a plain `make` builds everything.
all: lib tests examples cli python
FORCE:

lib: $(LIBA) $(LIBSO)

# Header dependencies come from the compiler (-MMD); every object also
# depends on the flags it was built with ($(FLAGS)), so `make test` after
# a plain `make` rebuilds with -Werror instead of reusing objects.
DEPFLAGS = -MMD -MP
FLAGS    := $(BUILD)/.flags
FLAGS_NOW = $(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(TOPT)$(if $(TSEL), TSEL=$(TSEL))
$(FLAGS): FORCE
	@mkdir -p $(BUILD)
	@echo '$(FLAGS_NOW)' | cmp -s - $@ || echo '$(FLAGS_NOW)' > $@

# The public op header is generated from the private op table (and
# committed, so that a build needs no awk); every object includes it.
include/optree_ops.h: src/core/ops.def tools/gen_ops.sh
	sh tools/gen_ops.sh src/core/ops.def > $@.tmp && mv $@.tmp $@
$(OBJS) $(TOBJS): include/optree_ops.h

# The cpu backend's rooms (cpu/, cpu/jit/, cpu/kernels/) see each other's
# headers; no other layer does.
CPU_INC := -Isrc/cpu -Isrc/cpu/jit -Isrc/cpu/kernels
$(BUILD)/obj/cpu/%.o: private CPPFLAGS += $(CPU_INC)

# The pooling kernels' row loops (src/cpu/exec_pool.c) want the vectoriser's
# full cost model, which -O2 does not run. Not in the sanitizer trees
# (SANFLAGS), whose speed is not what they are for: under ASan -O3 took
# exec_winograd.c 13 s to compile.
O3 := $(if $(SANFLAGS),,-O3)
$(BUILD)/obj/cpu/exec_pool.o: private CFLAGS += $(O3)
# The Winograd transforms (src/cpu/exec_winograd.c) loop over vector lanes.
$(BUILD)/obj/cpu/exec_winograd.o: private CFLAGS += $(O3)
# So do attention's per-row softmax loops (src/cpu/exec_attn.inc).
$(BUILD)/obj/cpu/exec_attn.o: private CFLAGS += $(O3)
# And the indexing kernels' row loops (an embedding's rows added in place).
$(BUILD)/obj/cpu/exec_index.o: private CFLAGS += $(O3)

$(BUILD)/obj/%.o: src/%.c $(FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/obj/cpu/kernels/dispatch.o: $(KDIR)/dispatch.c $(FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(KCFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/obj/cpu/kernels/k_%.o: $(KDIR)/k_%.c $(FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(KCFLAGS) -O3 $(KFLAGS_$*) $(DEPFLAGS) -c $< -o $@

$(LIBA): $(OBJS)
	@rm -f $@
	ar rcs $@ $^

# Only the public ot_* names are exported (tools/optree.map); the SONAME is
# liboptree.so.$(SOMAJOR), linked beside it so programs run from $(BUILD).
$(LIBSO): $(OBJS) tools/optree.map
	$(CC) -shared $(LDFLAGS) -Wl,-soname,liboptree.so.$(SOMAJOR) \
	    -Wl,--version-script=tools/optree.map -o $@ $(OBJS) $(LDLIBS)
	ln -sf liboptree.so $@.$(SOMAJOR)

# The unit tests' own objects may take another optimisation level (TOPT):
# tools/test.sh builds them at -O0 for the sanitizer builds, where ASan,
# UBSan and TSan instrumentation of 37,000 lines of tests at -O2 took half
# of each phase (-O1 still 110 CPU s of the ASan build's 256, -O0 a
# quarter of that); the library they check keeps OPT.
TOPT ?=
TOPT_OR_OPT := $(or $(TOPT),$(OPT))
$(TOBJS): private OPT := $(TOPT_OR_OPT)
# The unit tests are white-box: they see every layer's headers.
$(TOBJS): private CPPFLAGS += $(CPU_INC) -Isrc/front -Isrc/ref
$(BUILD)/tobj/%.o: tests/%.c $(FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

tests: $(BUILD)/test_optree
$(BUILD)/test_optree: $(TOBJS) $(LIBA)
	$(CC) $(LDFLAGS) -o $@ $(TOBJS) $(LIBA) $(LDLIBS)

examples: $(EXAMPLES)
$(BUILD)/examples/%: examples/%.c $(HDRS) $(LIBA) $(FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LIBA) $(LDFLAGS) $(LDLIBS)

# optree-bench (cli/): microbenchmarks of any expression from the command
# line; installed with the library.
CLI_SRCS := $(wildcard cli/*.c)
CLI      := $(BUILD)/optree-bench
cli: $(CLI)
$(CLI): $(CLI_SRCS) cli/cli.h $(HDRS) $(LIBA) $(FLAGS)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $(CLI_SRCS) $(LIBA) $(LDFLAGS) $(LDLIBS)

# The Python module (python/optree, ctypes over liboptree.so): its view of
# the op table and the public structs is generated by tools/gen_py.py (and
# committed; make test fails when it is stale). PYTHONPATH=python finds it.
PYDECLS := python/optree/_decls.py
PYDIR   ?= $(PREFIX)/lib/python$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')/dist-packages
python: $(PYDECLS) lib
$(PYDECLS): tools/gen_py.py src/core/ops.def $(HDRS)
	$(PYTHON) tools/gen_py.py > $@.tmp && mv $@.tmp $@

deps:
	@sh tools/deps.sh

# The guided tour, then a real training run (examples/mlp.c).
demo: deps
	@$(MAKE) --no-print-directory $(BUILD)/examples/tour $(BUILD)/examples/mlp
	$(RUN)/examples/tour
	$(RUN)/examples/mlp

# A CNN on Fashion-MNIST (examples/cnn.c: conv-BN-ReLU-pool twice, two
# dense layers, Adam, 1 thread) to the dataset's benchmark accuracy, 0.934;
# takes 34-40 minutes (25 epochs; README, "make demo-cnn"). CNN_ARGS="EPOCHS [DIR]".
CNN_ARGS ?=
demo-cnn: deps
	@$(MAKE) --no-print-directory $(BUILD)/examples/cnn
	$(RUN)/examples/cnn $(CNN_ARGS)

# A character-level transformer on Debian's fortunes (examples/lm.c: 2
# blocks of causal attention + MLP, Adam, 1 thread); a few minutes; prints
# validation bits/char and samples text. LM_STEPS=N, LM_DIR=DIR.
# bench-lm trains bench/lm_torch.py, the same model in PyTorch, on the same
# batches and checks it lands within 0.05 bits/char of the example.
# bench-lm's runs start from the same initial numbers (build/lm-init.npz).
LM_STEPS ?= 600
LM_DIR ?= /usr/share/games/fortunes
demo-lm: deps
	@$(MAKE) --no-print-directory $(BUILD)/examples/lm
	OPENBLAS_NUM_THREADS=1 $(RUN)/examples/lm $(LM_STEPS) $(LM_DIR) $(BUILD)/lm-init.npz \
	    | tee $(BUILD)/demo-lm.txt

bench-lm: demo-lm
	/usr/bin/python3 bench/lm_torch.py --init $(BUILD)/lm-init.npz --compare \
	    $$(sed -n 's/^lm: validation \([0-9.]*\) bits.*/\1/p' $(BUILD)/demo-lm.txt) \
	    $(LM_STEPS) $(LM_DIR)

# Data-parallel training over MPI (src/mpi/): built only where mpicc is
# found, into its own library, so that liboptree never depends on libmpi.
# The test program and examples/mlp_mpi.c go to $(BUILD)/mpi/, outside
# $(BUILD)/examples (which make test runs under valgrind, without mpirun).
MPICC    ?= mpicc
MPIRUN   ?= mpirun
HAVE_MPI := $(shell command -v $(MPICC) >/dev/null 2>&1 && echo 1)
LIBMPI   := $(BUILD)/liboptree_mpi.a
MPI_BINS := $(BUILD)/mpi/test_allreduce $(BUILD)/mpi/mlp_mpi
# Open MPI refuses to run as root unless told that it is meant.
MPIRUN_ENV := $(if $(filter 0,$(shell id -u)),OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
# Ranks yield while they wait: on a machine with as many cores as ranks,
# shared with other work, spinning ranks steal each other's core.
MPIRUN_OPTS ?= --oversubscribe --mca mpi_yield_when_idle 1

$(BUILD)/obj/mpi/%.o: src/mpi/%.c $(FLAGS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) $(DEPFLAGS) -c $< -o $@
$(LIBMPI): $(BUILD)/obj/mpi/allreduce.o
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/mpi/test_allreduce: tests/mpi/test_allreduce.c $(LIBMPI) $(LIBA) $(FLAGS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LIBMPI) $(LIBA) $(LDFLAGS) $(LDLIBS)
$(BUILD)/mpi/mlp_mpi: examples/mlp_mpi.c $(LIBMPI) $(LIBA) $(FLAGS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LIBMPI) $(LIBA) $(LDFLAGS) $(LDLIBS)

ifeq ($(HAVE_MPI),1)
all: mpi
mpi: $(LIBMPI) $(MPI_BINS)
else
mpi:
	@echo "mpi: $(MPICC) not found (make deps installs libopenmpi-dev and openmpi-bin)" >&2
	@exit 1
endif

# examples/mlp_mpi.c on 2 ranks (on any machine: --oversubscribe), checked
# against one process training on the same global batches; then its step
# time at 1 and 2 ranks, with and without overlapping the allreduces.
demo-mpi: deps
	@$(MAKE) --no-print-directory mpi
	$(MPIRUN_ENV) $(MPIRUN) -np 2 $(MPIRUN_OPTS) $(RUN)/mpi/mlp_mpi
	@for np in 1 2; do for mode in fused staged overlap; do \
	    $(MPIRUN_ENV) $(MPIRUN) -np $$np $(MPIRUN_OPTS) $(RUN)/mpi/mlp_mpi \
	        --mode $$mode --epochs 2 --no-check | grep 'step time' || exit 1; done; done

# Everything: unit tests, NumPy differential tests, the sanitizer passes,
# clang -O0 and documentation builds, the examples under valgrind, in two
# lanes side by side (tools/test.sh); ends with one "N passed, N failed" line.
test: deps
	@sh tools/test.sh

# The arm64 build (NEON kernels) cross-compiled into build/arm64 and run
# under qemu-aarch64: unit tests and examples; installs the cross toolchain,
# qemu-user and the arm64 SLEEF and OpenBLAS when missing. Ends with one
# "N passed, M failed" line.
test-arm64:
	@sh tools/test_arm64.sh

# The developer's quick suite: the build, then the unit tests and the NumPy
# differential tests side by side (under 90 s on 2 CPUs; README.md,
# "Testing").
check:
	@sh tools/test.sh check

# Attention's cpu kernel in f32 against the plain formula at seq 4096 (make
# check runs it at 2048; this one takes a few seconds).
check-attn-long: all
	OT_ATTN_SEQ=4096 ./$(BUILD)/test_optree attention_cpu_f32_long

# Every C block of README.md and docs/ compiled (and run, where it is a
# whole program): tools/doc_check.py, also a phase of make test.
doc-check: lib
	$(PYTHON) tools/doc_check.py --build $(BUILD)

install: lib cli $(if $(HAVE_MPI),$(LIBMPI))
	install -d $(DESTDIR)$(PREFIX)/include/optree $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	$(if $(HAVE_MPI),install -m 644 $(LIBMPI) $(DESTDIR)$(PREFIX)/lib/)
	install -m 755 $(CLI) $(DESTDIR)$(PREFIX)/bin/optree-bench
	install -m 644 include/optree.h include/optree_ops.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(SUBHDRS) $(DESTDIR)$(PREFIX)/include/optree/
	install -m 644 $(LIBA) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIBSO) $(DESTDIR)$(PREFIX)/lib/liboptree.so.$(VERSION)
	ln -sf liboptree.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/liboptree.so.$(SOMAJOR)
	ln -sf liboptree.so.$(SOMAJOR) $(DESTDIR)$(PREFIX)/lib/liboptree.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' tools/optree.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/optree.pc
	install -d $(DESTDIR)$(PYDIR)/optree
	install -m 644 python/optree/*.py $(DESTDIR)$(PYDIR)/optree/

clean:
	rm -rf build

# exp, log, tanh and sig over all 2^32 f32 inputs on every ISA table, tile
# kernels and generated code, against C's double functions (minutes; not in
# make test): tools/ulp_exhaustive.c. ULP_ARGS="--fn tanh --isa avx512".
ULP_ARGS ?=
ulp-exhaustive: $(BUILD)/ulp_exhaustive
	$(RUN)/ulp_exhaustive $(ULP_ARGS)
$(BUILD)/ulp_exhaustive: tools/ulp_exhaustive.c $(HDRS) $(LIBA) $(FLAGS)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LIBA) $(LDFLAGS) $(LDLIBS)

# f16/bf16 conversions: every vector table against the scalar definition on
# all 2^32 f32 inputs and all 2^16 back (tools/half_exhaustive.c; about a
# minute; not in make test, which samples chunks in tests/test_half.c).
half-exhaustive: $(BUILD)/half_exhaustive
	$(RUN)/half_exhaustive
$(BUILD)/half_exhaustive: tools/half_exhaustive.c $(HDRS) $(LIBA) $(FLAGS)
	$(CC) $(CPPFLAGS) $(CFLAGS) -O2 -o $@ $< $(LIBA) $(LDFLAGS) $(LDLIBS)

# f32 exp, log, tanh and sig per ISA table against SLEEF's u10 in one process
# (tools/math_speed.c; not in make test). MATH_ARGS="--n 16384 --runs 9".
MATH_ARGS ?=
math-speed: $(BUILD)/math_speed
	$(RUN)/math_speed $(MATH_ARGS)
$(BUILD)/math_speed: tools/math_speed.c $(HDRS) $(LIBA) $(FLAGS)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LIBA) $(LDFLAGS) $(LDLIBS)

# The benchmark of BENCH.md (bench/), never part of `make test`: builds
# $(BUILD)/bench/bench and runs it (make bench BENCH_ARGS="--only W1 --quick").
# Only the reference loops get ISA flags, each file its own ISA's: the driver
# checks the CPU at run time before it calls them. Tables go to stdout,
# bench/results.{csv,md}.
BENCH_SRCS := $(wildcard bench/*.c)
BENCH_OBJS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%.o)
BENCH_ARGS ?=

$(BUILD)/bench/ref_avx2.o: CFLAGS += -mavx2 -mfma
$(BUILD)/bench/ref_avx512.o: CFLAGS += -mavx512f -mavx512dq -mavx512vl -mfma -mavx2
$(BUILD)/bench/%.o: bench/%.c bench/bench.h $(HDRS) $(FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -O2 -c $< -o $@

$(BUILD)/bench/bench: $(BENCH_OBJS) $(LIBA)
	$(CC) $(LDFLAGS) -o $@ $(BENCH_OBJS) $(LIBA) $(LDLIBS)

bench: $(BUILD)/bench/bench
	$(RUN)/bench/bench $(BENCH_ARGS)

# The Fashion-MNIST MLP (784-256-128-10, Adam, batch 128, 1 thread): two
# epochs with ot_model as installed (bench --mlp), then with PyTorch at
# OPENBLAS_CORETYPE=$(TORCH_CORE) (bench/mlp_torch.py). The data is Debian's
# dataset-fashion-mnist, gunzipped into $(BUILD)/fmnist once.
FMNIST     ?= /usr/share/datasets/fashion-mnist
TORCH_CORE ?= SkylakeX
bench-mlp: $(BUILD)/bench/bench
	@mkdir -p $(BUILD)/fmnist
	@for f in train-images-idx3-ubyte train-labels-idx1-ubyte; do \
	    [ -s $(BUILD)/fmnist/$$f ] || zcat $(FMNIST)/$$f.gz > $(BUILD)/fmnist/$$f || exit 1; done
	$(RUN)/bench/bench --mlp $(BUILD)/fmnist
	$(PYTHON) bench/mlp_torch.py $(BUILD)/fmnist 2 $(TORCH_CORE)

# The differential fuzzer (tests/fuzz.c) run as long as asked, never part of
# `make test` (which runs a fixed budget of it): make fuzz SEED=1 N=100000
# JOBS=2 FINDINGS=dir. Failures are shrunk and written to FINDINGS as C files.
SEED     ?= 1
N        ?= 10000
FIRST    ?= 0
JOBS     ?= 1
FINDINGS ?= $(BUILD)/fuzz-findings
FUZZ_ARGS ?=
$(BUILD)/fuzz: tools/fuzz_main.c tests/fuzz.c tests/fuzz.h examples/custom_ops.h $(HDRS) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) -o $@ tools/fuzz_main.c tests/fuzz.c $(LIBA) $(LDFLAGS) $(LDLIBS)

fuzz: $(BUILD)/fuzz
	$(RUN)/fuzz --seed $(SEED) --first $(FIRST) -n $(N) --jobs $(JOBS) --findings "$(FINDINGS)" $(FUZZ_ARGS)

# libFuzzer on the inputs optree reads from outside (tools/fuzz_inputs.c:
# ot_parse, ot_load/ot_loadz, ot_model_load), SECONDS per target, under
# ASan+UBSan: make fuzz-inputs SECONDS=600. Built with clang (libFuzzer is
# clang's) into its own tree at FUZZ_OPT, the library instrumented for
# coverage. tools/test.sh builds its clang -O0 tree with these flags and
# fuzzes from it (FUZZ_BUILD, FUZZ_OPT=-O0): one build for both. Ends
# with "N passed, M failed"; findings go to $(FUZZ_BUILD)/fuzz-findings/.
SECONDS    ?= 60
FUZZ_BUILD ?= $(BUILD)/fuzz-inputs
FUZZ_OPT   ?= -O2
FUZZ_SAN   := -fsanitize=address,undefined -fno-sanitize-recover=all -fsanitize=fuzzer-no-link
FUZZ_TARGETS := parse load model
fuzz-inputs:
	@$(MAKE) --no-print-directory -s BUILD=$(FUZZ_BUILD) CC=clang OPT=$(FUZZ_OPT) \
	    SANFLAGS='$(FUZZ_SAN)' fuzz-input-bins
	@sh tools/fuzz_inputs.sh $(FUZZ_BUILD) $(SECONDS)
fuzz-input-bins: $(FUZZ_TARGETS:%=$(BUILD)/fuzz_%)
# Everything a user builds (library, unit tests, examples, optree-bench),
# and the fuzz targets, in the fuzz tree's configuration: tools/test.sh's
# clang phase, at FUZZ_OPT=-O0 (no call inlined; clang's warnings).
fuzz-tree:
	@$(MAKE) --no-print-directory -s BUILD=$(FUZZ_BUILD) CC=clang OPT=$(FUZZ_OPT) \
	    SANFLAGS='$(FUZZ_SAN)' lib tests examples cli fuzz-input-bins
$(BUILD)/fuzz_%: tools/fuzz_inputs.c $(HDRS) $(LIBA)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fsanitize=fuzzer -DFUZZ_TARGET_$* -o $@ $< $(LIBA) \
	    $(LDFLAGS) $(LDLIBS)

-include $(OBJS:.o=.d) $(TOBJS:.o=.d) $(BUILD)/obj/mpi/allreduce.d
