import argparse
from http.server import HTTPServer, SimpleHTTPRequestHandler

p = argparse.ArgumentParser()
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, default=8080)
a = p.parse_args()
HTTPServer((a.host, a.port), SimpleHTTPRequestHandler).serve_forever()
