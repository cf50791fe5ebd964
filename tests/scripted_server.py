"""A tiny HTTP(S) server on loopback whose answers a test scripts, per path: a status
with an S3 error code, a body, or a body that stalls half-way (no bytes for longer
than a client's read timeout). The requests it saw are kept for the test to check."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    code: str = ""  # S3 error code of an error answer (empty: no XML body)
    stall: float = 0.0  # seconds of silence after half the body
    delay: float = 0.0  # seconds of silence before the answer
    headers: dict[str, str] = field(default_factory=dict)  # more headers (a Location ...)
    dribble: float = 0.0  # seconds of silence before each byte of the body


class ScriptedServer:
    """``server.script(path, Answer(...), ...)``: the next GETs of ``path`` get these
    answers in turn; the last one repeats. HEADs are scripted as ``"HEAD " + path``."""

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.answers: dict[str, deque[Answer]] = defaultdict(deque)
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.targets: list[str] = []  # every request's whole path and query, in order
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                outer.seen.append((path, dict(self.headers)))
                outer.targets.append(self.path)
                queue = outer.answers.get(path)
                answer = (queue.popleft() if len(queue) > 1 else queue[0]) if queue else Answer(404)
                body = answer.body
                if answer.code:
                    body = (
                        f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{answer.code}</Code>"
                        "<Message>scripted</Message></Error>"
                    ).encode()
                if answer.delay and outer.stop.wait(answer.delay):
                    return
                self.send_response(answer.status)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", '"scripted"')
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if answer.dribble:
                    for i in range(len(body)):
                        if outer.stop.wait(answer.dribble):
                            return
                        try:
                            self.wfile.write(body[i : i + 1])
                            self.wfile.flush()
                        except OSError:  # the client gave up
                            return
                    return
                if answer.stall:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    outer.stop.wait(answer.stall)
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def do_HEAD(self) -> None:
                """Scripted under ``"HEAD " + path``; answered with headers only."""
                path = self.path.split("?", 1)[0]
                outer.seen.append((f"HEAD {path}", dict(self.headers)))
                outer.targets.append(f"HEAD {self.path}")
                queue = outer.answers.get(f"HEAD {path}")
                answer = (queue.popleft() if len(queue) > 1 else queue[0]) if queue else Answer(404)
                self.send_response(answer.status)
                self.send_header("Content-Length", str(len(answer.body)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if context is not None:
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if context else "http"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def script(self, path: str, *answers: Answer) -> None:
        self.answers[path] = deque(answers)

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    """Poll ``predicate`` until true (for servers, not for synchronising test steps)."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise TimeoutError("condition not met")
        time.sleep(0.01)


def tls_server_context(folder: Path) -> tuple[Path, ssl.SSLContext]:
    """A private certificate authority and a server certificate for 127.0.0.1 it signed:
    (the CA's PEM file, a server context holding the certificate and its key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def build(subject: str, issuer: x509.Name, public: Any, signer: Any, ca: bool) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Private Test CA")])
    ca = build("Private Test CA", ca_name, ca_key.public_key(), ca_key, True)
    cert = build("127.0.0.1", ca_name, key.public_key(), ca_key, False)
    pem = serialization.Encoding.PEM
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "server.pem", folder / "key.pem"
    ca_file.write_bytes(ca.public_bytes(pem))
    cert_file.write_bytes(cert.public_bytes(pem))
    key_file.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return ca_file, context
