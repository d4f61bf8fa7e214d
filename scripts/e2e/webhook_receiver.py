#!/usr/bin/env python3
"""A webhook receiver for Alertmanager, for the end-to-end tests.

Appends one JSON line per notification to the output file: the time it arrived (Unix seconds,
float), then Alertmanager's payload. Binds 127.0.0.1 on the given port (0 picks one) and writes
the chosen port to the port file.
"""
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


def main():
    out_path, port_path = sys.argv[1], sys.argv[2]
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 0

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(min(length, 10 * 1024 * 1024))
            received = time.time()
            try:
                payload = json.loads(body)
            except ValueError:
                payload = {"unparseable": body.decode("utf-8", "replace")}
            with open(out_path, "a") as out:
                out.write(json.dumps({"received": received, "payload": payload}) + "\n")
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", port), Handler)
    with open(port_path, "w") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
