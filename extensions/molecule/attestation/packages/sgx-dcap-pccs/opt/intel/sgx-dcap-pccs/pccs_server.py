"""Stand-in for PCCS's pccs_server.js (Molecule tests only).

Reads config/default.json and config/$NODE_ENV.json the way node-config merges them, serves HTTPS on
HTTPS_PORT/hosts with ssl_key/private.pem and ssl_key/file.crt, answers GET .../rootcacrl, and checks the
admin-token header of GET .../platforms against the SHA-512 in AdminTokenHash as middleware/auth.js does.
"""

import hashlib
import http.server
import json
import os
import re
import ssl


def load(name):
    try:
        with open(f"config/{name}.json") as handle:
            text = handle.read()
    except FileNotFoundError:
        return {}
    out, i, quoted = [], 0, False
    while i < len(text):
        if quoted:
            out.append(text[i])
            if text[i] == "\\":
                out.append(text[i + 1])
                i += 1
            elif text[i] == '"':
                quoted = False
        elif text.startswith("//", i):
            i = text.find("\n", i) - 1 if "\n" in text[i:] else len(text)
        elif text.startswith("/*", i):
            i = text.find("*/", i) + 1
        else:
            quoted = text[i] == '"'
            out.append(text[i])
        i += 1
    return json.loads(re.sub(r",(\s*[}\]])", r"\1", "".join(out)))


def merge(base, override):
    for key, value in override.items():
        base[key] = merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return base


CONFIG = merge(load("default"), load(os.environ.get("NODE_ENV", "development")))


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/sgx/certification/v4/rootcacrl"):
            self.reply(200, b"stand-in root CA CRL\n")
        elif self.path.startswith("/sgx/certification/v4/platforms"):
            token = self.headers.get("admin-token", "")
            good = hashlib.sha512(token.encode()).hexdigest() == CONFIG.get("AdminTokenHash", "").lower()
            self.reply(200 if good else 401, b"[]\n" if good else b"Unauthorized\n")
        else:
            self.reply(404, b"Not found\n")

    def reply(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("ssl_key/file.crt", "ssl_key/private.pem")
server = http.server.ThreadingHTTPServer((CONFIG["hosts"], int(CONFIG["HTTPS_PORT"])), Handler)
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
