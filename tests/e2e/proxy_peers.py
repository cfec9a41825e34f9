"""The peers of `authzd proxy` in tests/e2e/proxy.rs, on the standard library alone.

    proxy_peers.py upstream           an HTTP upstream answering every request with JSON of
                                      what it received (method, path, query, headers, and
                                      every header line as sent: `header_lines`)
    proxy_peers.py files DIR          an upstream that cleans paths itself, as http.server
                                      does: it writes and serves DIR (index.html
                                      "ROOT-INDEX", secret/flag "SECRET-FLAG", metrics/data
                                      "METRICS-DATA", public/readme "PUBLIC-README") through
                                      SimpleHTTPRequestHandler.translate_path (the path
                                      decoded, then posixpath.normpath), answering JSON
                                      {"received": the request target, "content": the file's
                                      text, or null with 404}
    proxy_peers.py apiserver TOKENS   a Kubernetes API server's TokenReview endpoint
                                      (/apis/authentication.k8s.io/v1/tokenreviews): TOKENS is
                                      a JSON file {token: {"user": {...}, "audiences": [...]}}

Each prints `listening on PORT` once bound to 127.0.0.1, then serves until killed.
"""

import functools
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        path, _, query = self.path.partition("?")
        document = {
            "method": self.command,
            "path": path,
            "query": query,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "header_lines": [[k, v] for k, v in self.headers.items()],
            "body": body,
        }
        data = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = answer

    def log_message(self, *args):
        pass


class Files(SimpleHTTPRequestHandler):
    """http.server's own path cleaning (translate_path), without its redirect of a directory
    to a trailing slash, so that the answer shows where a path lands."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        target = self.translate_path(self.path)
        if os.path.isdir(target):
            target = os.path.join(target, "index.html")
        try:
            with open(target) as file:
                content, status = file.read(), 200
        except OSError:
            content, status = None, 404
        data = json.dumps({"received": self.path, "content": content}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def files(root):
    for name, text in [
        ("index.html", "ROOT-INDEX"),
        ("secret/flag", "SECRET-FLAG"),
        ("metrics/data", "METRICS-DATA"),
        ("public/readme", "PUBLIC-README"),
    ]:
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as file:
            file.write(text)
    return functools.partial(Files, directory=root)


def apiserver(tokens):
    class TokenReviews(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            if self.path != "/apis/authentication.k8s.io/v1/tokenreviews":
                self.send_error(404)
                return
            length = int(self.headers.get("Content-Length") or 0)
            review = json.loads(self.rfile.read(length))
            spec = review.get("spec", {})
            known = tokens.get(spec.get("token", ""))
            wanted = spec.get("audiences") or []
            status = {"authenticated": False}
            if known is not None:
                audiences = known.get("audiences", [])
                # As kube-apiserver: a token is good for the audiences asked that it carries.
                granted = [a for a in wanted if a in audiences] if wanted else audiences
                if granted or not wanted:
                    status = {
                        "authenticated": True,
                        "user": known["user"],
                        "audiences": granted,
                    }
            review["status"] = status
            data = json.dumps(review).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return TokenReviews


def main():
    mode = sys.argv[1]
    if mode == "upstream":
        handler = Upstream
    elif mode == "files":
        handler = files(sys.argv[2])
    elif mode == "apiserver":
        with open(sys.argv[2]) as file:
            handler = apiserver(json.load(file))
    else:
        raise SystemExit(f"unknown mode {mode}")
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
