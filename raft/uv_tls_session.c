/* One connection's TLS session (uv_tls.h) over two memory BIOs: ciphertext
 * read from the socket is fed into one, OpenSSL writes the ciphertext to
 * send into the other, and the transport moves the bytes with libuv. No
 * call here blocks or touches a socket.
 *
 * Happy path: a client's first raft_uv_tls_session_handshake writes its
 * ClientHello; each batch of bytes fed advances the handshake until it is
 * done, then raft_uv_tls_session_read yields plaintext and
 * raft_uv_tls_session_write turns plaintext into records; after every
 * call the caller sends what raft_uv_tls_session_pending says is there.
 * Failure modes: a failed handshake (verify error, alert, no shared PSK)
 * or a record that does not authenticate returns RAFT_PROTO with the
 * reason in raft_uv_tls_session_error; the session is then dead and the
 * caller closes its connection. */

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "address.h"
#include "err.h"
#include "uv_tls.h"

struct raft_uv_tls_session {
    SSL *ssl;      /* owns both BIOs */
    BIO *rbio;     /* ciphertext fed, for OpenSSL to read */
    BIO *wbio;     /* ciphertext OpenSSL wrote, to send */
    bool psk;      /* the credentials are a pre-shared secret */
    bool done;     /* the handshake completed */
    char err[256]; /* why the last failing call failed */
};

int raft_uv_tls_session_new(struct raft_uv_tls *tls, bool client,
                            struct raft_uv_tls_session **out)
{
    struct raft_uv_tls_session *s = calloc(1, sizeof *s);
    SSL_CTX *ctx = raft_uv_tls_context(tls);

    if (s == NULL) {
        goto err;
    }
    s->ssl = SSL_new(ctx);
    s->rbio = BIO_new(BIO_s_mem());
    s->wbio = BIO_new(BIO_s_mem());
    if (s->ssl == NULL || s->rbio == NULL || s->wbio == NULL) {
        BIO_free(s->rbio);
        BIO_free(s->wbio);
        SSL_free(s->ssl);
        goto err;
    }
    /* An empty BIO means "more later", never end of file. */
    BIO_set_mem_eof_return(s->rbio, -1);
    BIO_set_mem_eof_return(s->wbio, -1);
    SSL_set_bio(s->ssl, s->rbio, s->wbio);
    if (client) {
        SSL_set_connect_state(s->ssl);
    } else {
        SSL_set_accept_state(s->ssl);
    }
    s->psk = raft_uv_tls_mode(tls) == RAFT_UV_TLS_PSK;
    SSL_CTX_free(ctx); /* the session holds its own reference */
    *out = s;
    return 0;

err:
    ERR_clear_error();
    SSL_CTX_free(ctx);
    free(s);
    return RAFT_NOMEM;
}

void raft_uv_tls_session_free(struct raft_uv_tls_session *s)
{
    if (s == NULL) {
        return;
    }
    SSL_free(s->ssl);
    free(s);
}

/* fail records why the call that got SSL error @code failed, and returns
 * RAFT_PROTO. A failed verification is said with its verify error: it
 * says more than "certificate verify failed"; the alert a server sends a
 * client whose pre-shared key is not its own (OpenSSL: illegal parameter,
 * after "binder does not verify") says what it means too. */
static int fail(struct raft_uv_tls_session *s, int code)
{
    long v = SSL_get_verify_result(s->ssl);
    unsigned long e = ERR_peek_last_error();
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;

    if (v != X509_V_OK &&
        ERR_GET_REASON(e) == SSL_R_CERTIFICATE_VERIFY_FAILED) {
        snprintf(s->err, sizeof s->err, "certificate verify failed: %s",
                 X509_verify_cert_error_string(v));
    } else if (s->psk && !s->done && r != NULL &&
               (ERR_GET_REASON(e) == SSL_R_SSLV3_ALERT_ILLEGAL_PARAMETER ||
                ERR_GET_REASON(e) == SSL_R_TLSV1_ALERT_DECRYPT_ERROR)) {
        snprintf(s->err, sizeof s->err,
                 "%s: the server did not take our pre-shared key (another "
                 "secret_file?)",
                 r);
    } else if (r != NULL) {
        snprintf(s->err, sizeof s->err, "%s", r);
    } else if (e != 0) {
        ERR_error_string_n(e, s->err, sizeof s->err);
    } else {
        snprintf(s->err, sizeof s->err, "TLS error %d", code);
    }
    ERR_clear_error();
    return RAFT_PROTO;
}

int raft_uv_tls_session_feed(struct raft_uv_tls_session *s, const void *p,
                             size_t n)
{
    size_t written = 0;

    if (n == 0) {
        return 0;
    }
    if (BIO_write_ex(s->rbio, p, n, &written) != 1 || written != n) {
        ERR_clear_error();
        snprintf(s->err, sizeof s->err, "out of memory");
        return RAFT_NOMEM;
    }
    return 0;
}

/* want says whether SSL error @code only means "more bytes first". */
static bool want(int code)
{
    return code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE;
}

int raft_uv_tls_session_handshake(struct raft_uv_tls_session *s, bool *out_done)
{
    int rv;

    if (!s->done) {
        ERR_clear_error();
        rv = SSL_do_handshake(s->ssl);
        if (rv == 1) {
            s->done = true;
        } else if (!want(SSL_get_error(s->ssl, rv))) {
            return fail(s, SSL_get_error(s->ssl, rv));
        }
    }
    *out_done = s->done;
    return 0;
}

int raft_uv_tls_session_read(struct raft_uv_tls_session *s, uint8_t *buf,
                             size_t cap, size_t *out_n)
{
    size_t n = 0;
    int code;

    ERR_clear_error();
    if (SSL_read_ex(s->ssl, buf, cap, &n) == 1) {
        *out_n = n;
        return 0;
    }
    code = SSL_get_error(s->ssl, 0);
    if (want(code)) {
        *out_n = 0;
        return 0;
    }
    if (code == SSL_ERROR_ZERO_RETURN) {
        snprintf(s->err, sizeof s->err, "the peer closed the TLS session");
        return RAFT_NOCONN;
    }
    return fail(s, code);
}

int raft_uv_tls_session_write(struct raft_uv_tls_session *s, const void *p,
                              size_t n)
{
    size_t written = 0;

    if (n == 0) {
        return 0;
    }
    ERR_clear_error();
    /* A memory BIO takes everything: SSL_write_ex never stops half way. */
    if (SSL_write_ex(s->ssl, p, n, &written) != 1 || written != n) {
        return fail(s, SSL_get_error(s->ssl, 0));
    }
    return 0;
}

size_t raft_uv_tls_session_pending(struct raft_uv_tls_session *s)
{
    return BIO_ctrl_pending(s->wbio);
}

void raft_uv_tls_session_take(struct raft_uv_tls_session *s, uint8_t *buf,
                              size_t n)
{
    size_t got = 0;

    /* Cannot fail: @n bytes are pending in a memory BIO. */
    BIO_read_ex(s->wbio, buf, n, &got);
}

/* append writes @text after what @buf (@len bytes) holds, separated by a
 * comma, printable ASCII only. */
static void append(char *buf, size_t len, const char *kind, const char *text,
                   size_t text_len)
{
    size_t at = strlen(buf);
    char clean[256];
    size_t i;

    for (i = 0; i < text_len && i < sizeof clean - 1; i++) {
        clean[i] = text[i] >= 0x20 && text[i] <= 0x7e ? text[i] : '?';
    }
    clean[i] = '\0';
    if (at < len) {
        snprintf(buf + at, len - at, "%s%s:%s", at > 0 ? ", " : "", kind,
                 clean);
    }
}

/* cert_names writes the subjectAltName entries of @cert into @buf (@len
 * bytes), or says it has none (with its subject). */
static void cert_names(X509 *cert, char *buf, size_t len)
{
    GENERAL_NAMES *names =
        X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
    char subject[160];

    buf[0] = '\0';
    for (int i = 0; names != NULL && i < sk_GENERAL_NAME_num(names); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
        char ip[INET6_ADDRSTRLEN] = "?";
        if (g->type == GEN_DNS) {
            append(buf, len, "DNS",
                   (const char *)ASN1_STRING_get0_data(g->d.dNSName),
                   (size_t)ASN1_STRING_length(g->d.dNSName));
        } else if (g->type == GEN_IPADD) {
            int n = ASN1_STRING_length(g->d.iPAddress);
            const unsigned char *a = ASN1_STRING_get0_data(g->d.iPAddress);
            if (n == 4 || n == 16) {
                inet_ntop(n == 4 ? AF_INET : AF_INET6, a, ip, sizeof ip);
            }
            append(buf, len, "IP", ip, strlen(ip));
        }
    }
    GENERAL_NAMES_free(names);
    if (buf[0] == '\0') {
        X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof subject);
        snprintf(buf, len, "no subjectAltName (subject %s)", subject);
    }
}

bool raft_uv_tls_session_match_host(struct x509_st *cert, const char *host,
                                    char *names, size_t names_len)
{
    struct raft_address a;
    bool ok;

    if (raft_address_parse_host(host, 1, &a, NULL, 0) == 0 &&
        a.kind != RAFT_ADDRESS_NAME) {
        char ip[RAFT_ADDRESS_TEXT_MAX + 1];
        /* An IP entry holds no zone ("fe80::1%eth0"). */
        snprintf(ip, sizeof ip, "%.*s", (int)strcspn(a.host, "%"), a.host);
        ok = X509_check_ip_asc(cert, ip, 0) == 1;
    } else {
        ok = X509_check_host(cert, host, strlen(host),
                             X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS |
                                 X509_CHECK_FLAG_NEVER_CHECK_SUBJECT,
                             NULL) == 1;
    }
    if (!ok) {
        cert_names(cert, names, names_len);
    }
    ERR_clear_error();
    return ok;
}

bool raft_uv_tls_session_check_host(struct raft_uv_tls_session *s,
                                    const char *host, char *names,
                                    size_t names_len)
{
    X509 *cert;

    if (s->psk) {
        /* The PSK proves the peer, if it was used (an external PSK reads
         * as a resumed session). */
        if (SSL_session_reused(s->ssl) == 1) {
            return true;
        }
        snprintf(names, names_len, "no pre-shared key used");
        return false;
    }
    cert = SSL_get0_peer_certificate(s->ssl);
    if (cert == NULL) {
        snprintf(names, names_len, "no certificate");
        return false;
    }
    return raft_uv_tls_session_match_host(cert, host, names, names_len);
}

const char *raft_uv_tls_session_error(const struct raft_uv_tls_session *s)
{
    return s->err;
}

void raft_uv_tls_session_describe(struct raft_uv_tls_session *s, char *buf,
                                  size_t len)
{
    const SSL_CIPHER *c = SSL_get_current_cipher(s->ssl);

    snprintf(buf, len, "%s %s, %s", SSL_get_version(s->ssl),
             c != NULL ? SSL_CIPHER_get_name(c) : "?",
             s->psk ? "pre-shared key" : "certificate");
}
