#!/usr/bin/env python3
"""A stand-in OTLP/HTTP collector for the load benchmark (scripts/bench-load.sh, OTLP=1).

Listens on 127.0.0.1:PORT, reads each POST /v1/traces whole and answers 200 with an empty body
(an ExportTraceServiceResponse without partial success), decoding nothing. Prints how many
export requests and bytes it took when it gets SIGTERM or SIGINT, then exits.

Usage: otlp-sink.py PORT
"""
import http.server
import signal
import sys
import threading


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a collector serves the exporter
    requests = 0
    received = 0

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        Sink.requests += 1
        Sink.received += length
        self.send_response(200 if self.path == "/v1/traces" else 404)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink)

    def stop(*_):
        print(f"otlp sink: {Sink.requests} export requests, {Sink.received} bytes", flush=True)
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()


if __name__ == "__main__":
    main()
