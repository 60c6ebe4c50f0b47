"""A TCP proxy that flips one byte of a TLS record on command, for the
namespace tests (tests/e2e/test_netns_tls.py), which run it in a host of
its own between two nodes:

    ip netns exec <ns> python3 flip_proxy.py LISTEN_PORT HOST:PORT

It listens on 0.0.0.0:LISTEN_PORT and forwards each connection to
HOST:PORT. What the dialler sends is cut into TLS records (a 5-byte
header: type, version, length); a stream that does not start with one
passes as it is. Commands come on stdin, one a line, each answered by one
JSON line on stdout:

    on      from now on, flip one byte in the middle of the ciphertext of
            the sixth application-data record (type 23) the dialler sends
            on each connection: its TLS handshake takes three at most
            (Certificate, CertificateVerify and Finished, or Finished
            alone with a pre-shared key) and raftsql's handshake one, so
            the sixth carries frames sent after the acceptance (both
            handshakes succeed);
    off     flip no more (connections made meanwhile pass untouched);
    stats   {"connections": accepted so far, "flipped": records flipped}.

It prints {"listening": LISTEN_PORT} once it listens, and exits at the end
of stdin, closing every connection.
"""

import json
import socket
import sys
import threading

APPLICATION_DATA = 23
FLIP_AT = 6  # the dialler's nth application-data record is flipped


class Proxy:
    def __init__(self, port, target):
        self.target = target
        self.flipping = False
        self.connections = 0
        self.flipped = 0
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("0.0.0.0", port))
        self.listener.listen(16)

    def accept(self):
        while True:
            a, _ = self.listener.accept()
            try:
                b = socket.create_connection(self.target, timeout=3)
                b.settimeout(None)
            except OSError:
                a.close()
                continue
            with self.lock:
                self.connections += 1
            threading.Thread(target=self.records, args=(a, b),
                             daemon=True).start()
            threading.Thread(target=self.pump, args=(b, a),
                             daemon=True).start()

    def pump(self, src, dst):
        """Copy src to dst as it comes."""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        close(src, dst)

    def records(self, src, dst):
        """Copy the dialler's stream src to dst record by record,
        flipping a byte of its FLIP_AT-th application-data record while
        on (once per connection)."""
        buf = bytearray()
        n_data = 0
        done = False
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                buf += data
                if buf and not 20 <= buf[0] <= 23:
                    done = True  # not TLS: pass it as it is
                out = bytearray()
                while not done and len(buf) >= 5:
                    end = 5 + int.from_bytes(buf[3:5], "big")
                    if len(buf) < end:
                        break
                    record = buf[:end]
                    del buf[:end]
                    if record[0] == APPLICATION_DATA:
                        n_data += 1
                        if n_data >= FLIP_AT and self.flipping and end > 6:
                            record[5 + (end - 5) // 2] ^= 0x01
                            done = True
                            with self.lock:
                                self.flipped += 1
                    out += record
                if done:
                    out += buf
                    buf = bytearray()
                dst.sendall(out)
        except OSError:
            pass
        close(src, dst)

    def command(self, line):
        word = line.strip()
        if word in ("on", "off"):
            self.flipping = word == "on"
            return {"flipping": self.flipping}
        with self.lock:
            return {"connections": self.connections, "flipped": self.flipped}


def close(*socks):
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


def main():
    host, port = sys.argv[2].rsplit(":", 1)
    proxy = Proxy(int(sys.argv[1]), (host, int(port)))
    threading.Thread(target=proxy.accept, daemon=True).start()
    print(json.dumps({"listening": int(sys.argv[1])}), flush=True)
    for line in sys.stdin:
        print(json.dumps(proxy.command(line)), flush=True)


if __name__ == "__main__":
    main()
