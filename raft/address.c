/* The address parser and its helpers (address.h): syntax checks with a
 * message naming what is wrong, formatting, comparison, loopback. */

#include "address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "err.h"

/* Longest port text accepted ("65535" plus leading zeros). */
#define RAFT__ADDRESS_PORT_DIGITS 8

/* is_digit says whether @c is an ASCII digit. */
static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* is_alnum says whether @c is an ASCII letter or digit (whatever the
 * locale of the host process). */
static bool is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c);
}

/* is_label_char says whether @c may appear in a hostname label. */
static bool is_label_char(char c)
{
    return is_alnum(c) || c == '-';
}

/* check_name checks @name (@len characters) against the hostname grammar
 * of address.h. */
static int check_name(const char *name, size_t len, char *errmsg,
                      size_t errmsg_len)
{
    size_t start = 0;
    bool digits_only = true;

    if (len > RAFT_ADDRESS_NAME_MAX) {
        raft_errmsgf(errmsg, errmsg_len,
                     "hostname of %zu characters, at most %d", len,
                     RAFT_ADDRESS_NAME_MAX);
        return RAFT_INVALID;
    }
    for (size_t i = 0; i <= len; i++) {
        size_t label_len = i - start;
        if (i < len && name[i] != '.') {
            if (!is_label_char(name[i])) {
                raft_errmsgf(errmsg, errmsg_len,
                             "hostname '%.*s' has '%c': only letters, "
                             "digits, hyphens and dots",
                             (int)len, name,
                             name[i] >= 0x20 && name[i] < 0x7f ? name[i] : '?');
                return RAFT_INVALID;
            }
            continue;
        }
        if (label_len == 0) {
            raft_errmsgf(errmsg, errmsg_len,
                         "hostname '%.*s' has an empty label", (int)len, name);
            return RAFT_INVALID;
        }
        if (label_len > 63) {
            raft_errmsgf(errmsg, errmsg_len,
                         "hostname '%.*s' has a label of %zu characters, "
                         "at most 63",
                         (int)len, name, label_len);
            return RAFT_INVALID;
        }
        if (name[start] == '-' || name[i - 1] == '-') {
            raft_errmsgf(errmsg, errmsg_len,
                         "hostname '%.*s' has a label that starts or ends "
                         "with '-'",
                         (int)len, name);
            return RAFT_INVALID;
        }
        digits_only = true;
        for (size_t k = start; k < i; k++) {
            digits_only = digits_only && is_digit(name[k]);
        }
        start = i + 1;
    }
    if (digits_only) {
        raft_errmsgf(errmsg, errmsg_len,
                     "'%.*s' is not an IPv4 address (four numbers 0-255, "
                     "no leading zeros) nor a hostname",
                     (int)len, name);
        return RAFT_INVALID;
    }
    return 0;
}

/* check_ipv6 checks @host (@len characters, brackets removed) as an IPv6
 * literal with an optional zone. */
static int check_ipv6(const char *host, size_t len, char *errmsg,
                      size_t errmsg_len)
{
    char ip[INET6_ADDRSTRLEN + 1];
    const char *pct = memchr(host, '%', len);
    size_t ip_len = pct != NULL ? (size_t)(pct - host) : len;
    struct in6_addr a;

    if (ip_len >= sizeof ip) {
        goto err_ip;
    }
    memcpy(ip, host, ip_len);
    ip[ip_len] = '\0';
    if (inet_pton(AF_INET6, ip, &a) != 1) {
        goto err_ip;
    }
    if (pct != NULL) {
        size_t zone_len = len - ip_len - 1;
        if (zone_len == 0 || zone_len > RAFT_ADDRESS_ZONE_MAX) {
            raft_errmsgf(errmsg, errmsg_len,
                         "IPv6 zone '%.*s' of %zu characters, want 1-%d",
                         (int)zone_len, pct + 1, zone_len,
                         RAFT_ADDRESS_ZONE_MAX);
            return RAFT_INVALID;
        }
        for (size_t i = 1; i <= zone_len; i++) {
            char c = pct[i];
            if (!is_alnum(c) && c != '.' && c != '_' && c != '-') {
                raft_errmsgf(errmsg, errmsg_len,
                             "IPv6 zone '%.*s' is not an interface name",
                             (int)zone_len, pct + 1);
                return RAFT_INVALID;
            }
        }
    }
    return 0;

err_ip:
    raft_errmsgf(errmsg, errmsg_len, "'[%.*s]' is not an IPv6 literal",
                 (int)len, host);
    return RAFT_INVALID;
}

/* classify_host checks the bare host @host (@len characters, no brackets)
 * and writes its kind (@ipv6: it was written in brackets). */
static int classify_host(const char *host, size_t len, bool ipv6, int *out_kind,
                         char *errmsg, size_t errmsg_len)
{
    char ip[INET_ADDRSTRLEN];
    struct in_addr a;

    if (len == 0) {
        raft_errmsgf(errmsg, errmsg_len, "empty host");
        return RAFT_INVALID;
    }
    if (ipv6) {
        *out_kind = RAFT_ADDRESS_IPV6;
        return check_ipv6(host, len, errmsg, errmsg_len);
    }
    if (memchr(host, ':', len) != NULL) {
        raft_errmsgf(errmsg, errmsg_len,
                     "IPv6 literal needs brackets, e.g. [::1]:7001");
        return RAFT_INVALID;
    }
    if (len < sizeof ip) {
        memcpy(ip, host, len);
        ip[len] = '\0';
        if (inet_pton(AF_INET, ip, &a) == 1) {
            *out_kind = RAFT_ADDRESS_IPV4;
            return 0;
        }
    }
    *out_kind = RAFT_ADDRESS_NAME;
    return check_name(host, len, errmsg, errmsg_len);
}

/* parse_port reads the port text @s (@len characters). */
static int parse_port(const char *s, size_t len, uint16_t *out, char *errmsg,
                      size_t errmsg_len)
{
    unsigned long v = 0;

    if (len == 0) {
        raft_errmsgf(errmsg, errmsg_len, "no port after ':'");
        return RAFT_INVALID;
    }
    for (size_t i = 0; i < len; i++) {
        if (!is_digit(s[i])) {
            raft_errmsgf(errmsg, errmsg_len, "port '%.*s' is not a number",
                         (int)len, s);
            return RAFT_INVALID;
        }
        if (i < RAFT__ADDRESS_PORT_DIGITS) {
            v = v * 10 + (unsigned long)(s[i] - '0');
        }
    }
    if (len > RAFT__ADDRESS_PORT_DIGITS || v < 1 || v > 65535) {
        raft_errmsgf(errmsg, errmsg_len, "port %.*s out of range (1-65535)",
                     (int)len, s);
        return RAFT_INVALID;
    }
    *out = (uint16_t)v;
    return 0;
}

/* set_address fills @out, checking the length of the text it formats to. */
static int set_address(int kind, const char *host, size_t host_len,
                       uint16_t port, struct raft_address *out, char *errmsg,
                       size_t errmsg_len)
{
    struct raft_address a;
    size_t text_len;

    if (host_len >= sizeof a.host) {
        goto err_long;
    }
    memset(&a, 0, sizeof a);
    a.kind = kind;
    memcpy(a.host, host, host_len);
    a.port = port;
    text_len = raft_address_format(&a, NULL, 0);
    if (text_len > RAFT_ADDRESS_TEXT_MAX) {
        goto err_long;
    }
    *out = a;
    return 0;

err_long:
    raft_errmsgf(errmsg, errmsg_len,
                 "address of more than %d bytes (the most a handshake "
                 "carries)",
                 RAFT_ADDRESS_TEXT_MAX);
    return RAFT_INVALID;
}

int raft_address_parse(const char *text, struct raft_address *out, char *errmsg,
                       size_t errmsg_len)
{
    size_t len = strlen(text);
    const char *host = text;
    size_t host_len;
    const char *port;
    bool bracketed = text[0] == '[';
    uint16_t port_num;
    int kind;
    int rc;

    if (len == 0) {
        raft_errmsgf(errmsg, errmsg_len, "empty address (want host:port)");
        return RAFT_INVALID;
    }
    if (len > RAFT_ADDRESS_TEXT_MAX) {
        raft_errmsgf(errmsg, errmsg_len,
                     "address of %zu bytes, at most %d (the most a "
                     "handshake carries)",
                     len, RAFT_ADDRESS_TEXT_MAX);
        return RAFT_INVALID;
    }
    if (bracketed) {
        const char *close = strchr(text, ']');
        if (close == NULL) {
            raft_errmsgf(errmsg, errmsg_len,
                         "IPv6 literal '%s' lacks its closing ']'", text);
            return RAFT_INVALID;
        }
        host = text + 1;
        host_len = (size_t)(close - host);
        if (close[1] != ':') {
            raft_errmsgf(errmsg, errmsg_len,
                         "'%s' has no ':port' after the IPv6 literal, e.g. "
                         "[::1]:7001",
                         text);
            return RAFT_INVALID;
        }
        port = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (colon == NULL) {
            raft_errmsgf(errmsg, errmsg_len,
                         "'%s' has no port (want host:port)", text);
            return RAFT_INVALID;
        }
        host_len = (size_t)(colon - text);
        port = colon + 1;
    }
    rc = classify_host(host, host_len, bracketed, &kind, errmsg, errmsg_len);
    if (rc == 0) {
        rc = parse_port(port, strlen(port), &port_num, errmsg, errmsg_len);
    }
    if (rc != 0) {
        return rc;
    }
    return set_address(kind, host, host_len, port_num, out, errmsg, errmsg_len);
}

int raft_address_parse_host(const char *host, unsigned port,
                            struct raft_address *out, char *errmsg,
                            size_t errmsg_len)
{
    size_t len = strlen(host);
    bool ipv6 = memchr(host, ':', len) != NULL;
    int kind;
    int rc;

    if (port < 1 || port > 65535) {
        raft_errmsgf(errmsg, errmsg_len, "port %u out of range (1-65535)",
                     port);
        return RAFT_INVALID;
    }
    rc = classify_host(host, len, ipv6, &kind, errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    return set_address(kind, host, len, (uint16_t)port, out, errmsg,
                       errmsg_len);
}

size_t raft_address_format(const struct raft_address *a, char *out, size_t len)
{
    const char *fmt = a->kind == RAFT_ADDRESS_IPV6 ? "[%s]:%u" : "%s:%u";
    int n = snprintf(out, len, fmt, a->host, (unsigned)a->port);

    return n > 0 ? (size_t)n : 0;
}

/* ip_of reads the IP of @a (a literal) into @out (16 bytes: an IPv4
 * address as ::ffff:a.b.c.d) and points *@out_zone at its zone ("" for
 * none). */
static void ip_of(const struct raft_address *a, uint8_t out[16],
                  const char **out_zone)
{
    char ip[sizeof a->host];
    char *pct;

    memset(out, 0, 16);
    snprintf(ip, sizeof ip, "%s", a->host);
    pct = strchr(ip, '%');
    *out_zone = "";
    if (pct != NULL) {
        *out_zone = a->host + (pct - ip) + 1;
        *pct = '\0';
    }
    if (a->kind == RAFT_ADDRESS_IPV4) {
        out[10] = 0xff;
        out[11] = 0xff;
        inet_pton(AF_INET, ip, out + 12);
    } else {
        inet_pton(AF_INET6, ip, out);
    }
}

bool raft_address_equal(const struct raft_address *a,
                        const struct raft_address *b)
{
    uint8_t ia[16], ib[16];
    const char *za, *zb;

    if (a->port != b->port || a->kind != b->kind) {
        return false;
    }
    if (a->kind == RAFT_ADDRESS_NAME) {
        return strcasecmp(a->host, b->host) == 0;
    }
    ip_of(a, ia, &za);
    ip_of(b, ib, &zb);
    return memcmp(ia, ib, sizeof ia) == 0 && strcmp(za, zb) == 0;
}

bool raft_address_loopback(const struct raft_address *a)
{
    static const uint8_t one[16] = {[15] = 1};
    static const uint8_t mapped[12] = {[10] = 0xff, [11] = 0xff};
    uint8_t ip[16];
    const char *zone;

    if (a->kind == RAFT_ADDRESS_NAME) {
        return strcasecmp(a->host, "localhost") == 0;
    }
    ip_of(a, ip, &zone);
    return memcmp(ip, one, sizeof one) == 0 ||
           (memcmp(ip, mapped, sizeof mapped) == 0 && ip[12] == 127);
}

bool raft_address_wildcard(const struct raft_address *a)
{
    static const uint8_t zero[16];
    uint8_t ip[16];
    const char *zone;

    if (a->kind == RAFT_ADDRESS_NAME) {
        return false;
    }
    ip_of(a, ip, &zone);
    if (a->kind == RAFT_ADDRESS_IPV4) {
        return memcmp(ip + 12, zero, 4) == 0;
    }
    return memcmp(ip, zero, sizeof zero) == 0;
}
