import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from model import TinyModel

PORT = 8000
model = TinyModel(os.environ.get("MODEL_NAME", "tiny"))


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.answer(200, {"status": "ok"})
        else:
            self.answer(404, {"detail": "not found"})

    def do_POST(self):
        if self.path != "/v1/generate":
            self.answer(404, {"detail": "not found"})
            return
        n = int(self.headers.get("Content-Length", 0))
        self.answer(200, model.generate(json.loads(self.rfile.read(n))["prompt"]))


signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
print("serving", model.name, "on port", PORT, flush=True)
HTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
