import os

ASR_MODEL = os.getenv("ASR_MODEL", "base")
ASR_ENGINE = os.getenv("ASR_ENGINE", "openai_whisper")


def start():
    print("serving", ASR_ENGINE, ASR_MODEL, "on port 9000")
