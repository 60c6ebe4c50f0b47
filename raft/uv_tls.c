/* A server's TLS credentials (uv_tls.h): the certificate files or the
 * pre-shared secret, loaded and checked into the TLS 1.3 context that new
 * sessions take, and reloaded when the files change.
 *
 * Happy path: raft_uv_tls_new reads the files, checks them (the
 * certificate's validity dates, that the key is the certificate's, that
 * the CA file holds certificates, that the certificate is no CA's and
 * verifies against it; the secret's size and mode) and builds
 * the context. The transport calls raft_uv_tls_check every
 * RAFT_UV_TLS_CHECK_MS on its loop: a stat of each certificate file; when
 * one changed, raft_uv_tls_reload builds a new context and swaps it in
 * under the mutex. Sessions hold a reference on the context they were
 * made with (SSL_CTX is reference counted), so existing connections keep
 * theirs.
 * Failure modes: a bad file at start is an error naming the key, the
 * file and the reason; a bad file at reload leaves the context in use,
 * and the change check reports it once per change of the files. */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "err.h"
#include "uv_tls.h"

/* The identity of the external PSK (RFC 8446 §4.2.11). */
#define RAFT__UV_TLS_PSK_IDENTITY "raftsql"

/* The only cipher suite in PSK mode (its hash is the PSK's, SHA-256). */
#define RAFT__UV_TLS_PSK_CIPHER "TLS_AES_128_GCM_SHA256"

/* Largest secret file read, bytes. */
#define RAFT__UV_TLS_SECRET_MAX 65536

/* What a stat of one file saw. */
struct stamp {
    bool ok;               /* the stat succeeded */
    dev_t dev;             /* device */
    ino_t ino;             /* inode (a file renamed over it changes it) */
    off_t size;            /* size, bytes */
    struct timespec mtime; /* modification time */
};

struct raft_uv_tls {
    int mode;               /* enum raft_uv_tls_mode */
    char *files[3];         /* cert, key, CA (certificates), or the
                                 secret at [0] (PSK) */
    uint8_t psk[32];        /* SHA-256 of the secret (PSK) */
    pthread_mutex_t mu;     /* guards the fields below */
    SSL_CTX *ctx;           /* the context new sessions take */
    char expires[32];       /* notAfter of the certificate in @ctx */
    struct stamp stamps[3]; /* of @files at the last load or check */
};

/* The config keys of the three certificate files, in @files order. */
static const char *const cert_keys[3] = {"tls_cert", "tls_key", "tls_ca"};

/* ossl_reason writes OpenSSL's reason for the last error of this thread
 * into @buf (@len bytes) and clears the thread's error queue. */
static void ossl_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;

    if (r != NULL) {
        snprintf(buf, len, "%s", r);
    } else if (e != 0) {
        ERR_error_string_n(e, buf, len);
    } else {
        snprintf(buf, len, "no reason given");
    }
    ERR_clear_error();
}

/* format_time writes @t as ISO 8601 UTC into @buf (@len bytes). */
static void format_time(const ASN1_TIME *t, char *buf, size_t len)
{
    struct tm tm;

    if (t == NULL || ASN1_TIME_to_tm(t, &tm) != 1 ||
        strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
        snprintf(buf, len, "?");
    }
}

static void stamp_take(const char *path, struct stamp *out)
{
    struct stat st;

    memset(out, 0, sizeof *out);
    if (stat(path, &st) == 0) {
        out->ok = true;
        out->dev = st.st_dev;
        out->ino = st.st_ino;
        out->size = st.st_size;
        out->mtime = st.st_mtim;
    }
}

static bool stamp_equal(const struct stamp *a, const struct stamp *b)
{
    return a->ok == b->ok && a->dev == b->dev && a->ino == b->ino &&
           a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* readable checks that @path, the file of config key @key, opens. */
static int readable(const char *key, const char *path, char *errmsg,
                    size_t errmsg_len)
{
    FILE *f = fopen(path, "r");

    if (f == NULL) {
        raft_errmsgf(errmsg, errmsg_len, "%s: %s: %s", key, path,
                     strerror(errno));
        return RAFT_INVALID;
    }
    fclose(f);
    return 0;
}

/* ctx_base makes a TLS 1.3-only context without session tickets or
 * resumption (every connection does a full handshake). */
static SSL_CTX *ctx_base(void)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_method());

    if (ctx == NULL) {
        return NULL;
    }
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1 ||
        SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) != 1 ||
        SSL_CTX_set_num_tickets(ctx, 0) != 1) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    return ctx;
}

/* check_validity refuses the certificate @x (of file @path) outside its
 * validity dates, and writes its notAfter into @expires (32 bytes). */
static int check_validity(X509 *x, const char *path, char *expires,
                          char *errmsg, size_t errmsg_len)
{
    char when[32];

    format_time(X509_get0_notAfter(x), expires, 32);
    if (X509_cmp_current_time(X509_get0_notBefore(x)) >= 0) {
        format_time(X509_get0_notBefore(x), when, sizeof when);
        raft_errmsgf(errmsg, errmsg_len,
                     "tls_cert: %s: not valid before %s (check the clock "
                     "or the certificate)",
                     path, when);
        return RAFT_INVALID;
    }
    if (X509_cmp_current_time(X509_get0_notAfter(x)) <= 0) {
        raft_errmsgf(errmsg, errmsg_len,
                     "tls_cert: %s: expired on %s: renew it (then "
                     "raft_tls_reload() or wait %d s on a running node)",
                     path, expires, RAFT_UV_TLS_CHECK_MS / 1000);
        return RAFT_INVALID;
    }
    return 0;
}

/* load_key reads the private key of @path into @ctx and checks it is the
 * certificate's, which is already in @ctx (of file @cert). */
static int load_key(SSL_CTX *ctx, const char *path, const char *cert,
                    char *errmsg, size_t errmsg_len)
{
    char why[160];
    BIO *b = BIO_new_file(path, "r");
    EVP_PKEY *pkey =
        b != NULL ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
    int rc = 0;

    BIO_free(b);
    if (pkey == NULL) {
        ossl_reason(why, sizeof why);
        raft_errmsgf(errmsg, errmsg_len,
                     "tls_key: %s: no PEM private key read (%s)", path, why);
        return RAFT_INVALID;
    }
    if (SSL_CTX_use_PrivateKey(ctx, pkey) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        ossl_reason(why, sizeof why);
        raft_errmsgf(errmsg, errmsg_len,
                     "tls_key: %s: does not match tls_cert %s (%s)", path, cert,
                     why);
        rc = RAFT_INVALID;
    }
    EVP_PKEY_free(pkey);
    return rc;
}

/* check_own refuses the certificate in @ctx (of file @cert) when it is a
 * CA's (basicConstraints CA:TRUE) or does not verify against the CA file
 * @ca loaded into @ctx: peers that trust that CA would refuse it. */
static int check_own(SSL_CTX *ctx, const char *cert, const char *ca,
                     char *errmsg, size_t errmsg_len)
{
    X509 *x = SSL_CTX_get0_certificate(ctx);
    STACK_OF(X509) *chain = NULL;
    X509_STORE_CTX *vc;
    int ok, err;

    if ((X509_get_extension_flags(x) & EXFLAG_CA) != 0) {
        raft_errmsgf(errmsg, errmsg_len,
                     "tls_cert: %s: a CA certificate (basicConstraints "
                     "CA:TRUE), not this node's own: give the node's "
                     "certificate, signed by tls_ca %s",
                     cert, ca);
        return RAFT_INVALID;
    }
    SSL_CTX_get0_chain_certs(ctx, &chain);
    vc = X509_STORE_CTX_new();
    if (vc == NULL ||
        X509_STORE_CTX_init(vc, SSL_CTX_get_cert_store(ctx), x, chain) != 1) {
        X509_STORE_CTX_free(vc);
        ERR_clear_error();
        raft_errmsgf(errmsg, errmsg_len, "tls: out of memory");
        return RAFT_NOMEM;
    }
    ok = X509_verify_cert(vc);
    err = X509_STORE_CTX_get_error(vc);
    X509_STORE_CTX_free(vc);
    ERR_clear_error();
    if (ok != 1) {
        raft_errmsgf(errmsg, errmsg_len,
                     "tls_cert: %s: not signed by tls_ca %s (%s): peers "
                     "that trust that CA refuse it",
                     cert, ca, X509_verify_cert_error_string(err));
        return RAFT_INVALID;
    }
    return 0;
}

/* build_certificates makes the context of the certificate files @files
 * (cert, key, CA), writing the certificate's notAfter into @expires (32
 * bytes). */
static int build_certificates(char *const files[3], SSL_CTX **out,
                              char *expires, char *errmsg, size_t errmsg_len)
{
    char why[160];
    SSL_CTX *ctx;
    int rc;

    for (unsigned i = 0; i < 3; i++) {
        rc = readable(cert_keys[i], files[i], errmsg, errmsg_len);
        if (rc != 0) {
            return rc;
        }
    }
    ctx = ctx_base();
    if (ctx == NULL) {
        ERR_clear_error();
        raft_errmsgf(errmsg, errmsg_len, "tls: cannot make a TLS context");
        return RAFT_NOMEM;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, files[0]) != 1) {
        ossl_reason(why, sizeof why);
        raft_errmsgf(errmsg, errmsg_len,
                     "tls_cert: %s: no PEM certificate read (%s)", files[0],
                     why);
        rc = RAFT_INVALID;
        goto err;
    }
    rc = check_validity(SSL_CTX_get0_certificate(ctx), files[0], expires,
                        errmsg, errmsg_len);
    if (rc == 0) {
        rc = load_key(ctx, files[1], files[0], errmsg, errmsg_len);
    }
    if (rc != 0) {
        goto err;
    }
    if (SSL_CTX_load_verify_file(ctx, files[2]) != 1) {
        ossl_reason(why, sizeof why);
        raft_errmsgf(errmsg, errmsg_len,
                     "tls_ca: %s: no CA certificate read (%s)", files[2], why);
        rc = RAFT_INVALID;
        goto err;
    }
    rc = check_own(ctx, files[0], files[2], errmsg, errmsg_len);
    if (rc != 0) {
        goto err;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                       NULL);
    *out = ctx;
    return 0;

err:
    SSL_CTX_free(ctx);
    return rc;
}

/* psk_session makes the session of the external PSK of @ssl's context. */
static SSL_SESSION *psk_session(SSL *ssl)
{
    static const unsigned char suite[2] = {0x13, 0x01}; /* AES-128-GCM */
    const struct raft_uv_tls *tls = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    const SSL_CIPHER *cipher = SSL_CIPHER_find(ssl, suite);
    SSL_SESSION *sess = cipher != NULL ? SSL_SESSION_new() : NULL;

    if (sess == NULL ||
        SSL_SESSION_set1_master_key(sess, tls->psk, sizeof tls->psk) != 1 ||
        SSL_SESSION_set_cipher(sess, cipher) != 1 ||
        SSL_SESSION_set_protocol_version(sess, TLS1_3_VERSION) != 1) {
        SSL_SESSION_free(sess);
        return NULL;
    }
    return sess;
}

/* psk_use is the client's callback: it offers the PSK (RFC 8446 §4.2.11),
 * unless a HelloRetryRequest chose a hash that is not the PSK's. */
static int psk_use(SSL *ssl, const EVP_MD *md, const unsigned char **id,
                   size_t *id_len, SSL_SESSION **sess)
{
    if (md != NULL && EVP_MD_get_type(md) != NID_sha256) {
        *sess = NULL;
        return 1;
    }
    *sess = psk_session(ssl);
    if (*sess == NULL) {
        return 0;
    }
    *id = (const unsigned char *)RAFT__UV_TLS_PSK_IDENTITY;
    *id_len = strlen(RAFT__UV_TLS_PSK_IDENTITY);
    return 1;
}

/* psk_find is the server's callback: the PSK for our identity, none for
 * another (the handshake then fails: the server has no certificate). */
static int psk_find(SSL *ssl, const unsigned char *id, size_t id_len,
                    SSL_SESSION **sess)
{
    if (id_len != strlen(RAFT__UV_TLS_PSK_IDENTITY) ||
        memcmp(id, RAFT__UV_TLS_PSK_IDENTITY, id_len) != 0) {
        *sess = NULL;
        return 1;
    }
    *sess = psk_session(ssl);
    return *sess != NULL;
}

/* read_secret reads the secret file @path into @key: SHA-256 of its
 * bytes, refusing a file under RAFT_UV_TLS_SECRET_MIN bytes or one that
 * others may read. */
static int read_secret(const char *path, uint8_t key[32], char *errmsg,
                       size_t errmsg_len)
{
    uint8_t *buf = NULL;
    struct stat st;
    size_t got = 0;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = RAFT_INVALID;

    if (fd < 0 || fstat(fd, &st) != 0) {
        raft_errmsgf(errmsg, errmsg_len, "secret_file: %s: %s", path,
                     strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        raft_errmsgf(errmsg, errmsg_len, "secret_file: %s: not a file", path);
        goto out;
    }
    if ((st.st_mode & 0177) != 0) {
        raft_errmsgf(errmsg, errmsg_len,
                     "secret_file: %s: mode %04o, want 0600 or stricter "
                     "(chmod 600 %s)",
                     path, (unsigned)(st.st_mode & 07777), path);
        goto out;
    }
    if (st.st_size > RAFT__UV_TLS_SECRET_MAX) {
        raft_errmsgf(errmsg, errmsg_len,
                     "secret_file: %s: %lld bytes, want at most %d", path,
                     (long long)st.st_size, RAFT__UV_TLS_SECRET_MAX);
        goto out;
    }
    buf = malloc(RAFT__UV_TLS_SECRET_MAX);
    if (buf == NULL) {
        rc = RAFT_NOMEM;
        raft_errmsgf(errmsg, errmsg_len, "secret_file: out of memory");
        goto out;
    }
    while (got < RAFT__UV_TLS_SECRET_MAX &&
           (n = read(fd, buf + got, RAFT__UV_TLS_SECRET_MAX - got)) > 0) {
        got += (size_t)n;
    }
    if (got < RAFT_UV_TLS_SECRET_MIN) {
        raft_errmsgf(errmsg, errmsg_len,
                     "secret_file: %s: %zu bytes, want at least %d, e.g. "
                     "`openssl rand -hex 32 > %s`",
                     path, got, RAFT_UV_TLS_SECRET_MIN, path);
        goto out;
    }
    if (EVP_Digest(buf, got, key, NULL, EVP_sha256(), NULL) != 1) {
        ERR_clear_error();
        raft_errmsgf(errmsg, errmsg_len, "secret_file: %s: SHA-256 failed",
                     path);
        goto out;
    }
    rc = 0;
out:
    if (buf != NULL) {
        OPENSSL_cleanse(buf, RAFT__UV_TLS_SECRET_MAX);
        free(buf);
    }
    if (fd >= 0) {
        close(fd);
    }
    return rc;
}

/* build_psk makes the PSK context of @tls (its key read). */
static int build_psk(struct raft_uv_tls *tls, char *errmsg, size_t errmsg_len)
{
    SSL_CTX *ctx = ctx_base();

    if (ctx == NULL ||
        SSL_CTX_set_ciphersuites(ctx, RAFT__UV_TLS_PSK_CIPHER) != 1) {
        ERR_clear_error();
        SSL_CTX_free(ctx);
        raft_errmsgf(errmsg, errmsg_len, "tls: cannot make a TLS context");
        return RAFT_NOMEM;
    }
    SSL_CTX_set_app_data(ctx, tls);
    SSL_CTX_set_psk_use_session_callback(ctx, psk_use);
    SSL_CTX_set_psk_find_session_callback(ctx, psk_find);
    /* No certificate to verify: a server that ignores the PSK and shows
     * one instead is refused once the handshake is done, before anything
     * is sent (raft_uv_tls_session_check_host: the PSK must be used). */
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    tls->ctx = ctx;
    return 0;
}

int raft_uv_tls_new(const struct raft_uv_tls_config *cfg,
                    struct raft_uv_tls **out, char *errmsg, size_t errmsg_len)
{
    const char *paths[3] = {cfg->cert_file, cfg->key_file, cfg->ca_file};
    bool psk = cfg->secret_file != NULL;
    struct raft_uv_tls *tls;
    int rc = RAFT_NOMEM;

    if (psk == (cfg->cert_file != NULL) ||
        (!psk && (paths[1] == NULL || paths[2] == NULL))) {
        raft_errmsgf(errmsg, errmsg_len,
                     "tls: give tls_cert, tls_key and tls_ca, or "
                     "secret_file");
        return RAFT_INVALID;
    }
    tls = calloc(1, sizeof *tls);
    if (tls == NULL) {
        raft_errmsgf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    pthread_mutex_init(&tls->mu, NULL);
    tls->mode = psk ? RAFT_UV_TLS_PSK : RAFT_UV_TLS_CERTIFICATES;
    for (unsigned i = 0; i < (psk ? 1u : 3u); i++) {
        tls->files[i] = strdup(psk ? cfg->secret_file : paths[i]);
        if (tls->files[i] == NULL) {
            raft_errmsgf(errmsg, errmsg_len, "out of memory");
            goto err;
        }
        stamp_take(tls->files[i], &tls->stamps[i]);
    }
    if (psk) {
        rc = read_secret(tls->files[0], tls->psk, errmsg, errmsg_len);
        if (rc == 0) {
            rc = build_psk(tls, errmsg, errmsg_len);
        }
    } else {
        rc = build_certificates(tls->files, &tls->ctx, tls->expires, errmsg,
                                errmsg_len);
    }
    if (rc != 0) {
        goto err;
    }
    *out = tls;
    return 0;

err:
    raft_uv_tls_free(tls);
    return rc;
}

void raft_uv_tls_free(struct raft_uv_tls *tls)
{
    if (tls == NULL) {
        return;
    }
    SSL_CTX_free(tls->ctx);
    for (unsigned i = 0; i < 3; i++) {
        free(tls->files[i]);
    }
    OPENSSL_cleanse(tls->psk, sizeof tls->psk);
    pthread_mutex_destroy(&tls->mu);
    free(tls);
}

int raft_uv_tls_mode(const struct raft_uv_tls *tls)
{
    return tls->mode;
}

bool raft_uv_tls_names_host(struct raft_uv_tls *tls, const char *host,
                            char *names, size_t names_len)
{
    bool ok = true;

    if (tls->mode == RAFT_UV_TLS_PSK) {
        return true;
    }
    pthread_mutex_lock(&tls->mu);
    ok = raft_uv_tls_session_match_host(SSL_CTX_get0_certificate(tls->ctx),
                                        host, names, names_len);
    pthread_mutex_unlock(&tls->mu);
    return ok;
}

void raft_uv_tls_expires(struct raft_uv_tls *tls, char *buf, size_t len)
{
    pthread_mutex_lock(&tls->mu);
    snprintf(buf, len, "%s", tls->expires);
    pthread_mutex_unlock(&tls->mu);
}

struct ssl_ctx_st *raft_uv_tls_context(struct raft_uv_tls *tls)
{
    SSL_CTX *ctx;

    pthread_mutex_lock(&tls->mu);
    ctx = tls->ctx;
    SSL_CTX_up_ref(ctx);
    pthread_mutex_unlock(&tls->mu);
    return ctx;
}

int raft_uv_tls_reload(struct raft_uv_tls *tls, char *msg, size_t msg_len)
{
    struct stamp now[3];
    char expires[32] = "";
    SSL_CTX *ctx = NULL;
    SSL_CTX *old;
    int rc;

    if (tls->mode == RAFT_UV_TLS_PSK) {
        raft_errmsgf(msg, msg_len,
                     "secret_file: %s: a pre-shared secret is not reloaded "
                     "(restart every node with the new one)",
                     tls->files[0]);
        return RAFT_INVALID;
    }
    for (unsigned i = 0; i < 3; i++) {
        stamp_take(tls->files[i], &now[i]);
    }
    rc = build_certificates(tls->files, &ctx, expires, msg, msg_len);
    pthread_mutex_lock(&tls->mu);
    memcpy(tls->stamps, now, sizeof now);
    old = NULL;
    if (rc == 0) {
        old = tls->ctx;
        tls->ctx = ctx;
        memcpy(tls->expires, expires, sizeof expires);
    }
    pthread_mutex_unlock(&tls->mu);
    SSL_CTX_free(old); /* sessions made with it keep their reference */
    if (rc == 0) {
        raft_errmsgf(msg, msg_len,
                     "loaded tls_cert %s (expires %s), tls_key %s, tls_ca %s",
                     tls->files[0], expires, tls->files[1], tls->files[2]);
    }
    return rc;
}

int raft_uv_tls_check(struct raft_uv_tls *tls, char *msg, size_t msg_len)
{
    struct stamp now[3];
    bool changed = false;

    raft_errmsgf(msg, msg_len, "%s", "");
    if (tls->mode == RAFT_UV_TLS_PSK) {
        return 0;
    }
    for (unsigned i = 0; i < 3; i++) {
        stamp_take(tls->files[i], &now[i]);
    }
    pthread_mutex_lock(&tls->mu);
    for (unsigned i = 0; i < 3; i++) {
        changed = changed || !stamp_equal(&now[i], &tls->stamps[i]);
    }
    pthread_mutex_unlock(&tls->mu);
    return changed ? raft_uv_tls_reload(tls, msg, msg_len) : 0;
}
