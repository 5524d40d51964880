# Tern build. The product's library (libtern) from operator/src/*/*.c and the
# embedded cluster's library (libterndev) from terndev/src/*/*.c; one binary per
# operator/cmd/<name>/ or terndev/cmd/<name>/ directory, one unit-test binary
# per tests/unit/test_*.c, one replay binary per fuzz target. New modules need
# no Makefile edits. Nothing in operator/ includes terndev/ (scripts/check-source).
#
#   make            build everything into build/
#   make asan       the same with ASan+UBSan into build-asan/
#   make test       install deps, lint, unit tests (normal + asan), fuzz corpus
#                   replay, make images and make kube (with Go), integration
#                   suites, the end-to-end ones on both clusters
#   make fuzz       libFuzzer targets (clang) into build-fuzz/
#   make valgrind   unit tests under valgrind
#   make demo       the end-to-end demo (see README); CLUSTER=kube runs it on
#                   the real control plane
#   make chaos      the chaos campaign's long form (tests/chaos/): 1,000 kill
#                   points over the process tier, tern-dev and (when make kube
#                   has run) the real control plane, then a 10,000-turn
#                   session's journal measured against etcd's quotas; a short
#                   form runs in make test (tests/integration/test_chaos.py)
#   make kube       the real Kubernetes control plane (etcd, kube-apiserver,
#                   kube-controller-manager, kube-scheduler) and helm, built
#                   from the pinned Go modules of tests/kube/ into build/kube/bin
#   make images     OCI image archives into build/images/ (docs/images.md)

CC       ?= cc
O        ?= build
CFLAGS_BASE := -std=gnu17 -Wall -Wextra -Wshadow -Wformat=2 -Wstrict-prototypes \
               -Werror -g -D_GNU_SOURCE -Ioperator/src -Iterndev/src -Itests/harness -I/usr/include/cjson
OPT      ?= -O2
SAN      ?=
CFLAGS   += $(CFLAGS_BASE) $(OPT) $(SAN) -MMD -MP
LDLIBS   += -lcurl -lcjson -lyaml -lssl -lcrypto -lmicrohttpd -lpthread -lm
LDFLAGS  += $(SAN)

LIB_SRCS  := $(sort $(wildcard operator/src/*/*.c))
LIB_OBJS  := $(LIB_SRCS:%.c=$(O)/%.o)
LIB       := $(O)/libtern.a
DEV_SRCS  := $(sort $(wildcard terndev/src/*/*.c))
DEV_OBJS  := $(DEV_SRCS:%.c=$(O)/%.o)
DEV_LIB   := $(O)/libterndev.a
# what tests, benches and the embedded cluster's binaries link: libterndev
# first (it uses libtern, never the other way round)
ALL_LIBS  := $(DEV_LIB) $(LIB)

CMDS      := $(notdir $(wildcard operator/cmd/* terndev/cmd/*))
CMD_BINS  := $(CMDS:%=$(O)/bin/%)
FAKE_SRCS := $(wildcard tests/fakes/*/main.c)
FAKE_BINS := $(patsubst tests/fakes/%/main.c,$(O)/bin/%,$(FAKE_SRCS))

HARNESS_OBJ := $(O)/tests/harness/harness.o
UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(O)/tests/unit/%)
INTEG_SRCS:= $(sort $(wildcard tests/integration/test_*.c))
# shared test support (fixtures) linked into integration tests and benches
SUPPORT_OBJS := $(patsubst %.c,$(O)/%.o,$(sort $(wildcard tests/support/*.c)))
INTEG_BINS:= $(INTEG_SRCS:tests/integration/%.c=$(O)/tests/integration/%)

FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
REPLAY_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(O)/tests/replay/%)
BENCH_SRCS := $(sort $(wildcard bench/*/main.c))
BENCH_BINS := $(patsubst bench/%/main.c,$(O)/bench/%,$(BENCH_SRCS))

.PHONY: all asan fuzz test unit deps lint valgrind demo clean format bench kube images images-deps chaos differential
.DEFAULT_GOAL := all

all: $(ALL_LIBS) $(CMD_BINS) $(FAKE_BINS) $(UNIT_BINS) $(INTEG_BINS) $(REPLAY_BINS) $(BENCH_BINS)

Q := $(if $(V),,@)

$(O)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(DEV_LIB): $(DEV_OBJS)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ && ar rcs $@ $^

# objects are kept: without this make deletes them as intermediates and the
# next build starts from scratch
.SECONDARY:

.SECONDEXPANSION:
# ($$* not %: a % inside a secondary expansion is replaced by the stem too,
#  which broke the patsubst and left binaries without their objects)
$(O)/bin/%: $$(addsuffix .o,$$(basename $$(addprefix $(O)/,$$(wildcard operator/cmd/$$*/*.c terndev/cmd/$$*/*.c tests/fakes/$$*/*.c)))) $$(if $$(wildcard terndev/cmd/$$*),$(DEV_LIB)) $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(O)/tests/unit/%: $(O)/tests/unit/%.o $(HARNESS_OBJ) $(ALL_LIBS)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(O)/tests/integration/%: $(O)/tests/integration/%.o $(SUPPORT_OBJS) $(HARNESS_OBJ) $(ALL_LIBS)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(O)/tests/replay/%: $(O)/tests/fuzz/%.o $(O)/tests/fuzz/replay_main.o $(ALL_LIBS)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# bench sources are compiled in the link step: their objects would live in
# $(O)/bench/<name>/, which is the binary's own path ("%" is not replaced
# inside $(wildcard) during secondary expansion, hence $$*)
$(O)/bench/%: $$(wildcard bench/$$*/*.c) $(SUPPORT_OBJS) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CC+LD   $@")
	$(Q)$(CC) $(filter-out -MMD -MP,$(CFLAGS)) $(LDFLAGS) -o $@ $^ $(LDLIBS)

asan:
	$(MAKE) O=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" all

# libFuzzer targets: each tests/fuzz/fuzz_X.c links against the library
# sources compiled with coverage instrumentation.
FUZZ_CFLAGS := $(CFLAGS_BASE) -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
fuzz: $(FUZZ_SRCS:tests/fuzz/%.c=build-fuzz/%)
build-fuzz/%: tests/fuzz/%.c $(LIB_SRCS) $(DEV_SRCS)
	@mkdir -p build-fuzz
	clang $(FUZZ_CFLAGS) -o $@ $< $(LIB_SRCS) $(DEV_SRCS) $(LDLIBS)

deps:
	@scripts/install-deps

lint:
	@scripts/check-source

unit: all
	@tests/run-suites unit $(O)

# make test: every suite; tests/run-suites prints the closing total line.
# The real control plane is built when Go is there (tests/run-suites says
# so on one line when it is not, and runs the rest); the images always
# (their tools are Debian packages, installed by images-deps).
# The two build trees are built by one make with TEST_JOBS jobs (default 2,
# the CI machine's cores) unless make test was given -j itself: CI runs a
# plain `make test`, which used to compile everything one file at a time.
TEST_JOBS ?= 2
TEST_J = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(TEST_JOBS))
test: deps images-deps
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory $(TEST_J) all asan
	@if command -v go >/dev/null 2>&1; then tests/kube/build build/kube/bin; fi
	@$(MAKE) --no-print-directory images
	@tests/run-suites all

kube:
	@tests/kube/build build/kube/bin

# the chaos campaign's long form: its last line is the campaign's verdict
# (docs/chaos.md); CHAOS_ARGS overrides the kill points and budgets
CHAOS_ARGS ?= --tier all --kill-points local=700,terndev=150,kube=150 \
              --budget local=1500,terndev=1800,kube=1800
chaos: all
	@if command -v go >/dev/null 2>&1; then tests/kube/build build/kube/bin; fi
	@TERN_SIZE_TURNS=10000 build/tests/integration/test_journal_size
	@/usr/bin/python3 tests/chaos/chaos.py $(CHAOS_ARGS)

# tern-dev against kube-apiserver with every installed kubectl (make test
# runs the oldest and the default one)
differential: all
	@tests/kube/build build/kube/bin
	@TERN_CLUSTER=kube TERN_DIFF_KUBECTLS=all /usr/bin/python3 tests/integration/test_differential.py

valgrind: all
	@tests/run-suites valgrind $(O)

bench: all
	@for b in $(BENCH_BINS); do echo "== $$b"; $$b || exit 1; done
	@for p in bench/*/*.py; do echo "== $$p"; /usr/bin/python3 $$p || exit 1; done

CLUSTER ?= terndev
demo: deps all
	@if [ "$(CLUSTER)" = kube ]; then tests/kube/build build/kube/bin; fi
	@TERN_CLUSTER=$(CLUSTER) scripts/demo

# Images (docs/images.md): the tern image from ./Dockerfile and one
# tern-sandbox-<name> image per sandbox-images/<name>/Dockerfile, built by
# scripts/build-image from Debian packages (mmdebstrap, umoci) and the
# binaries of this build; no Docker engine. Named as the chart deploys them:
# $(IMAGE_REGISTRY)/<image>:<the chart's appVersion>.
VERSION        := $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' charts/tern/Chart.yaml)
IMAGE_REGISTRY ?= ghcr.io/tern-dev
IMAGE_DIR      := $(O)/images
SANDBOX_IMAGES := $(notdir $(wildcard sandbox-images/*))
IMAGES         := tern $(SANDBOX_IMAGES:%=tern-sandbox-%)
IMAGE_ARCHIVES := $(IMAGES:%=$(IMAGE_DIR)/%-$(VERSION).oci.tar)
BUILD_IMAGE     = $(Q)scripts/build-image --ref $(IMAGE_REGISTRY)/$(1):$(VERSION) \
                  --bin-dir $(O)/bin --cache-dir $(IMAGE_DIR)/cache --out $@ --dockerfile

images: $(IMAGE_ARCHIVES)

images-deps:
	@scripts/install-deps images

$(IMAGE_ARCHIVES): scripts/build-image $(CMD_BINS) $(FAKE_BINS) | images-deps

$(IMAGE_DIR)/tern-$(VERSION).oci.tar: Dockerfile
	@mkdir -p $(dir $@)
	$(call BUILD_IMAGE,tern) $<

$(IMAGE_DIR)/tern-sandbox-%-$(VERSION).oci.tar: sandbox-images/%/Dockerfile
	@mkdir -p $(dir $@)
	$(call BUILD_IMAGE,tern-sandbox-$*) $<

format:
	clang-format -i $$(find operator terndev tests bench -name '*.[ch]')

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(O) -name '*.d' 2>/dev/null)

# Fuzzing a target for a while (new inputs go to a scratch dir; copy the
# interesting ones into the seed corpus by hand):
#   make fuzz && mkdir -p /tmp/new && build-fuzz/fuzz_json -max_total_time=60 /tmp/new tests/fuzz/corpus/json
