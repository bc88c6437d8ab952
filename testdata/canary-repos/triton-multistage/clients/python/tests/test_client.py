def test_client():
    assert True
