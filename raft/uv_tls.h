/* TLS 1.3 between peers (OpenSSL): the credentials of a server (uv_tls.c)
 * and one TLS session per connection over two memory BIOs
 * (uv_tls_session.c), which the transport drives from its libuv callbacks
 * (uv_tls_stream.c); no socket I/O happens here. This header needs no
 * libuv or OpenSSL types.
 *
 * Two ways to authenticate, one per credentials object:
 * - certificates: a PEM certificate chain, its key and a CA file; both ends
 *   verify the other's chain against the CA (and must present one), and
 *   the identity rule (raft_uv_tls_session_check_host) ties a certificate
 *   to the member it claims to be;
 * - a pre-shared secret: a TLS 1.3 external PSK (RFC 8446 §2.2, §4.2.11),
 *   identity "raftsql", key SHA-256 of the secret file's bytes, cipher
 *   TLS_AES_128_GCM_SHA256, key exchange psk_dhe_ke (an ephemeral
 *   (EC)DHE share as well, so recorded traffic stays secret if the PSK
 *   leaks later). Any holder of the secret can claim any server id. */

#ifndef RAFT_UV_TLS_H
#define RAFT_UV_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How a credentials object authenticates. */
enum raft_uv_tls_mode {
    RAFT_UV_TLS_CERTIFICATES = 1, /* tls_cert, tls_key, tls_ca */
    RAFT_UV_TLS_PSK = 2,          /* secret_file */
};

/* Shortest secret file accepted, bytes. */
#define RAFT_UV_TLS_SECRET_MIN 32

/* Where the credentials come from: either the three certificate files or
 * the secret file (the other fields NULL). */
struct raft_uv_tls_config {
    const char *cert_file;   /* PEM: this server's certificate, then any
                                intermediates */
    const char *key_file;    /* PEM: its private key */
    const char *ca_file;     /* PEM: the CA certificates peers' chains
                                must end at */
    const char *secret_file; /* the pre-shared secret, at least
                                RAFT_UV_TLS_SECRET_MIN bytes, mode 0600 or
                                stricter */
};

struct raft_uv_tls;         /* credentials, opaque */
struct raft_uv_tls_session; /* one connection's TLS state, opaque */
struct x509_st;             /* OpenSSL's X509 */

/* raft_uv_tls_new loads the credentials @cfg names (the paths are copied)
 * and builds the TLS 1.3 context every new session takes.
 * Writes *out only on success; @errmsg (@errmsg_len bytes) names the key,
 * the file and the reason on failure, e.g. "tls_cert: /x.pem: expired on
 * 2025-01-01T00:00:00Z", "tls_key: /k.pem: does not match tls_cert
 * /x.pem", "tls_ca: /ca.pem: no certificate in it", "tls_cert: /x.pem:
 * not signed by tls_ca /ca.pem (...)", "tls_cert: /x.pem: a CA
 * certificate (basicConstraints CA:TRUE), not this node's own",
 * "secret_file: /s: 12
 * bytes, want at least 32, e.g. `openssl rand -hex 32 > /s`",
 * "secret_file: /s: mode 0644, want 0600 or stricter".
 * Errors: RAFT_INVALID (both or neither kind given, a file unreadable,
 * malformed, expired or not yet valid, a key that does not match, a
 * certificate that is a CA's or does not verify against the CA file, a
 * secret too short or too open), RAFT_NOMEM. The same checks hold at
 * raft_uv_tls_reload. Any thread. */
int raft_uv_tls_new(const struct raft_uv_tls_config *cfg,
                    struct raft_uv_tls **out, char *errmsg, size_t errmsg_len);

/* raft_uv_tls_free frees @tls (NULL is ignored). Sessions made from it keep
 * their context alive until they are freed. Call it once no thread uses
 * @tls any more (after the driver that borrows it stopped). */
void raft_uv_tls_free(struct raft_uv_tls *tls);

/* raft_uv_tls_mode returns enum raft_uv_tls_mode of @tls. Any thread. */
int raft_uv_tls_mode(const struct raft_uv_tls *tls);

/* raft_uv_tls_names_host says whether the certificate in use names
 * @host (the identity rule of raft_uv_tls_session_check_host): peers
 * refuse this node's certificate otherwise. True in PSK mode. When false,
 * writes what the certificate holds into @names (@names_len bytes). Any
 * thread. */
bool raft_uv_tls_names_host(struct raft_uv_tls *tls, const char *host,
                            char *names, size_t names_len);

/* raft_uv_tls_expires writes the notAfter of the certificate in use, ISO
 * 8601 UTC ("2027-03-01T12:00:00Z"), into @buf (@len bytes; "" in PSK
 * mode). Any thread. */
void raft_uv_tls_expires(struct raft_uv_tls *tls, char *buf, size_t len);

/* raft_uv_tls_reload re-reads the certificate, key and CA files and, when
 * they load and check as at start, makes the new context the one new
 * sessions take (existing sessions keep theirs). Writes what was loaded
 * into @msg (@msg_len bytes), e.g. "loaded tls_cert /x.pem (expires
 * 2027-03-01T12:00:00Z), tls_key /k.pem, tls_ca /ca.pem", or why not.
 * A failure keeps the context in use.
 * Errors: RAFT_INVALID (as raft_uv_tls_new, naming the file and OpenSSL's
 * reason; or PSK mode: the secret is not reloaded), RAFT_NOMEM. Any
 * thread (raft_tls_reload() on a caller's, the change check on the
 * loop's). */
int raft_uv_tls_reload(struct raft_uv_tls *tls, char *msg, size_t msg_len);

/* raft_uv_tls_check stats the certificate files (nothing else) and
 * reloads them as raft_uv_tls_reload does when the inode, mtime or size
 * of one changed since the last load or check. Returns 0 with @msg ""
 * when nothing changed, else raft_uv_tls_reload's result and @msg; a
 * failure is reported once per change of the files (the next check sees
 * no change). Nothing in PSK mode. Any thread (the transport calls it
 * every RAFT_UV_TLS_CHECK_MS on its loop). */
int raft_uv_tls_check(struct raft_uv_tls *tls, char *msg, size_t msg_len);

/* Period of the transport's raft_uv_tls_check, ms. */
#define RAFT_UV_TLS_CHECK_MS 5000

/* raft_uv_tls_context returns the OpenSSL SSL_CTX new sessions take now,
 * with a reference the caller drops with SSL_CTX_free. Any thread. */
struct ssl_ctx_st *raft_uv_tls_context(struct raft_uv_tls *tls);

/* ---- Sessions (the loop thread of the connection that owns one) ------ */

/* raft_uv_tls_session_new makes a session with the context @tls holds now:
 * a TLS client for an outgoing connection (@client), else a server.
 * Errors: RAFT_NOMEM. */
int raft_uv_tls_session_new(struct raft_uv_tls *tls, bool client,
                            struct raft_uv_tls_session **out);

/* raft_uv_tls_session_free frees @s (NULL is ignored). */
void raft_uv_tls_session_free(struct raft_uv_tls_session *s);

/* raft_uv_tls_session_feed hands @s the @n ciphertext bytes at @p read
 * from the socket (copied). Errors: RAFT_NOMEM. */
int raft_uv_tls_session_feed(struct raft_uv_tls_session *s, const void *p,
                             size_t n);

/* raft_uv_tls_session_handshake advances the TLS handshake with what was
 * fed (a client's first call writes its ClientHello) and sets *@out_done
 * once it completed (then at once on later calls). Errors: RAFT_PROTO
 * (the handshake failed: a verify error, an alert from the peer, no
 * shared PSK...; raft_uv_tls_session_error says which), RAFT_NOMEM. */
int raft_uv_tls_session_handshake(struct raft_uv_tls_session *s,
                                  bool *out_done);

/* raft_uv_tls_session_read decrypts into @buf (@cap bytes) what was fed,
 * once the handshake is done, and sets *@out_n (0: nothing complete yet).
 * Errors: RAFT_PROTO (a record that does not decrypt or authenticate, an
 * alert: the connection must close; raft_uv_tls_session_error says why),
 * RAFT_NOCONN (the peer closed the session with close_notify). */
int raft_uv_tls_session_read(struct raft_uv_tls_session *s, uint8_t *buf,
                             size_t cap, size_t *out_n);

/* raft_uv_tls_session_write encrypts the @n bytes at @p (whole records of
 * up to 16 KiB; once the handshake is done). Errors: RAFT_PROTO (the
 * session failed), RAFT_NOMEM. */
int raft_uv_tls_session_write(struct raft_uv_tls_session *s, const void *p,
                              size_t n);

/* raft_uv_tls_session_pending returns how many ciphertext bytes wait to be
 * written to the socket. */
size_t raft_uv_tls_session_pending(struct raft_uv_tls_session *s);

/* raft_uv_tls_session_take moves the first @n (<= pending) ciphertext
 * bytes into @buf. */
void raft_uv_tls_session_take(struct raft_uv_tls_session *s, uint8_t *buf,
                              size_t n);

/* raft_uv_tls_session_check_host applies the identity rule to the peer of
 * the established session @s: the certificate it presented must name
 * @host (the host of the member's address as raft/address.h parses it,
 * without brackets: an IP entry of its subjectAltName for an IPv4 or IPv6
 * literal, X509_check_ip_asc, an IPv6 zone ignored; a DNS entry for a
 * hostname, X509_check_host, no partial wildcards).
 * Returns true when it does, and in PSK mode when the handshake used the
 * PSK (@host is not read: the PSK names no member); false otherwise,
 * writing the names the certificate holds (or "no pre-shared key used")
 * into @names (@names_len bytes), e.g. "IP:127.0.0.2, DNS:node2". */
bool raft_uv_tls_session_check_host(struct raft_uv_tls_session *s,
                                    const char *host, char *names,
                                    size_t names_len);

/* raft_uv_tls_session_match_host applies the identity rule above to
 * certificate @cert (borrowed): true when it names @host; false otherwise,
 * writing the names it holds into @names (@names_len bytes). Any thread. */
bool raft_uv_tls_session_match_host(struct x509_st *cert, const char *host,
                                    char *names, size_t names_len);

/* raft_uv_tls_session_error returns why the last failing call failed
 * ("certificate verify failed: unable to get local issuer certificate",
 * "tlsv1 alert unknown ca", "decryption failed or bad record mac"...), ""
 * before any failure. Valid until the next call on @s. */
const char *raft_uv_tls_session_error(const struct raft_uv_tls_session *s);

/* raft_uv_tls_session_describe writes what was negotiated into @buf (@len
 * bytes): "TLSv1.3 TLS_AES_256_GCM_SHA384, certificate" or "... psk". */
void raft_uv_tls_session_describe(struct raft_uv_tls_session *s, char *buf,
                                  size_t len);

#endif /* RAFT_UV_TLS_H */
