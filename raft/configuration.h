/* The cluster configuration (thesis ch. 4): the servers of a Raft group,
 * each a voter or a learner with an opaque address, and its byte codec, the
 * payload of RAFT_ENTRY_CONFIG entries (and of snapshot metadata). Pure.
 *
 * Encoding, integers little-endian, version 1 or 2:
 *
 *   configuration := version:u8 n:u32 server*n
 *   server (1)    := id:u64 role:u8 len:u16 address[len]
 *   server (2)    := id:u64 role:u8 flags:u8 len:u16 address[len]
 *
 * n <= RAFT_MAX_SERVERS; ids are > 0 and distinct; role is
 * RAFT_VOTER or RAFT_LEARNER; flags bit 0 is auto_promote, set on
 * learners only, the other bits are 0; the address is at most
 * RAFT_ADDRESS_MAX bytes and holds no NUL byte (in memory it is
 * NUL-terminated). The bytes must be consumed exactly. Each configuration
 * has one encoding: version 1 when no server has a flag (what builds
 * before version 2 wrote and read, so their entries decode as before and
 * an unflagged configuration stays readable by them), else version 2,
 * which such builds refuse as an unknown version. A version 2 encoding
 * without any flag is refused. A configuration is fixed-size (no heap):
 * copying is assignment and nothing needs freeing. */

#ifndef RAFT_CONFIGURATION_H
#define RAFT_CONFIGURATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "raft.h"

/* Version bytes of the configuration encoding: without, and with a flags
 * byte per server. */
#define RAFT_CONFIGURATION_VERSION 1
#define RAFT_CONFIGURATION_VERSION_FLAGS 2

/* Bytes of an encoded configuration with no server. */
#define RAFT_CONFIGURATION_HEADER (1 + 4)

/* raft_configuration_init makes @c empty (no server: the configuration of
 * a server that joins and knows nothing yet). Any thread. */
void raft_configuration_init(struct raft_configuration *c);

/* raft_configuration_find returns the position of server @id in @c, or -1
 * when it is not a member. Any thread. */
int raft_configuration_find(const struct raft_configuration *c, raft_id id);

/* raft_configuration_role returns the role of @id in @c (enum
 * raft_server_role), 0 when it is not a member. Any thread. */
uint8_t raft_configuration_role(const struct raft_configuration *c, raft_id id);

/* raft_configuration_n_voters returns the number of voters of @c. */
unsigned raft_configuration_n_voters(const struct raft_configuration *c);

/* raft_configuration_add appends server @id of @role (RAFT_VOTER or
 * RAFT_LEARNER) at @address (NUL-terminated, NULL for none) to @c.
 * Errors: RAFT_INVALID (@id is 0 or a member already, @role unknown, the
 * address longer than RAFT_ADDRESS_MAX bytes, or @c holds
 * RAFT_MAX_SERVERS servers already); @c is unchanged. Any thread. */
int raft_configuration_add(struct raft_configuration *c, raft_id id,
                           uint8_t role, const char *address);

/* raft_configuration_remove removes server @id from @c, keeping the order
 * of the others. Errors: RAFT_NOTFOUND (not a member). Any thread. */
int raft_configuration_remove(struct raft_configuration *c, raft_id id);

/* raft_configuration_equal tells whether @a and @b hold the same servers
 * in the same order with the same roles, flags and addresses. */
bool raft_configuration_equal(const struct raft_configuration *a,
                              const struct raft_configuration *b);

/* raft_configuration_valid tells whether @c is a configuration the decoder
 * accepts, which is exactly when raft_configuration_encode can encode it:
 * at most RAFT_MAX_SERVERS servers, ids non-zero and distinct, each role
 * RAFT_VOTER or RAFT_LEARNER, auto_promote on learners only, addresses of
 * at most RAFT_ADDRESS_MAX bytes. Any thread. */
bool raft_configuration_valid(const struct raft_configuration *c);

/* raft_configuration_encoded_len returns the bytes raft_configuration_encode
 * writes for @c. Any thread. */
size_t raft_configuration_encoded_len(const struct raft_configuration *c);

/* raft_configuration_encode writes @c into @buf (@len bytes, at least
 * raft_configuration_encoded_len). Errors: RAFT_INVALID (@len too small, or
 * @c is not one the decoder would accept: a zero or duplicate id, an unknown
 * role, auto_promote on a voter, an address too long, more than
 * RAFT_MAX_SERVERS servers). Any thread. */
int raft_configuration_encode(const struct raft_configuration *c, void *buf,
                              size_t len);

/* raft_configuration_encode_buf is raft_configuration_encode into a new
 * buf, whose one reference goes to the caller in *@out (written only on
 * success). Errors: as raft_configuration_encode; RAFT_NOMEM. */
int raft_configuration_encode_buf(const struct raft_configuration *c,
                                  struct raft_buf **out);

/* raft_configuration_decode parses the @len bytes at @buf into *@out
 * (written only on success); @errmsg (@errmsg_len bytes, may be NULL) says
 * what is wrong on failure. Errors: RAFT_FORMAT (unknown version);
 * RAFT_CORRUPT (truncated, trailing bytes, too many servers, a zero or
 * duplicate id, an unknown role, unknown flags or auto_promote on a
 * voter, version 2 without any flag, an address too long or holding a
 * NUL byte). Any thread. */
int raft_configuration_decode(const void *buf, size_t len,
                              struct raft_configuration *out, char *errmsg,
                              size_t errmsg_len);

/* raft_configuration_bootstrap builds what a fresh founding server writes
 * before its first raft_new (hashicorp's BootstrapCluster): the entry 1 of
 * term 1, RAFT_ENTRY_CONFIG, holding @c's servers sorted by id, all made
 * voters (so every founding server given the same servers, in any order,
 * writes byte-identical entries, and Log Matching holds), and the hard
 * state {term 1, no vote}; no flag is kept. *@out_entry's buf reference
 * goes to the caller.
 * Writes the outputs only on success.
 * Errors: RAFT_INVALID (@c has no server, or is not encodable);
 * RAFT_NOMEM. Any thread. */
int raft_configuration_bootstrap(const struct raft_configuration *c,
                                 struct raft_entry *out_entry,
                                 struct raft_hard_state *out_hs);

#endif /* RAFT_CONFIGURATION_H */
