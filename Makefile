# raftsql: a SQLite loadable extension that makes a database one replica of
# a Raft group. `make` builds build/raftsql.so; `make demo` and `make test`
# are the two commands of the README and do all set-up themselves.

CC      ?= cc
PKGS    := sqlite3 libuv lmdb libxxhash jansson openssl
WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CFLAGS  ?= -O2 -g
# Two builds of the same sources (docs/architecture.md "Build"): the
# objects of build/raftsql.so call SQLite only through the API table of the
# host that loads it (sqlite3ext.h, SQLITE_EXTENSION_INIT3) and the .so
# links no libsqlite3, so a process holds one SQLite; every other object
# (build/libraftsql.a, the test host, the tests, the benches) is compiled
# with SQLITE_CORE and calls the SQLite its program links.
SO_CFLAGS   := -std=c11 -D_GNU_SOURCE $(WARN) -fPIC -fvisibility=hidden -I.
BASE_CFLAGS := $(SO_CFLAGS) -DSQLITE_CORE
SO_PKGS := $(filter-out sqlite3,$(PKGS))
SO_LIBS = $(shell pkg-config --libs $(SO_PKGS) 2>/dev/null || echo -luv -llmdb -lxxhash -ljansson -lssl -lcrypto) -lpthread -lm
LIBS    = $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lsqlite3 -luv -llmdb -lxxhash -ljansson -lssl -lcrypto) -lpthread -lm
SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer \
           -fno-sanitize-recover=all

B := build

LIB_SRC  := $(wildcard raft/*.c lmdb_log/*.c sql/*.c ext/*.c \
              ext/runtime/*.c ext/surface/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(B)/obj/%.o)
SO_OBJ   := $(LIB_SRC:%.c=$(B)/so/%.o)
SAN_OBJ  := $(LIB_SRC:%.c=$(B)/san/%.o)
TLIB_SRC := $(wildcard tests/lib/*.c)
TLIB_HDR := $(wildcard tests/lib/*.h)
TLIB_OBJ := $(TLIB_SRC:%.c=$(B)/san/%.o)
TEST_SRC := $(wildcard tests/unit/test_*.c tests/raft/test_*.c \
              tests/lmdb_log/test_*.c tests/sql/test_*.c tests/uv/test_*.c \
              tests/sim/test_*.c tests/ext/test_*.c)
PYTHON  := /usr/bin/python3
TEST_BIN := $(TEST_SRC:%.c=$(B)/%)

.SECONDARY:
.PHONY: all deps demo test test-build check check-layering check-so fmt fmt-check unit \
        e2e tsan install uninstall check-install python-test node-test \
        man deb deb-deps deb-test \
        docs-check \
        next \
        tsan-uv \
        clean bench bench-check bench-scale sim \
        soak faults faults-short faults-netns jepsen jepsen-table \
        jepsen-clean \
        coverage fuzz fuzz-build fuzz-corpus

all: $(B)/raftsql.so $(B)/libraftsql.a $(B)/raftsql-testhost \
     $(B)/raftsql-node $(B)/examples/write_through $(B)/examples/embedded \
     $(B)/examples/read_barrier $(B)/examples/plain_exec

deps:
	@scripts/deps.sh

# The loadable extension: only sqlite3_raftsql_init (and the raftsql_* C
# API) are exported; everything else is hidden. -z defs: a direct call of
# a sqlite3_* routine (one not through the host's API table) fails the
# link, since no libsqlite3 is linked. Its SONAME is its file name (the
# Debian package puts it in the dynamic linker's path, for `.load
# raftsql`; nothing links it by that name).
$(B)/raftsql.so: $(SO_OBJ)
	$(CC) -shared -Wl,-z,defs -Wl,-soname,raftsql.so $(LDFLAGS) -o $@ $^ \
	    $(SO_LIBS)

$(B)/so/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(SO_CFLAGS) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

# The static library for C programs: the objects linked into one (ld -r)
# whose hidden symbols are made local, so that it exports what the .so
# exports (sqlite3_raftsql_init and raftsql_*) and none of its 600 internal
# functions (raft_step, status_json, ...) can clash with a program's own.
# Programs link it with -lsqlite3 and the other libraries of PKGS
# (raftsql.pc); the benches that use internals link $(LIB_OBJ) instead.
# (The Makefile is a prerequisite: an archive made by an older rule is
# made anew.)
$(B)/libraftsql.a: $(LIB_OBJ) Makefile
	$(LD) -r -o $(B)/libraftsql.o $(LIB_OBJ)
	objcopy --localize-hidden $(B)/libraftsql.o
	rm -f $@ && ar rcs $@ $(B)/libraftsql.o

# A small node program built on the same library (used by the demo and the
# end-to-end tests): a sqlite3 host that loads raftsql and reads SQL lines.
$(B)/raftsql-testhost: tools/raftsql_testhost.c $(B)/libraftsql.a
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $< $(B)/libraftsql.a $(LIBS)

# The daemon (tools/raftsql_node.c): one node in the foreground, configured
# from a file (docs/deploy.md has its systemd unit), serving its metrics
# over HTTP with libmicrohttpd (tools/node_metrics.c; the daemon alone
# links it: programs of libraftsql.a do not need it).
DAEMON_SRC  := tools/raftsql_node.c tools/node_metrics.c
DAEMON_DEPS := $(DAEMON_SRC) tools/node_metrics.h
DAEMON_LIBS  = $(shell pkg-config --libs libmicrohttpd 2>/dev/null || \
                 echo -lmicrohttpd)
$(B)/raftsql-node: $(DAEMON_DEPS) $(B)/libraftsql.a
	$(CC) $(BASE_CFLAGS) $(DAEMON_DEFS) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) \
	    -o $@ $(DAEMON_SRC) \
	    $(B)/libraftsql.a $(LIBS) $(DAEMON_LIBS)

# A C program writing through the node another process runs
# (examples/write_through.c, tests/e2e/test_attach.py).
$(B)/examples/write_through: examples/write_through.c ext/raftsql.h $(B)/libraftsql.a
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -Iext -o $@ $< $(B)/libraftsql.a $(LIBS)
# A C program reading through raftsql_barrier() (examples/read_barrier.c,
# tests/e2e/test_barrier.py).
$(B)/examples/read_barrier: examples/read_barrier.c ext/raftsql.h $(B)/libraftsql.a
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -Iext -o $@ $< $(B)/libraftsql.a $(LIBS)

# A C program writing plain SQL with sqlite3_exec through the node another
# process runs, raftsql loaded at run time (examples/plain_exec.c,
# tests/e2e/test_plain_attach.py): the host's libsqlite3 only.
$(B)/examples/plain_exec: examples/plain_exec.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(WARN) $(CFLAGS) -o $@ $< -lsqlite3

# A C program holding a one-node cluster (examples/embedded.c), written
# against the installed package (#include <raftsql.h>); `make
# check-install` builds it outside the tree with pkg-config only.
$(B)/examples/embedded: examples/embedded.c ext/raftsql.h $(B)/libraftsql.a
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(WARN) $(CFLAGS) -Iext -o $@ $< $(B)/libraftsql.a $(LIBS)

# `make install PREFIX=... DESTDIR=...`: the package for C programs and
# hosts (README "From a C program"): lib/libraftsql.a, lib/raftsql.so
# (the loadable extension: `.load PREFIX/lib/raftsql`), include/raftsql.h,
# lib/pkgconfig/raftsql.pc (ext/raftsql.pc.in with the prefix) and
# bin/raftsql-node. DESTDIR stages the files elsewhere (packaging); the
# .pc names PREFIX. LIBDIR replaces PREFIX/lib (the Debian package's
# /usr/lib/<multiarch>); the .pc names it under ${exec_prefix} when it
# lies under PREFIX.
PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
DESTDIR ?=
VERSION := 0.1.0
# raftsql-node --version prints it.
DAEMON_DEFS := -DRAFTSQL_VERSION='"$(VERSION)"'
I_LIB := $(DESTDIR)$(LIBDIR)
I_INC := $(DESTDIR)$(PREFIX)/include
I_BIN := $(DESTDIR)$(PREFIX)/bin
I_PC  := $(I_LIB)/pkgconfig
install: $(B)/libraftsql.a $(B)/raftsql.so $(B)/raftsql-node \
		ext/raftsql.h ext/raftsql.pc.in
	install -d $(I_LIB) $(I_INC) $(I_BIN) $(I_PC)
	install -m 0644 $(B)/libraftsql.a $(I_LIB)/libraftsql.a
	install -m 0644 $(B)/raftsql.so $(I_LIB)/raftsql.so
	install -m 0644 ext/raftsql.h $(I_INC)/raftsql.h
	install -m 0755 $(B)/raftsql-node $(I_BIN)/raftsql-node
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    -e 's|@LIBDIR@|$(patsubst $(PREFIX)/%,$${exec_prefix}/%,$(LIBDIR))|g' \
	    -e 's|@REQUIRES@|$(PKGS)|g' ext/raftsql.pc.in > $(I_PC)/raftsql.pc

# `make uninstall` removes those files and lib/pkgconfig if left empty
# (lib, include and bin are shared and stay).
uninstall:
	rm -f $(I_LIB)/libraftsql.a $(I_LIB)/raftsql.so $(I_INC)/raftsql.h \
	    $(I_BIN)/raftsql-node $(I_PC)/raftsql.pc
	-rmdir $(I_PC) 2>/dev/null || true

# The package used as a program outside the tree would use it (part of
# `make test`, seconds): scripts/check-install.sh installs into a
# temporary PREFIX (and with DESTDIR), checks what the library exports and
# that the header compiles alone (C and C++), builds examples/embedded.c
# in a temporary directory with only `cc app.c $$(pkg-config --cflags
# --libs raftsql)`, runs it, uninstalls and removes its directories.
check-install: $(B)/libraftsql.a $(B)/raftsql.so $(B)/raftsql-node
	@MAKE="$(MAKE)" PYTHON=$(PYTHON) scripts/check-install.sh

# The Python package (pyproject.toml, setup.py, python/raftsql/; README
# "From Python"), as a user installs it (part of `make test`, about 10 s):
# tests/python/test_package.py makes a fresh virtual environment with
# /usr/bin/python3 -m venv, runs the README's offline `pip install` in the
# tree (whose setup.py runs `make build/raftsql.so`), runs the installed
# module's tests there (tests/python/installed.py: load, errors, a
# three-node cluster), builds and installs a wheel, and uninstalls.
python-test: $(B)/raftsql.so
	@$(PYTHON) tests/python/test_package.py

# The Node.js example (examples/node/example.js, README "From Node.js"):
# raftsql loaded into better-sqlite3, writing through a node three
# daemons run (tests/node/test_example.py; part of `make test`, a few
# seconds). better-sqlite3 is installed with npm into
# ~/.cache/raftsql/node-<version> the first time (it compiles its
# SQLite: a minute or two, once per machine); skipped with the reason
# printed when node (20 or later) or npm is missing.
node-test: $(B)/raftsql.so $(B)/raftsql-node
	@RAFTSQL_SO=$(B)/raftsql.so RAFTSQL_DAEMON=$(B)/raftsql-node \
	    $(PYTHON) tests/node/test_example.py

# The man pages (docs/man/*.md, Markdown turned into roff by go-md2man,
# Debian's go-md2man package): build/man/raftsql-node.8 and raftsql.7.
# go-md2man escapes no line start, and roff takes a line that begins with
# `.` or `'` as a request (a text line `...)` vanishes without a warning):
# such a line fails the build, naming it.
# Their tables of functions, keys and codes come from docs/reference.md
# (tools/man_reference.py fills a page's `<!-- reference: HEADING -->`
# lines with the table under that heading).
MAN_SRC := $(wildcard docs/man/*.md)
man: $(MAN_SRC:docs/man/%.md=$(B)/man/%)
$(B)/man/%: docs/man/%.md docs/reference.md tools/man_reference.py
	@mkdir -p $(dir $@)
	$(PYTHON) tools/man_reference.py docs/reference.md < $< > $@.md
	go-md2man -in $@.md -out $@.tmp
	@if grep -n "^\(\.[^A-Za-z\\]\|'\)" $@.tmp; then \
	    echo "$<: the roff line above begins with . or ': reflow it"; \
	    rm -f $@.tmp; exit 1; fi
	@mv $@.tmp $@

# The Debian packages (docs/deploy.md "Debian packages"): `make deb`
# installs what building them needs when missing (scripts/deb-deps.sh: dpkg-dev,
# debhelper, lintian, debian/control's Build-Depends), builds them from
# the tree with dpkg-buildpackage -us -uc -b into build/deb/
# (scripts/deb-build.sh; the objects go to debian/build) and runs lintian
# on them, failing on an error. `make deb-test` (part of `make test`, about
# 40 s of CPU, most of it the compiler) builds them without the package
# checks, the debug symbols and the optimizer (no lintian: `noopt`
# compiles in half the time, and the test checks what is installed and
# that it runs, not its speed), installs
# them on this machine, runs the README's three-node session against the
# installed files and purges them (tests/deb/test_deb.py); it skips,
# saying why, when the tools cannot be installed.
deb-deps:
	@scripts/deb-deps.sh lintian

deb: deb-deps
	@scripts/deb-build.sh $(B)/deb
	lintian --fail-on error --display-info $(B)/deb/*.deb

deb-test:
	@if scripts/deb-deps.sh; then \
	    DEB_BUILD_OPTIONS="nocheck noautodbgsym noopt $(DEB_BUILD_OPTIONS)" \
	        scripts/deb-build.sh $(B)/deb-test >/dev/null && \
	    RAFTSQL_DEB_DIR=$(B)/deb-test $(PYTHON) -B -m unittest -v \
	        tests/deb/test_deb.py; \
	else \
	    echo "deb-test: skipped: the tools to build the packages are" \
	        "missing and could not be installed (above)"; \
	fi

# docs/reference.md against the code (part of `make test`, under a
# second): tests/docs/test_reference.py checks that every SQL function
# the library registers, every configuration key, every raft_status()
# field (a small cluster on 127.0.0.1), every raft_members column, every
# RAFTSQL_* code and every metric has its row there and nothing else does,
# and that the links between the README and docs/ reach their files and
# headings.
docs-check: $(B)/raftsql.so
	@RAFTSQL_SO=$(B)/raftsql.so $(PYTHON) -m unittest tests/docs/test_reference.py

# The benchmark (bench/README.md): never part of `make test`. `make bench`
# runs bench/compare.sh, which builds these two and runs raftsql beside
# dqlite, etcd and plain SQLite on 127.0.0.1.
BENCH_SRC := bench/raftsql_bench.c bench/cluster.c bench/child.c \
	bench/proc_cost.c
$(B)/raftsql-bench: $(BENCH_SRC) bench/cluster.h bench/child.h $(B)/delay-proxy \
		bench/latency.h bench/timing.h bench/xorshift.h \
		bench/proc_cost.h $(B)/libraftsql.a
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -pthread -o $@ $(BENCH_SRC) \
	    $(B)/libraftsql.a $(LIBS)

# The benchmark's network delay (this kernel has no netem): a TCP proxy
# holding each byte half a round trip each way (bench/delay_proxy.c).
$(B)/delay-proxy: bench/delay_proxy.c
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -pthread -o $@ $<

$(B)/local-sqlite-bench: bench/local_sqlite.c bench/proc_cost.c \
		bench/proc_cost.h bench/latency.h bench/timing.h bench/xorshift.h
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $(filter %.c,$^) $(LIBS)

# This machine's loopback TCP round trip, for the one-client write floor
# that bench/compare.sh reports each round (bench/rtt_probe.c).
$(B)/rtt-probe: bench/rtt_probe.c bench/latency.h bench/timing.h
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $<

# The CPU seconds and disk bytes of the peers' processes (etcd, dqlite),
# sampled by bench/compare.sh at their window's start and end.
$(B)/proc-cost: bench/proc_cost_tool.c bench/proc_cost.c bench/proc_cost.h \
		bench/timing.h
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $(filter %.c,$^)

# The time to apply one request of many statements, beside stock SQLite
# (bench/multi_statement.c).
$(B)/multi-statement-bench: bench/multi_statement.c bench/timing.h \
		$(LIB_OBJ)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $< $(LIB_OBJ) $(LIBS)

# The replica checksum's cost on the apply path (bench/checksum_apply.c).
$(B)/checksum-apply-bench: bench/checksum_apply.c bench/timing.h \
		bench/fsm_apply.h bench/xorshift.h $(LIB_OBJ)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $< $(LIB_OBJ) $(LIBS)

# The cost of RETURNING rows and client ids on the apply path
# (bench/query_apply.c).
$(B)/query-apply-bench: bench/query_apply.c bench/fsm_apply.h bench/xorshift.h \
		$(LIB_OBJ)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $< $(LIB_OBJ) $(LIBS)

# Plain reads with and without raftsql loaded (bench/reads.c, run by
# bench/reads.sh): the system's libsqlite3 only, the extension loaded at
# run time.
$(B)/reads-bench: bench/reads.c bench/timing.h bench/xorshift.h
	$(CC) -std=c11 $(WARN) $(CFLAGS) -o $@ $< -lsqlite3

bench: deps
	@bench/compare.sh

# The scaling curves (bench/README.md "Scaling curves"), never part of
# `make test`: SIZES="0.1 1" DURATION=10 make bench-scale, say.
bench-scale: deps
	@bench/scale.sh

# The benchmark's report and cost sampler, without a benchmark (part of
# `make test`, about 1 s): bench/report.py's medians, disk flag and
# ratios, and build/proc-cost's figures (tests/bench/test_report.py).
bench-check: $(B)/proc-cost $(B)/raftsql.so $(B)/raftsql-testhost
	@PROC_COST=$(B)/proc-cost $(PYTHON) -m unittest tests/bench/test_report.py \
	    tests/bench/test_scale.py

# The same node program built with the sanitizers, for the end-to-end tests:
# ASan + UBSan, and ThreadSanitizer for the threaded runtime.
$(B)/san/raftsql-testhost: tools/raftsql_testhost.c $(SAN_OBJ)
	$(CC) $(BASE_CFLAGS) -O1 -g $(SAN) -o $@ $^ $(LIBS)
$(B)/san/raftsql-node: $(DAEMON_DEPS) $(SAN_OBJ)
	$(CC) $(BASE_CFLAGS) $(DAEMON_DEFS) -O1 -g $(SAN) -o $@ $(filter-out %.h,$^) $(LIBS) \
	    $(DAEMON_LIBS)

TSAN_OBJ := $(LIB_SRC:%.c=$(B)/tsan/%.o)
$(B)/tsan/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -O1 -g -fsanitize=thread -DRAFTSQL_TEST_FAULTS -MMD \
	    -MP -c -o $@ $<
$(B)/tsan/raftsql-testhost: tools/raftsql_testhost.c $(TSAN_OBJ)
	$(CC) $(BASE_CFLAGS) -O1 -g -fsanitize=thread -o $@ $^ $(LIBS)
$(B)/tsan/raftsql-node: $(DAEMON_DEPS) $(TSAN_OBJ)
	$(CC) $(BASE_CFLAGS) $(DAEMON_DEFS) -O1 -g -fsanitize=thread -o $@ $(filter-out %.h,$^) \
	    $(LIBS) $(DAEMON_LIBS)

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

# The sanitizer objects (ASan/UBSan here, TSan above) carry the test-only
# faults (RAFTSQL_TEST_FAULTS: RAFTSQL_TEST_APPLY_SKEW, sql/checksum.h)
# that the end-to-end tests use.
$(B)/san/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -O1 -g $(SAN) -DRAFTSQL_TEST_FAULTS -MMD -MP -c \
	    -o $@ $<

# One test binary per test file, built with ASan and UBSan, linking only the
# modules its folder tests (so a folder's tests build while others change).
san = $(patsubst %.c,$(B)/san/%.o,$(1))
CORE_SRC := $(filter-out raft/uv_%,$(wildcard raft/*.c))
UV_SRC   := $(wildcard raft/uv_*.c)
LMDB_SRC := $(wildcard lmdb_log/*.c)
SQL_SRC  := $(wildcard sql/*.c)
EXT_SRC  := $(wildcard ext/*.c ext/runtime/*.c ext/surface/*.c)
# What the simulation runs beside the core: the write lease's rules and
# the staleness rule (pure: raft/ headers and libc only, and the log's
# time format, scripts/check-layering.sh).
SIM_SRC  := ext/runtime/lease_core.c ext/runtime/staleness_rule.c \
            ext/runtime/node_log.c
T_LINK = $(CC) $(BASE_CFLAGS) -O1 -g $(SAN) -o $@ $(filter-out %.h,$^) \
	-lcmocka $(LIBS)

$(B)/tests/unit/%: tests/unit/%.c $(TLIB_OBJ) $(call san,$(CORE_SRC))
	@mkdir -p $(dir $@)
	$(T_LINK)
$(B)/tests/raft/%: tests/raft/%.c tests/raft/step.h $(TLIB_OBJ) \
		$(call san,$(CORE_SRC))
	@mkdir -p $(dir $@)
	$(T_LINK)
$(B)/tests/sim/%: tests/sim/%.c $(wildcard tests/sim/*.h) $(TLIB_OBJ) \
		$(call san,$(CORE_SRC) $(SIM_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -O1 -g $(SAN) -o $@ $(filter-out %.h,$^) \
	    -lcmocka $(LIBS)
$(B)/tests/lmdb_log/%: tests/lmdb_log/%.c $(TLIB_OBJ) \
		$(call san,$(CORE_SRC) $(LMDB_SRC))
	@mkdir -p $(dir $@)
	$(T_LINK)
$(B)/tests/sql/%: tests/sql/%.c tests/sql/helpers.h $(call san,$(SQL_SRC))
	@mkdir -p $(dir $@)
	$(T_LINK)
UV_FAKE  := tests/uv/fake.c
$(B)/tests/uv/%: tests/uv/%.c tests/uv/fake.h tests/uv/loop.h $(TLIB_OBJ) \
		$(call san,$(CORE_SRC) $(UV_SRC) $(UV_FAKE))
	@mkdir -p $(dir $@)
	$(T_LINK)
$(B)/tests/ext/%: tests/ext/%.c tests/ext/helpers.h tests/sql/helpers.h \
		tests/uv/fake.h $(TLIB_OBJ) \
		$(call san,$(CORE_SRC) $(UV_SRC) $(LMDB_SRC) $(SQL_SRC) \
		$(EXT_SRC) $(UV_FAKE))
	@mkdir -p $(dir $@)
	$(T_LINK)

# A long simulation campaign (tests/sim/test_sim.c, SIM_CAMPAIGN mode):
# seeds SIM_FIRST.. of SEEDS seeds, each on 3 and 5 nodes, in a
# non-sanitized -O2 build, split over two processes. Prints how many runs
# ran and failed, and the replay command of every failure.
SEEDS     ?= 100000
SIM_FIRST ?= 1
SIM_STEPS ?= 10000
$(B)/sim/test_sim: tests/sim/test_sim.c $(wildcard tests/sim/*.h) \
		$(TLIB_SRC) $(TLIB_HDR) $(CORE_SRC) $(SIM_SRC) \
		$(wildcard raft/*.h) ext/runtime/lease_core.h \
		ext/runtime/staleness_rule.h ext/runtime/node_log.h
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -O2 -g -o $@ $(filter %.c,$^) -lcmocka $(LIBS)

sim: $(B)/sim/test_sim
	@a=$$(( $(SEEDS) / 2 )); b=$$(( $(SEEDS) - a )); \
	SIM_CAMPAIGN=1 SIM_STEPS=$(SIM_STEPS) SIM_FIRST=$(SIM_FIRST) \
	    SIM_SEEDS=$$a $< > $(B)/sim/campaign-a.log 2>&1 & pa=$$!; \
	SIM_CAMPAIGN=1 SIM_STEPS=$(SIM_STEPS) \
	    SIM_FIRST=$$(( $(SIM_FIRST) + a )) SIM_SEEDS=$$b $< \
	    > $(B)/sim/campaign-b.log 2>&1; rb=$$?; wait $$pa; ra=$$?; \
	grep -h '^replay:' $(B)/sim/campaign-a.log $(B)/sim/campaign-b.log; \
	grep -h '^sim campaign' $(B)/sim/campaign-a.log \
	    $(B)/sim/campaign-b.log; \
	test $$ra -eq 0 -a $$rb -eq 0

# Line and branch coverage of the raft core (raft/*.c but the uv_ files)
# from the core's tests (tests/unit, tests/raft, tests/sim), built without
# sanitizers at -O0 with gcov; summary with lcov, HTML in build/cov/html.
COV_FLAGS := -O0 -g --coverage
COV_TESTS := $(wildcard tests/unit/test_*.c tests/raft/test_*.c \
               tests/sim/test_*.c)
COV_OBJ   := $(patsubst %.c,$(B)/cov/obj/%.o,$(CORE_SRC) $(TLIB_SRC) \
               $(SIM_SRC))
LCOV      := lcov --quiet --rc lcov_branch_coverage=1
$(B)/cov/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(COV_FLAGS) -c -o $@ $<
$(B)/cov/bin/%: %.c $(COV_OBJ) $(wildcard tests/sim/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(COV_FLAGS) -o $@ $(filter-out %.h,$^) \
	    -lcmocka $(LIBS)

coverage: $(COV_TESTS:%.c=$(B)/cov/bin/%)
	@command -v lcov >/dev/null || { echo "coverage: apt-get install lcov"; \
	    exit 1; }
	@find $(B)/cov -name '*.gcda' -delete
	@for t in $^; do \
	    $$t > /dev/null 2>&1 || { echo "coverage: $$t failed"; exit 1; }; \
	done
	@$(LCOV) --capture --directory $(B)/cov/obj/raft \
	    --output-file $(B)/cov/raft.info 2>&1 | \
	    { grep -v 'redefined at' || true; }
	@$(LCOV) --list $(B)/cov/raft.info
	@$(LCOV) --summary $(B)/cov/raft.info
	@genhtml --quiet --branch-coverage -o $(B)/cov/html $(B)/cov/raft.info

# libFuzzer targets (tests/fuzz/fuzz_<name>.c) for every decoder of outside
# bytes, built with clang (libclang-rt-14-dev: -fsanitize=fuzzer) and ASan +
# UBSan; the modules they test are instrumented for coverage. `make fuzz`
# runs each for FUZZ_S seconds (scripts/fuzz.sh: a fresh temporary working
# corpus seeded from tests/fuzz/corpus/<name>/, which it never writes);
# `make test` runs each for FUZZ_TEST_S. `make fuzz-corpus` writes the seed
# corpus anew from the encoders (tests/fuzz/gen_corpus.c), to commit.
FUZZ_CC     := clang
FUZZ_S      ?= 60
FUZZ_TEST_S ?= 5
FUZZ_CFLAGS := -O1 -g -fno-omit-frame-pointer -fno-sanitize-recover=all
FUZZ_SRC    := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN    := $(FUZZ_SRC:tests/fuzz/%.c=$(B)/fuzz/%)
FUZZ_OBJ    := $(LIB_SRC:%.c=$(B)/fuzz/obj/%.o)
fz = $(patsubst %.c,$(B)/fuzz/obj/%.o,$(1))
FUZZ_LINK = $(FUZZ_CC) $(BASE_CFLAGS) $(FUZZ_CFLAGS) \
	-fsanitize=fuzzer,address,undefined -o $@ $(filter %.c %.o,$^) $(LIBS)

$(B)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(BASE_CFLAGS) $(FUZZ_CFLAGS) \
	    -fsanitize=fuzzer-no-link,address,undefined -MMD -MP -c -o $@ $<

$(B)/fuzz/fuzz_frame: tests/fuzz/fuzz_frame.c tests/fuzz/fuzz.h \
		$(call fz,$(CORE_SRC))
	$(FUZZ_LINK)
$(B)/fuzz/fuzz_configuration: tests/fuzz/fuzz_configuration.c \
		tests/fuzz/fuzz.h $(call fz,$(CORE_SRC))
	$(FUZZ_LINK)
$(B)/fuzz/fuzz_recv: tests/fuzz/fuzz_recv.c tests/fuzz/fuzz.h \
		$(call fz,$(CORE_SRC) $(UV_SRC))
	$(FUZZ_LINK)
$(B)/fuzz/fuzz_address: tests/fuzz/fuzz_address.c tests/fuzz/fuzz.h \
		$(call fz,$(CORE_SRC))
	$(FUZZ_LINK)
$(B)/fuzz/fuzz_request: tests/fuzz/fuzz_request.c tests/fuzz/fuzz.h \
		$(call fz,$(SQL_SRC))
	$(FUZZ_LINK)
$(B)/fuzz/fuzz_log_%: tests/fuzz/fuzz_log_%.c tests/fuzz/fuzz.h \
		$(call fz,$(CORE_SRC) $(LMDB_SRC))
	$(FUZZ_LINK)
$(B)/fuzz/fuzz_change: tests/fuzz/fuzz_change.c tests/fuzz/fuzz.h \
		$(call fz,$(CORE_SRC) ext/runtime/change_codec.c)
	$(FUZZ_LINK)

$(B)/fuzz/gen-corpus: tests/fuzz/gen_corpus.c \
		$(call san,$(CORE_SRC) $(UV_SRC) $(LMDB_SRC) $(SQL_SRC) \
		ext/runtime/change_codec.c)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -O1 -g $(SAN) -o $@ $^ $(LIBS)

fuzz-build: $(FUZZ_BIN)

fuzz: deps
	@$(MAKE) -s --no-print-directory fuzz-build
	@scripts/fuzz.sh $(FUZZ_S) $(FUZZ_BIN)

fuzz-corpus: $(B)/fuzz/gen-corpus
	rm -rf tests/fuzz/corpus
	$(B)/fuzz/gen-corpus tests/fuzz/corpus

check-layering:
	@scripts/check-layering.sh

# The loadable extension needs no libsqlite3 and calls SQLite only through
# its host's API table (scripts/check-so.sh).
check-so: $(B)/raftsql.so $(B)/raftsql_next.so
	@scripts/check-so.sh $^

# A host with its own SQLite (linked statically, symbols not exported)
# that loads build/raftsql.so (tests/e2e/test_host_sqlite.py).
SQLITE_A := $(shell pkg-config --variable=libdir sqlite3 2>/dev/null || \
              echo /usr/lib/x86_64-linux-gnu)/libsqlite3.a
$(B)/tests/host/static-host: tests/host/static_host.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -O1 -g -o $@ $< $(SQLITE_A) -lz -ldl -lpthread -lm

# A disk gone bad under one node's log, for the end-to-end tests: an
# LD_PRELOAD shim failing the syncs of data.mdb with EIO on demand
# (tests/host/fail_fsync.c, tests/e2e/test_daemon_attach.py).
$(B)/tests/host/fail-fsync.so: tests/host/fail_fsync.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -fPIC -O1 -g -shared -o $@ $< -ldl

# The C format (.clang-format: canonical raft's Chromium/4-space variant).
fmt:
	@scripts/fmt-check.sh --fix

fmt-check:
	@scripts/fmt-check.sh

unit: $(TEST_BIN)
	@scripts/run-tests.sh $^

# Test builds that play newer releases in a rolling upgrade
# (tests/e2e/test_wire_versions.py): the wire codec and the transport
# compiled to speak wire versions 1 to 8 (build/raftsql_next.so and its
# node program) or 8 only (raftsql-testhost-next-only), one above this
# build's 1 to 7, and 1 to 2 (raftsql-testhost-prev: the release before
# READ_INDEX, tests/e2e/test_barrier.py, whose request codec also
# decodes request formats 1 and 2 only, as that release's did);
# everything else is the normal build's objects.
WIRE_SRC  := raft/message.c $(UV_SRC)
PREV_SRC  := $(WIRE_SRC) sql/request.c
BASE_OBJ  := $(filter-out $(WIRE_SRC:%.c=$(B)/obj/%.o),$(LIB_OBJ))
NEXT_OBJ  := $(BASE_OBJ) $(WIRE_SRC:%.c=$(B)/next/%.o)
ONLY_OBJ  := $(BASE_OBJ) $(WIRE_SRC:%.c=$(B)/next-only/%.o)
PREV_OBJ  := $(filter-out $(PREV_SRC:%.c=$(B)/obj/%.o),$(LIB_OBJ)) \
             $(PREV_SRC:%.c=$(B)/prev/%.o)
NEXT_BINS := $(B)/raftsql_next.so $(B)/raftsql-testhost-next \
             $(B)/raftsql-testhost-next-only $(B)/raftsql-testhost-prev
$(B)/next/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -DRAFT_WIRE_VERSION_MAX_TEST=8 -MMD -MP \
	    -c -o $@ $<
$(B)/next-only/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -DRAFT_WIRE_VERSION_MIN_TEST=8 \
	    -DRAFT_WIRE_VERSION_MAX_TEST=8 -MMD -MP -c -o $@ $<
$(B)/prev/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -DRAFT_WIRE_VERSION_MAX_TEST=2 \
	    -DSQL_REQUEST_VERSION_MAX_TEST=2 -MMD -MP -c -o $@ $<
# (The wire files call no SQLite: the next .so takes the next objects.)
$(B)/raftsql_next.so: $(filter-out $(WIRE_SRC:%.c=$(B)/so/%.o),$(SO_OBJ)) \
		$(WIRE_SRC:%.c=$(B)/next/%.o)
	$(CC) -shared -Wl,-z,defs -o $@ $^ $(SO_LIBS)
$(B)/raftsql-testhost-next: tools/raftsql_testhost.c $(NEXT_OBJ)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $^ $(LIBS)
$(B)/raftsql-testhost-next-only: tools/raftsql_testhost.c $(ONLY_OBJ)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $^ $(LIBS)
$(B)/raftsql-testhost-prev: tools/raftsql_testhost.c $(PREV_OBJ)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $^ $(LIBS)

next: $(NEXT_BINS)

# End-to-end: real node processes (the sanitizer build) on 127.0.0.1,
# E2E_JOBS files at a time (E2E_ONLY=test_a,test_b runs only those:
# tests/e2e/run.py). A file keeps a third to a half of one core busy
# (test_membership: 31 s of CPU in 70 s; the rest is waiting for its
# nodes), so five at a time about fill the two cores; the TSan pass,
# whose nodes use several times the CPU, runs TSAN_JOBS at a time
# (measured: the ASan pass 406 s at three and 251 s at five, the TSan
# pass 224 s at three and 172 s at four).
E2E_JOBS ?= 5
TSAN_JOBS ?= 4
e2e: all $(B)/san/raftsql-testhost $(B)/san/raftsql-node $(NEXT_BINS) \
		$(B)/tests/host/static-host $(B)/tests/host/fail-fsync.so
	RAFTSQL_TESTHOST=$(B)/san/raftsql-testhost RAFTSQL_SO=$(B)/raftsql.so \
	    RAFTSQL_DAEMON=$(B)/san/raftsql-node E2E_JOBS=$(E2E_JOBS) \
	    $(PYTHON) tests/e2e/run.py

# The driver's unit tests (tests/uv) under ThreadSanitizer: the driver
# runs its loop and its storage jobs on threads of their own.
TSAN_UV_BIN := $(patsubst tests/uv/%.c,$(B)/tsan-tests/uv/%, \
                 $(wildcard tests/uv/test_*.c))
$(B)/tsan-tests/uv/%: tests/uv/%.c tests/uv/fake.h tests/uv/loop.h \
		$(patsubst %.c,$(B)/tsan/%.o,$(CORE_SRC) $(UV_SRC) $(UV_FAKE))
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -O1 -g -fsanitize=thread -o $@ \
	    $(filter-out %.h,$^) -lcmocka $(LIBS)

# The guard's list of connections (ext/surface/guard.c), expired from another
# thread while connections open and close, the runtime modules whose
# callers wait on other threads (exec.c, barrier.c, divergence.c,
# repair.c), forwarding on a real driver (forward.c), a leader call's wait (ext/runtime/leader_call.c) with a
# thread playing the loop, the registry of nodes, and the write lease asked
# of a fake node over a socket (lease_client.c), under ThreadSanitizer too.
TSAN_EXT_BIN := $(patsubst %,$(B)/tsan-tests/ext/%,test_guard_expire \
                  test_exec test_barrier test_divergence test_repair \
                  test_registry test_leader_call test_forward test_lease \
                  test_lease_client)
$(B)/tsan-tests/ext/%: tests/ext/%.c tests/ext/helpers.h tests/sql/helpers.h \
		tests/uv/fake.h $(TSAN_OBJ) $(B)/tsan/$(UV_FAKE:.c=.o)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -O1 -g -fsanitize=thread -o $@ \
	    $(filter-out %.h,$^) -lcmocka $(LIBS)

tsan-uv: $(TSAN_UV_BIN) $(TSAN_EXT_BIN)
	@TSAN_OPTIONS=halt_on_error=1:exitcode=66 scripts/run-tests.sh $^

# The same end-to-end tests with the nodes under ThreadSanitizer; any race
# report makes the node exit 66, which fails the test that stopped it.
# `make tsan` leaves out the files
# whose time goes to set-up and whose threads the others run alike
# (network namespaces, addresses, TLS handshakes, the wedge scenarios,
# kill loops, full disks, bootstrap and build checks, and the hosts that
# load the .so, which is not a TSan build: test_error_codes's nodes but
# one live in Python), and those whose work is the loop's alone or the
# host's (membership changes, which the simulation and the unit tests
# cover; big values, whose transport tsan-uv runs under TSan; the daemon
# beside test_daemon_attach; founding, dump, load_sql and unreplicated
# tables, on the applier's and the attach server's threads as the others
# run them); `make tsan TSAN_SKIP=` runs them all.
TSAN_SKIP ?= test_netns,test_netns_tls,test_tls_netns,test_addresses,\
test_dial,test_build_id,test_host_sqlite,test_python_host,\
test_failed_start,test_bootstrap,test_cluster_id,test_crash,test_disks,\
test_tls,test_wedges,test_runaway,test_error_codes,test_membership,\
test_bigvalue,test_daemon,test_founding,test_dump,test_load_sql,\
test_unreplicated,test_netns_deploy
# make test runs only TSAN_TEST_ONLY (TSAN_ONLY): the files whose nodes
# run the most threads at once (the attach server with writers of other
# processes, the write lease, a plain COMMIT's crash windows and faults,
# barriers, a removed node), about 100 s; `make tsan` runs every file but
# TSAN_SKIP's (about 320 s), before an issue is resolved.
TSAN_TEST_ONLY := test_attach,test_plain_writes,test_plain_attach
TSAN_TEST_ONLY := $(TSAN_TEST_ONLY),test_plain_crash,test_plain_lease_faults
TSAN_TEST_ONLY := $(TSAN_TEST_ONLY),test_barrier,test_removed
tsan: all $(B)/tsan/raftsql-testhost $(B)/tsan/raftsql-node
	TSAN_OPTIONS=exitcode=66:suppressions=$(CURDIR)/tests/tsan.supp \
	    RAFTSQL_TESTHOST=$(B)/tsan/raftsql-testhost \
	    RAFTSQL_DAEMON=$(B)/tsan/raftsql-node RAFTSQL_SO=$(B)/raftsql.so \
	    E2E_SKIP="$(TSAN_SKIP)" E2E_ONLY="$(TSAN_ONLY)" \
	    E2E_JOBS=$(TSAN_JOBS) $(PYTHON) tests/e2e/run.py

# The long crash loop (tests/e2e/test_crash.py): 100 kills under load and
# a follower catching up over 50,000 writes, on the optimized build.
soak: all
	cd tests/e2e && RAFTSQL_TESTHOST=../../$(B)/raftsql-testhost SOAK_KILLS=100 \
	    SOAK_WRITES=50000 $(PYTHON) -m unittest -v test_crash

# The fault-injection suite (tests/faults/run.py): clusters of sanitizer
# nodes behind a TCP proxy per directed link, clients writing while faults
# come (partitions, one-way cuts, black holes, delays, packet loss, held
# and released traffic, connection resets, SIGSTOP, kill -9, full log
# disks on tmpfs, membership changes),
# then the checks. `make faults` is the long run (FAULTS_SEED, FAULTS_COUNT
# faults, at most FAULTS_S seconds of faults, FAULTS_KINDS); the replay
# line of a failure is a `make faults` with its seed and count.
FAULTS_COUNT   ?= 200
FAULTS_S       ?= 1800
FAULTS_EPISODE ?= 25
FAULTS_ENV = RAFTSQL_TESTHOST=$(B)/san/raftsql-testhost RAFTSQL_SO=$(B)/raftsql.so \
	FAULTS_SEED=$(FAULTS_SEED) \
	FAULTS_KINDS=$(FAULTS_KINDS) FAULTS_NODES=$(FAULTS_NODES) \
	FAULTS_CLIENTS=$(FAULTS_CLIENTS) FAULTS_HOSTS=$(FAULTS_HOSTS)
faults: $(B)/san/raftsql-testhost $(B)/raftsql.so
	$(FAULTS_ENV) FAULTS_COUNT=$(FAULTS_COUNT) FAULTS_S=$(FAULTS_S) \
	    FAULTS_EPISODE=$(FAULTS_EPISODE) $(PYTHON) tests/faults/run.py

# The same faults with every node on a host of its own (FAULTS_HOSTS=netns,
# tests/faults/hosts.py): network namespaces on a bridge, peers over TLS,
# partitions as links set down and policy rules, resets by ss -K; no
# delay, loss or hold (no netem). Root only; not in make test. Runs the
# mode's own tests first (the rules on real namespaces), then `make faults`
# with FAULTS_HOSTS=netns (FAULTS_SEED, FAULTS_COUNT, FAULTS_NODES, ...).
faults-netns: $(B)/san/raftsql-testhost $(B)/raftsql.so $(B)/powerloss.so
	@$(PYTHON) -m unittest tests/faults/test_hosts.py
	@$(MAKE) --no-print-directory faults FAULTS_HOSTS=netns

# The short variant, in `make test`: the proxy's, the checks' and the
# history checkers' own tests (linearizability, list-append
# serializability, bounded staleness, monotonic "now"), then one episode
# of 20 faults (at most 60 s of them) on a fresh seed, every kind (full
# disks too: a node heals once its disk is freed; clock jumps: a leader
# behind stamps the latest stamp of its log), with the bounded-staleness
# local reads, its history checked (docs/testing.md).
FAULTS_SHORT_KINDS := partition,oneway,drop,delay,loss,hold,reset,pause,kill,disk,member,clock,asym,bridge
FAULTS_UNIT := net checks history linearizable elle staleness monotonic \
	nemesis jepsen
faults-short: $(B)/san/raftsql-testhost $(B)/raftsql.so
	@$(PYTHON) -m unittest $(FAULTS_UNIT:%=tests/faults/test_%.py)
	RAFTSQL_TESTHOST=$(B)/san/raftsql-testhost RAFTSQL_SO=$(B)/raftsql.so \
	    FAULTS_SEED=$(FAULTS_SEED) \
	    FAULTS_KINDS=$(FAULTS_SHORT_KINDS) FAULTS_COUNT=20 FAULTS_S=60 \
	    FAULTS_EPISODE=20 $(PYTHON) tests/faults/run.py

# The long campaign (tests/faults/jepsen.py), not in make test: every
# fault kind, on 3 and on 5 nodes, until each kind was injected
# JEPSEN_FAULTS times on each size (hours: docs/testing.md), with the
# register, list-append and bank workloads and every checker. Resumable:
# each episode's record goes to tests/faults/campaign/loopback.jsonl (in
# the repository: commit it), and the next `make jepsen` goes on from
# there (JEPSEN_S bounds one run's seconds); it prints the summary table
# at the end, also when stopped. Failed episodes whose cause is fixed are
# listed in loopback-fixed.jsonl (JEPSEN_FIXED). `make jepsen-table`
# prints that table alone, `make jepsen-clean` starts a new campaign.
# Failed episodes' histories and logs are kept in
# $(B)/jepsen/suspicious/seed-<S>/.
# JEPSEN_HOSTS=netns runs the campaign with each node on a host of its
# own (network namespaces, TLS: as faults-netns), recorded apart in
# tests/faults/campaign/netns.jsonl, its logs in $(B)/jepsen-netns.
JEPSEN_FAULTS ?= 1000
JEPSEN_HOSTS ?= loopback
JEPSEN_DIR ?= $(B)/jepsen$(if $(filter netns,$(JEPSEN_HOSTS)),-netns)
JEPSEN_RECORD ?= tests/faults/campaign/$(if $(filter netns,$(JEPSEN_HOSTS)),netns,loopback).jsonl
JEPSEN_FIXED ?= $(JEPSEN_RECORD:.jsonl=-fixed.jsonl)
jepsen: $(B)/san/raftsql-testhost $(B)/raftsql.so
	RAFTSQL_TESTHOST=$(B)/san/raftsql-testhost RAFTSQL_SO=$(B)/raftsql.so \
	    JEPSEN_DIR=$(JEPSEN_DIR) JEPSEN_RECORD=$(JEPSEN_RECORD) \
	    JEPSEN_FIXED=$(JEPSEN_FIXED) \
	    JEPSEN_FAULTS=$(JEPSEN_FAULTS) JEPSEN_HOSTS=$(JEPSEN_HOSTS) \
	    JEPSEN_NODES=$(JEPSEN_NODES) JEPSEN_KINDS=$(JEPSEN_KINDS) \
	    JEPSEN_EPISODE=$(JEPSEN_EPISODE) JEPSEN_S=$(JEPSEN_S) \
	    JEPSEN_SEED=$(JEPSEN_SEED) $(PYTHON) tests/faults/jepsen.py

jepsen-table:
	@JEPSEN_DIR=$(JEPSEN_DIR) JEPSEN_RECORD=$(JEPSEN_RECORD) \
	    JEPSEN_FIXED=$(JEPSEN_FIXED) \
	    JEPSEN_FAULTS=$(JEPSEN_FAULTS) JEPSEN_HOSTS=$(JEPSEN_HOSTS) \
	    JEPSEN_NODES=$(JEPSEN_NODES) JEPSEN_KINDS=$(JEPSEN_KINDS) \
	    $(PYTHON) tests/faults/jepsen.py --table

jepsen-clean:
	rm -rf $(JEPSEN_DIR) $(JEPSEN_RECORD) $(JEPSEN_FIXED)

# The power-loss fault (FAULTS_KINDS=power, tests/faults/powerloss.py):
# an LD_PRELOAD shim that journals what a power failure would lose (old
# bytes of unsynced writes, unsynced creates/renames/unlinks) for the
# restore that follows a SIGKILL; faults-power runs the shim's own tests.
$(B)/powerloss.so: tests/faults/powerloss.c tests/faults/powerloss.h
	@mkdir -p $(B)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -fPIC $(CFLAGS) -shared -o $@ $< \
	    -ldl -lpthread
faults faults-short jepsen: $(B)/powerloss.so
FAULTS_UNIT += powerloss
.PHONY: faults-power
faults-power: $(B)/powerloss.so
	POWERLOSS_SO=$(B)/powerloss.so $(PYTHON) -m unittest tests/faults/test_powerloss.py

# Everything `make test` runs, built first on every core (the steps
# after it then find their programs built): the optimized build, the unit
# tests, the sanitizer, TSan and fuzz builds and the rolling-upgrade
# builds. One compiler per core: about 4 minutes serially, half that on two.
NPROC := $(shell nproc 2>/dev/null || echo 1)
test-build: all $(TEST_BIN) $(B)/proc-cost $(TSAN_UV_BIN) $(TSAN_EXT_BIN) \
		$(FUZZ_BIN) $(B)/san/raftsql-testhost $(B)/san/raftsql-node \
		$(NEXT_BINS) $(B)/tests/host/static-host \
		$(B)/tests/host/fail-fsync.so $(B)/tsan/raftsql-testhost \
		$(B)/tsan/raftsql-node

test: deps
	@scripts/timed.sh check-layering $(MAKE) --no-print-directory check-layering
	@scripts/timed.sh fmt-check $(MAKE) --no-print-directory fmt-check
	@scripts/timed.sh test-build $(MAKE) --no-print-directory -j$(NPROC) test-build
	@scripts/timed.sh check-so $(MAKE) --no-print-directory check-so
	@scripts/timed.sh docs-check $(MAKE) --no-print-directory docs-check
	@scripts/timed.sh check-install $(MAKE) --no-print-directory check-install
	@scripts/timed.sh python-test $(MAKE) --no-print-directory python-test
	@scripts/timed.sh node-test $(MAKE) --no-print-directory node-test
	@scripts/timed.sh deb-test $(MAKE) --no-print-directory deb-test
	@scripts/timed.sh unit $(MAKE) --no-print-directory unit
	@scripts/timed.sh bench-check $(MAKE) --no-print-directory bench-check
	@scripts/timed.sh tsan-uv $(MAKE) --no-print-directory tsan-uv
	@scripts/timed.sh fuzz $(MAKE) --no-print-directory fuzz FUZZ_S=$(FUZZ_TEST_S)
	@scripts/timed.sh e2e $(MAKE) --no-print-directory e2e
	@scripts/timed.sh faults-short $(MAKE) --no-print-directory faults-short
	@scripts/timed.sh tsan $(MAKE) --no-print-directory tsan \
	    TSAN_ONLY=$(TSAN_TEST_ONLY)

check: test

demo: deps
	@$(MAKE) --no-print-directory all
	@$(PYTHON) tools/demo.py

clean:
	rm -rf $(B)

-include $(LIB_OBJ:.o=.d) $(SO_OBJ:.o=.d) $(SAN_OBJ:.o=.d) $(TLIB_OBJ:.o=.d) $(TSAN_OBJ:.o=.d) \
    $(patsubst %.c,$(B)/san/%.d,$(UV_FAKE)) \
    $(patsubst %.c,$(B)/tsan/%.d,$(UV_FAKE)) $(FUZZ_OBJ:.o=.d) \
    $(WIRE_SRC:%.c=$(B)/next/%.d) $(WIRE_SRC:%.c=$(B)/next-only/%.d) \
    $(PREV_SRC:%.c=$(B)/prev/%.d)
