"""Certificates and secrets for tests, made with the openssl command line.

A small CA (EC P-256, self-signed) signs one certificate per node with
`openssl ca`, which takes any validity window (an expired certificate, one
not valid yet); each certificate names its hosts in its subjectAltName (IP
entries for literals, DNS entries for names) and is good for both TLS
client and server authentication, as raftsql's peers need (docs/deploy.md,
"TLS between peers"). Used by tests/e2e/test_tls.py and, later, the
namespace tests.

    ca = CA(workdir)                          # workdir/ca.pem, ca.key
    cert, key = ca.issue("node1", ["127.0.0.1", "node1"])
    cert, key = ca.issue("old", ["127.0.0.1"], start=-10 * DAY, end=-DAY)
    keys = ca.tls_keys("node2", ["node2"])    # "tls_cert=... tls_ca=..."
    path = secret(workdir, "secret")          # 32 random bytes, hex, 0600
"""

import datetime
import ipaddress
import os
import subprocess

DAY = 24 * 3600

CONFIG = """\
[ ca ]
default_ca = ca_section
[ ca_section ]
database = {db}/index.txt
new_certs_dir = {db}
serial = {db}/serial
default_md = sha256
policy = policy_any
unique_subject = no
copy_extensions = none
[ policy_any ]
commonName = supplied
"""


def openssl(*args):
    """Run the openssl command line; raise with its stderr on failure."""
    p = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (args[0], p.stderr.strip()))
    return p.stdout


def when(seconds):
    """The UTC time @seconds from now in `openssl ca` date form."""
    t = datetime.datetime.now(datetime.timezone.utc) + \
        datetime.timedelta(seconds=seconds)
    return t.strftime("%Y%m%d%H%M%SZ")


def san(hosts):
    """The subjectAltName value naming @hosts."""
    names = []
    for h in hosts:
        try:
            ipaddress.ip_address(h)
            names.append("IP:" + h)
        except ValueError:
            names.append("DNS:" + h)
    return ",".join(names)


class CA:
    """A certificate authority in @directory: <name>.pem and <name>.key,
    and the database `openssl ca` keeps in <name>-db/."""

    def __init__(self, directory, name="ca", days=30):
        self.dir = directory
        self.name = name
        self.cert = os.path.join(directory, name + ".pem")
        self.key = os.path.join(directory, name + ".key")
        self.db = os.path.join(directory, name + "-db")
        os.makedirs(self.db, exist_ok=True)
        open(os.path.join(self.db, "index.txt"), "w").close()
        with open(os.path.join(self.db, "serial"), "w") as f:
            f.write("1000\n")
        self.config = os.path.join(self.db, "ca.cnf")
        with open(self.config, "w") as f:
            f.write(CONFIG.format(db=self.db))
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:P-256", "-nodes", "-keyout", self.key,
                "-out", self.cert, "-days", str(days), "-subj",
                "/CN=raftsql test CA " + name, "-addext",
                "basicConstraints=critical,CA:TRUE", "-addext",
                "keyUsage=critical,keyCertSign,cRLSign")

    def issue(self, name, hosts, start=-3600, end=30 * DAY, cert=None,
              key=None):
        """Make a key and a certificate for @hosts valid from @start to
        @end seconds from now; write them to @cert and @key (default
        <dir>/<name>.pem and .key, replaced atomically) and return both
        paths."""
        cert = cert or os.path.join(self.dir, name + ".pem")
        key = key or os.path.join(self.dir, name + ".key")
        tmp = os.path.join(self.db, name)
        ext = tmp + ".ext"
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\n"
                    "keyUsage=critical,digitalSignature\n"
                    "extendedKeyUsage=serverAuth,clientAuth\n")
            if hosts:
                f.write("subjectAltName=%s\n" % san(hosts))
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:P-256", "-nodes", "-keyout", tmp + ".key",
                "-out", tmp + ".csr", "-subj", "/CN=" + name)
        openssl("ca", "-batch", "-notext", "-config", self.config, "-cert",
                self.cert, "-keyfile", self.key, "-in", tmp + ".csr", "-out",
                tmp + ".crt", "-extfile", ext, "-startdate", when(start),
                "-enddate", when(end))
        os.chmod(tmp + ".key", 0o600)
        os.replace(tmp + ".key", key)
        os.replace(tmp + ".crt", cert)
        return cert, key

    def tls_keys(self, name, hosts, **kw):
        """Issue a key and a certificate <name>.pem for @hosts (@kw as
        issue) and return the raft_start keys of a node that presents
        them and trusts this CA: "tls_cert=... tls_key=... tls_ca=..."."""
        cert, key = self.issue(name, hosts, **kw)
        return "tls_cert=%s tls_key=%s tls_ca=%s" % (cert, key, self.cert)


def not_after(cert):
    """The notAfter of the PEM certificate file (or text) @cert, as
    raftsql's status shows it: ISO 8601 UTC."""
    if os.path.exists(cert):
        out = openssl("x509", "-noout", "-enddate", "-dateopt", "iso_8601",
                      "-in", cert)
    else:
        p = subprocess.run(["openssl", "x509", "-noout", "-enddate",
                            "-dateopt", "iso_8601"], input=cert,
                           capture_output=True, text=True, check=True)
        out = p.stdout
    # notAfter=2026-12-31 10:00:00Z
    return out.strip().split("=", 1)[1].replace(" ", "T")


def secret(directory, name="secret", mode=0o600):
    """A secret file of 32 random bytes in hex (`openssl rand -hex 32`)
    in @directory; returns its path."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(openssl("rand", "-hex", "32"))
    os.chmod(path, mode)
    return path
