/* Network addresses "host:port" of servers: one parser shared by the
 * configuration (ext/runtime/config.c, raft_add) and the transport
 * (raft/uv_*.c). Pure: no I/O, no name resolution.
 *
 * Syntax (what raft_address_parse accepts):
 *
 *     address  := host ":" port
 *     host     := ipv4 | "[" ipv6 [ "%" zone ] "]" | hostname
 *     ipv4     := four decimal octets 0-255, no leading zeros ("10.0.0.1")
 *     ipv6     := an IPv6 literal as inet_pton(AF_INET6) reads it
 *     zone     := 1-15 letters, digits, '.', '_' or '-' (an interface)
 *     hostname := RFC 1123 labels of letters, digits and hyphens, 1-63
 *                 characters each, no hyphen first or last, joined by
 *                 dots, at most 253 characters, and not all digits in its
 *                 last label (that is a mistyped IPv4 address)
 *     port     := decimal 1-65535
 *
 * The whole text is at most RAFT_ADDRESS_TEXT_MAX bytes: the handshake of
 * the transport carries a server's address in that many (uv.h). A host is
 * kept as written (no case folding, no IPv6 normalisation);
 * raft_address_equal compares what the addresses mean. */

#ifndef RAFT_ADDRESS_H
#define RAFT_ADDRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest address text "host:port", bytes (the handshake's limit,
 * RAFT__UV_ADDRESS_MAX in uv_internal.h, may not be smaller). */
#define RAFT_ADDRESS_TEXT_MAX 255

/* Longest hostname, characters (RFC 1035 §2.3.4 without the root dot). */
#define RAFT_ADDRESS_NAME_MAX 253

/* Longest IPv6 zone (an interface name, IFNAMSIZ - 1). */
#define RAFT_ADDRESS_ZONE_MAX 15

/* What the host of an address is. */
enum raft_address_kind {
    RAFT_ADDRESS_IPV4 = 1, /* a dotted-quad IPv4 literal */
    RAFT_ADDRESS_IPV6 = 2, /* an IPv6 literal, written in brackets */
    RAFT_ADDRESS_NAME = 3, /* a hostname, resolved when dialled */
};

/* A parsed address. */
struct raft_address {
    int kind;                             /* enum raft_address_kind */
    char host[RAFT_ADDRESS_TEXT_MAX + 1]; /* as written, without brackets
                                             (an IPv6 zone included:
                                             "fe80::1%eth0") */
    uint16_t port;                        /* 1-65535 */
};

/* raft_address_parse reads @text ("host:port", grammar above) into @out.
 * Writes @out only on success.
 * Errors: RAFT_INVALID with @errmsg (@errmsg_len bytes, may be NULL)
 * saying what is wrong, e.g. "port 70000 out of range (1-65535)", "IPv6
 * literal needs brackets, e.g. [::1]:7001", "hostname 'a_b' has '_': only
 * letters, digits, hyphens and dots". Any thread. */
int raft_address_parse(const char *text, struct raft_address *out, char *errmsg,
                       size_t errmsg_len);

/* raft_address_parse_host makes @out the address of host @host (an IPv4
 * literal, an IPv6 literal without brackets, or a hostname) and port
 * @port, checked as raft_address_parse checks them (port 0 refused, the
 * formatted text at most RAFT_ADDRESS_TEXT_MAX bytes). Writes @out only on
 * success. Errors: RAFT_INVALID with @errmsg. Any thread. */
int raft_address_parse_host(const char *host, unsigned port,
                            struct raft_address *out, char *errmsg,
                            size_t errmsg_len);

/* raft_address_format writes @a as text into @out (@len bytes, always
 * NUL-terminated when @len > 0): "host:port", the host of an IPv6 address
 * in brackets; what raft_address_parse reads back to an equal address.
 * Returns the length of the whole text (as snprintf: a result >= @len
 * means it was cut); RAFT_ADDRESS_TEXT_MAX + 1 bytes always suffice for a
 * parsed address. Any thread. */
size_t raft_address_format(const struct raft_address *a, char *out, size_t len);

/* raft_address_equal says whether @a and @b name the same endpoint as
 * written: the same port and the same IP (compared as numbers, the IPv6
 * zone as text) or the same hostname (ignoring case). A hostname never
 * equals an IP literal (nothing is resolved). Any thread. */
bool raft_address_equal(const struct raft_address *a,
                        const struct raft_address *b);

/* raft_address_loopback says whether @a stays on this machine: an IPv4
 * address in 127.0.0.0/8, ::1 (or ::ffff:127.x.y.z), or the hostname
 * "localhost" (any case). Any other hostname is not. Any thread. */
bool raft_address_loopback(const struct raft_address *a);

/* raft_address_wildcard says whether @a is a wildcard to listen on every
 * interface: 0.0.0.0 or ::. Any thread. */
bool raft_address_wildcard(const struct raft_address *a);

#endif /* RAFT_ADDRESS_H */
