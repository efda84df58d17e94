#!/usr/bin/env python3
"""A second mutating webhook for the e2e suite's reinvocation test (tests/e2e/reinvocation.rs).

Serves HTTPS on 127.0.0.1:PORT with CERT and KEY (argv). Every AdmissionReview of a KService
whose first container lacks the env var SECOND_WEBHOOK gets a JSON Patch adding it; one line per
review goes to stdout. Registered after ksvc-webhook (its configuration's name sorts later), it
changes the object after ours, so kube-apiserver must call ours again (reinvocationPolicy
IfNeeded) for the spec SHA to cover the final spec.
"""
import base64
import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

PORT, CERT, KEY = int(sys.argv[1]), sys.argv[2], sys.argv[3]


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        container = request["object"]["spec"]["template"]["spec"]["containers"][0]
        env = container.get("env")
        response = {"uid": request["uid"], "allowed": True}
        if not any(e.get("name") == "SECOND_WEBHOOK" for e in env or []):
            var = {"name": "SECOND_WEBHOOK", "value": "was-here"}
            patch = (
                [{"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": var}]
                if env is not None
                else [{"op": "add", "path": "/spec/template/spec/containers/0/env", "value": [var]}]
            )
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        print(f"review {request['operation']} patched={'patch' in response}", flush=True)
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", PORT), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(CERT, KEY)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("listening", flush=True)
server.serve_forever()
