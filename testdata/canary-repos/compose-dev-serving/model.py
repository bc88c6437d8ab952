import os
import time

MAX_TOKENS = int(os.environ.get("MODEL_MAX_TOKENS", "16"))
# Loading the weights takes a few seconds, as a real model's does.
LOAD_SECONDS = 4


class TinyModel:
    def __init__(self, name):
        time.sleep(LOAD_SECONDS)
        self.name = name
        with open(os.path.join(os.path.dirname(__file__), "prompts", "system.txt")) as f:
            self.system = f.read().strip()

    def generate(self, prompt):
        words = (self.system + " " + prompt).split()[:MAX_TOKENS]
        return {"model": self.name, "tokens": len(words), "text": " ".join(reversed(words))}
