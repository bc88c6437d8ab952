from app import webservice


def test_defaults():
    assert webservice.ASR_MODEL
