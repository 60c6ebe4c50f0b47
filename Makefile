# raftsql: a SQLite loadable extension that makes a database one replica of
# a Raft group. `make` builds build/raftsql.so; `make demo` and `make test`
# are the two commands of the README and do all set-up themselves.

CC      ?= cc
PKGS    := sqlite3 libuv lmdb libxxhash jansson
WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CFLAGS  ?= -O2 -g
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -fPIC -fvisibility=hidden -I.
LIBS    = $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lsqlite3 -luv -llmdb -lxxhash -ljansson) -lpthread -lm
SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer \
           -fno-sanitize-recover=all

B := build

LIB_SRC  := $(wildcard raft/*.c lmdb_log/*.c sql/*.c ext/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(B)/obj/%.o)
SAN_OBJ  := $(LIB_SRC:%.c=$(B)/san/%.o)
TLIB_SRC := $(wildcard tests/lib/*.c)
TLIB_OBJ := $(TLIB_SRC:%.c=$(B)/san/%.o)
TEST_SRC := $(wildcard tests/unit/test_*.c tests/raft/test_*.c \
              tests/lmdb_log/test_*.c tests/sql/test_*.c tests/uv/test_*.c)
PYTHON  := /usr/bin/python3
TEST_BIN := $(TEST_SRC:%.c=$(B)/%)

.SECONDARY:
.PHONY: all deps demo test check check-layering unit e2e clean bench

all: $(B)/raftsql.so $(B)/libraftsql.a $(B)/raftsql-node

deps:
	@scripts/deps.sh

# The loadable extension: only sqlite3_raftsql_init (and the raftsql_* C
# API) are exported; everything else is hidden.
$(B)/raftsql.so: $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LIBS)

$(B)/libraftsql.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

# A small node program built on the same library (used by the demo and the
# end-to-end tests): a sqlite3 host that loads raftsql and reads SQL lines.
$(B)/raftsql-node: tools/raftsql_node.c $(B)/libraftsql.a
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $< $(B)/libraftsql.a $(LIBS)

# The benchmark (bench/README.md): never part of `make test`. `make bench`
# runs bench/compare.sh, which builds these two and runs raftsql beside
# dqlite, etcd and plain SQLite on 127.0.0.1.
$(B)/raftsql-bench: bench/raftsql_bench.c $(B)/libraftsql.a
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -pthread -o $@ $< $(B)/libraftsql.a $(LIBS)

$(B)/local-sqlite-bench: bench/local_sqlite.c
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $< $(LIBS)

bench: deps
	@bench/compare.sh

# The same node program built with the sanitizers, for the end-to-end tests.
$(B)/san/raftsql-node: tools/raftsql_node.c $(SAN_OBJ)
	$(CC) $(BASE_CFLAGS) -O1 -g $(SAN) -o $@ $^ $(LIBS)

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(B)/san/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -O1 -g $(SAN) -MMD -MP -c -o $@ $<

# One test binary per test file, built with ASan and UBSan, linking only the
# modules its folder tests (so a folder's tests build while others change).
san = $(patsubst %.c,$(B)/san/%.o,$(1))
CORE_SRC := $(filter-out raft/uv_%,$(wildcard raft/*.c))
UV_SRC   := $(wildcard raft/uv_*.c)
LMDB_SRC := $(wildcard lmdb_log/*.c)
SQL_SRC  := $(wildcard sql/*.c)
EXT_SRC  := $(wildcard ext/*.c)
T_LINK = $(CC) $(BASE_CFLAGS) -O1 -g $(SAN) -o $@ $^ -lcmocka $(LIBS)

$(B)/tests/unit/%: tests/unit/%.c $(TLIB_OBJ) $(call san,$(CORE_SRC))
	@mkdir -p $(dir $@)
	$(T_LINK)
$(B)/tests/raft/%: tests/raft/%.c $(TLIB_OBJ) $(call san,$(CORE_SRC))
	@mkdir -p $(dir $@)
	$(T_LINK)
$(B)/tests/lmdb_log/%: tests/lmdb_log/%.c $(TLIB_OBJ) \
		$(call san,$(CORE_SRC) $(LMDB_SRC))
	@mkdir -p $(dir $@)
	$(T_LINK)
$(B)/tests/sql/%: tests/sql/%.c $(TLIB_OBJ) $(call san,$(CORE_SRC) $(SQL_SRC))
	@mkdir -p $(dir $@)
	$(T_LINK)
$(B)/tests/uv/%: tests/uv/%.c $(TLIB_OBJ) $(call san,$(CORE_SRC) $(UV_SRC))
	@mkdir -p $(dir $@)
	$(T_LINK)

check-layering:
	@scripts/check-layering.sh

unit: $(TEST_BIN)
	@scripts/run-tests.sh $^

# End-to-end: real node processes (the sanitizer build) on 127.0.0.1.
e2e: all $(B)/san/raftsql-node
	RAFTSQL_NODE=$(B)/san/raftsql-node RAFTSQL_SO=$(B)/raftsql.so \
	    $(PYTHON) tests/e2e/run.py

test: deps
	@$(MAKE) --no-print-directory check-layering
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory e2e

check: test

demo: deps
	@$(MAKE) --no-print-directory all
	@$(PYTHON) tools/demo.py

clean:
	rm -rf $(B)

-include $(LIB_OBJ:.o=.d) $(SAN_OBJ:.o=.d) $(TLIB_OBJ:.o=.d)
