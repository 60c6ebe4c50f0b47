/* The libuv TCP transport between the servers of one cluster: it carries
 * frames (frame.h), the core's messages and the runtime's alike, and knows
 * nothing of what they mean (the node driver that uses it is declared in
 * uv_node.h).
 *
 * Each server listens on its own address and opens one outgoing connection
 * to every peer; it sends on its outgoing connections and receives on the
 * connections it accepted. The peers change at run time
 * (raft_uv_transport_add_peer, _remove_peer: the driver follows the
 * cluster configuration). A connection starts with a handshake from the
 * dialler, without length prefix (handshake version 4):
 *
 *     offset 0     magic "RFTSQL", 6 bytes
 *     offset 6     handshake version, u8 = 4 (RAFT__UV_HANDSHAKE_VERSION)
 *     offset 7     lowest wire version spoken, u8 (RAFT_WIRE_VERSION_MIN)
 *     offset 8     highest wire version spoken, u8 (RAFT_WIRE_VERSION)
 *     offset 9     cluster id, 16 bytes, all zero while the sender has
 *                  none (a server that joins, or a cluster whose first
 *                  leader has not committed one yet)
 *     offset 25    sender id, u64 little-endian
 *     offset 33    build id length L, u8, at most RAFT_UV_BUILD_ID_MAX
 *     offset 34    build id, L bytes of printable ASCII (0x20-0x7e)
 *     offset 34+L  listen address length A, u8 (up to 255: an IPv6
 *                  literal in brackets with a port, a 253-byte host name)
 *     offset 35+L  the sender's listen address, A bytes, "host:port"
 *                  (printable ASCII)
 *
 * and the acceptor answers it, on the same connection, once:
 *
 *     offset 0     magic "RFTSQL", 6 bytes
 *     offset 6     handshake version, u8 = 4
 *     offset 7     verdict, u8: 0 accepted; refused: 1 another cluster,
 *                  2 the sender id (0, the acceptor's own, or under TLS
 *                  one its certificate does not name), 3 no wire version
 *                  in common, 4 another handshake version or a malformed
 *                  handshake
 *     offset 8     the acceptor's lowest wire version, u8
 *     offset 9     its highest wire version, u8
 *     offset 10    its cluster id, 16 bytes (zero for none)
 *     offset 26    its server id, u64 little-endian
 *     offset 34    reason length R, u8 (0 when accepted)
 *     offset 35    why it refused, R bytes of printable ASCII, as the
 *                  dialler logs it ("cluster id 1f2e... is not its
 *                  cluster a9b8...")
 *
 * The acceptor refuses a handshake of another handshake version (read as
 * soon as 9 bytes arrived, so a peer of another version is refused with
 * one line: "handshake version 3, want 4 ... an older raftsql"; earlier
 * versions are not read: there is no installed base to read them for),
 * wire versions that do not meet its own, a cluster id that is not its
 * own when both have one (a server with no cluster id is refused for no
 * cluster, and refuses none), a sender id of 0 or its own, and a
 * malformed build id or address; a bad magic is closed without answer
 * (not raftsql). Each refusal is one WARN line on either side (repeated
 * refusals of a dialler that retries are logged at DEBUG), the refusal
 * goes back before the connection closes, and the dialler re-dials with
 * its backoff. A sender that is not one of its peers (a joining server,
 * a leader this server does not know yet, or a removed server that
 * campaigns, which a leader replicates to again: raft_leaving) is
 * accepted and dialled back
 * at its listen address, as a new peer, while fewer than RAFT_MAX_SERVERS
 * are known. A build id that differs from the acceptor's own is logged at
 * WARN and accepted. The dialler sends no frame before the acceptance
 * (raft_uv_transport_send answers RAFT_NOCONN until then; an answer not
 * back within 3 s fails the dial); then both sides use the highest wire
 * version both speak, min(highest of each), for the frames of that
 * connection, in the wire format of message.h, each with from = the
 * handshake's id and to = the acceptor's id (a frame of another version
 * closes the connection). A broken outgoing connection is re-dialled with
 * exponential backoff (100 ms doubling to 2 s, reset by an acceptance; a
 * dial pending for 3 s is abandoned). A peer known by hostname is
 * resolved anew before each dial (uv_getaddrinfo: IPv4 and IPv6 results;
 * a failed connect moves on to its next IP on the next dial; a failed
 * resolution is logged once per change of error and retried with the
 * same backoff). A malformed frame, bad handshake or
 * oversized length closes that one connection and is logged; the server
 * keeps running.
 *
 * TLS (optional, uv_tls.h): beneath all of the above, every connection
 * is a TLS 1.3 session over the libuv stream, driven through memory BIOs
 * from the libuv callbacks (no blocking socket I/O on the loop). The
 * dialler is the TLS client, the acceptor the server. Both authenticate
 * with certificates or with a pre-shared key:
 * - certificates: each side verifies the other's chain against its CA
 *   file and requires one; the identity rule: the peer's certificate
 *   must name, in its subjectAltName, the host of that member's address
 *   (an IP entry for a literal, a DNS entry for a hostname). The dialler
 *   checks the server it reached against the address of the member it
 *   dialled as the configuration gives it (even when dial= says where to
 *   connect); the acceptor checks the client's certificate once the
 *   handshake above told it the sender's id: against that member's
 *   address among its peers, or for a server that is no peer yet (a
 *   joining one), the listen address its handshake gives, before it is
 *   dialled back; a mismatch is refused (verdict 2) like any refusal
 *   above. A member known by hostname is checked against that name,
 *   whatever IP it resolved to;
 * - a pre-shared key (RFC 8446 external PSK with psk_dhe_ke): proves
 *   membership of the cluster, not which member; any holder of the
 *   secret can claim any id.
 * The dialler sends the handshake above, inside TLS, once its TLS
 * handshake completed and the server passed the identity rule, and
 * counts as connected (frames are taken) once the answer accepted it;
 * the TLS handshake has a 3 s timeout of its own, like the dial and the
 * answer, and the acceptor's handshake timeout covers TLS and the
 * handshake above. A failed TLS handshake, an
 * identity mismatch or a record that does not authenticate closes that
 * connection only, with one WARN line (identical ones from one peer once
 * per 10 s); nothing it carried reaches the receive callback. A dialler
 * without TLS (its handshake above arrives in the clear) gets a refusal
 * in the clear (verdict 4, "it takes peers over TLS only ...", naming
 * neither the acceptor's id nor its cluster id, both zero) so that it
 * logs why, once, like any refusal. Frames are
 * coalesced into records of up to 16 KiB: one SSL_write per batch of
 * small frames, then one uv_write of the ciphertext. The certificate
 * files are stat'ed every 5 s and reloaded when they changed; new
 * connections use the new ones, existing connections keep theirs.
 *
 * Threads: every function runs on the loop thread of @loop. */

#ifndef RAFT_UV_H
#define RAFT_UV_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "frame.h"
#include "logging.h"
#include "uv_node.h"
#include "uv_tls.h"

struct raft_uv_transport; /* opaque */

/* Called on the loop thread for each frame received. @f and its bufs
 * belong to the transport and are released after the callback returns;
 * take references to keep bufs. @f->from is the sender established by the
 * connection's handshake. */
typedef void (*raft_uv_recv_cb)(void *data, const struct raft_frame *f);

/* raft_uv_transport_start starts listening on @listen_host:@listen_port
 * (an IPv4 or IPv6 literal without brackets, "0.0.0.0" and "::" for every
 * interface; "::" takes IPv4 too unless the system sets bindv6only; port 0
 * picks a free port, see raft_uv_transport_port) and dialling each of the
 * @n_peers @peers (copied; a peer's host may be a hostname, resolved with
 * uv_getaddrinfo before each dial). @advertise (copied; "host:port", NULL
 * for the listen address, or none for a wildcard) is the address every
 * handshake gives for this server, where a server that does not know it
 * dials it back. @max_frame_bytes bounds the body of one frame in either
 * direction. @build_id (copied; NULL or "" for none) goes in every
 * handshake and is compared with the peers'. @tls (borrowed: it must
 * outlive the transport; NULL for plain TCP) carries every connection in
 * TLS with its credentials. @recv_cb and @log_cb are called with @data.
 * Writes *out only on success; @errmsg receives the message on failure.
 * Errors: RAFT_IOERR (bind/listen failure, e.g. address in use, with
 * uv_strerror text), RAFT_INVALID (a listen host that is no IP literal,
 * a bad advertised or peer address, peer id 0, equal to @self or
 * repeated, @self 0, @max_frame_bytes < 2, NULL @recv_cb, a @build_id
 * longer than RAFT_UV_BUILD_ID_MAX or not printable ASCII), RAFT_NOMEM.
 * Bind and listen happen on a plain socket before any handle exists, so
 * their failure leaves nothing registered with @loop (only a failure of
 * libuv to adopt the bound socket leaves a closing handle, freed by the
 * next loop run). */
int raft_uv_transport_start(uv_loop_t *loop, raft_id self,
                            const char *listen_host, uint16_t listen_port,
                            const char *advertise,
                            const struct raft_uv_peer *peers, unsigned n_peers,
                            uint64_t max_frame_bytes, const char *build_id,
                            struct raft_uv_tls *tls, raft_uv_recv_cb recv_cb,
                            raft_log_cb log_cb, void *data,
                            struct raft_uv_transport **out, char *errmsg,
                            size_t errmsg_len);

/* raft_uv_transport_port returns the TCP port actually listened on. */
uint16_t raft_uv_transport_port(const struct raft_uv_transport *t);

/* raft_uv_transport_send encodes @f at once (the caller may free @f and its
 * bufs on return) and queues it on the connection to @f->to. Frames to one
 * peer are written in order. Raft tolerates loss, so a frame to a peer
 * that is not connected is dropped.
 * Errors: RAFT_NOCONN (not connected: dropped), RAFT_BUSY (the frame
 * would take the bytes queued to that peer past 64 MiB: dropped; a frame
 * always goes when nothing is queued), RAFT_NOTFOUND (unknown peer),
 * RAFT_TOOBIG (body larger than max_frame_bytes), RAFT_INVALID (@f->from
 * is not this server, or encoding failed), RAFT_NOMEM. */
int raft_uv_transport_send(struct raft_uv_transport *t,
                           const struct raft_frame *f);

/* raft_uv_transport_add_peer makes @p a peer (dialled at once), or gives
 * a known peer its new address (its connection is re-dialled there); the
 * same address changes nothing. Errors: RAFT_INVALID (id 0 or this
 * server's, a bad address), RAFT_BUSY (RAFT_MAX_SERVERS peers already),
 * RAFT_SHUTDOWN (closing), RAFT_NOMEM. */
int raft_uv_transport_add_peer(struct raft_uv_transport *t,
                               const struct raft_uv_peer *p);

/* raft_uv_transport_remove_peer closes the connection to peer @id, drops
 * what is queued to it and forgets it (a later handshake from it may
 * make it a peer again). Errors: RAFT_NOTFOUND (not a peer, or
 * closing). */
int raft_uv_transport_remove_peer(struct raft_uv_transport *t, raft_id id);

/* raft_uv_transport_connected says whether the outgoing connection to @id
 * is established. */
bool raft_uv_transport_connected(const struct raft_uv_transport *t, raft_id id);

/* raft_uv_transport_peer_wire returns the wire version agreed on the
 * established outgoing connection to @id (the version its frames go in),
 * or 0 while none is established or for an unknown peer. */
unsigned raft_uv_transport_peer_wire(const struct raft_uv_transport *t,
                                     raft_id id);

/* raft_uv_transport_peer_wire_last returns the wire version agreed in the
 * latest accepted handshake of the outgoing connection to @id, also once
 * that connection closed: what the peer spoke when last reached. 0 while
 * no handshake with it was accepted since the transport started, or for
 * an unknown peer. */
unsigned raft_uv_transport_peer_wire_last(const struct raft_uv_transport *t,
                                          raft_id id);

/* The id of the peer raft_uv_node_probe dials: a server whose id is not
 * known yet (a join= address). Never a server's id; no frame is ever
 * addressed to it (the handshake it carries makes the server there dial
 * back, and that connection tells its id). */
#define RAFT_UV_PROBE_ID UINT64_MAX

/* raft_uv_transport_connected_peers writes into @ids (room for @max) the
 * ids of the peers whose outgoing connection is established, the probe
 * excluded, and returns how many it wrote. */
unsigned raft_uv_transport_connected_peers(const struct raft_uv_transport *t,
                                           raft_id *ids, unsigned max);

/* raft_uv_transport_contacts writes into @ids (room for @max) the ids of
 * the peers that showed life since the previous call without a whole
 * frame necessarily arriving, and returns how many it wrote: bytes of a
 * large frame (64 KiB or more) came from them on an
 * accepted connection and more of it is still to come, or they took
 * bytes that waited for them (their socket's window opened while bytes
 * were queued to it, so their process reads). The driver steps each as
 * RAFT_EVENT_CONTACT (raft.h): a large frame takes seconds to cross, and
 * the heartbeats queued behind it cannot arrive sooner. Each call starts
 * a new period. Loop thread. */
unsigned raft_uv_transport_contacts(struct raft_uv_transport *t, raft_id *ids,
                                    unsigned max);

/* raft_uv_transport_peer_build_id returns the build id peer @id sent in
 * the handshake of its latest accepted connection ("" for none), or NULL
 * while none arrived or for an unknown peer. Valid until the next
 * handshake from that peer or raft_uv_transport_close. */
const char *raft_uv_transport_peer_build_id(const struct raft_uv_transport *t,
                                            raft_id id);

/* raft_uv_transport_set_cluster_id makes @id (copied; all zero for none)
 * this server's cluster id, for the handshakes it sends and the ones it
 * checks from now on; connections already made are kept. */
void raft_uv_transport_set_cluster_id(struct raft_uv_transport *t,
                                      const uint8_t id[RAFT_UV_CLUSTER_ID_LEN]);

/* raft_uv_transport_peer_cluster_id copies into @out the cluster id peer
 * @id sent in the handshake of its latest accepted connection (all zero
 * for none) and returns true; false while none arrived or for an unknown
 * peer. */
bool raft_uv_transport_peer_cluster_id(const struct raft_uv_transport *t,
                                       raft_id id,
                                       uint8_t out[RAFT_UV_CLUSTER_ID_LEN]);

/* raft_uv_transport_close closes every handle and drops queued frames, then
 * calls @cb(@data) from the loop once all handles are closed and @t is
 * freed (@cb may be NULL). No receive callback fires after this call, which
 * may be made from inside the receive callback; a second call is ignored
 * while @t still exists. */
void raft_uv_transport_close(struct raft_uv_transport *t,
                             void (*cb)(void *data), void *data);

#endif /* RAFT_UV_H */
