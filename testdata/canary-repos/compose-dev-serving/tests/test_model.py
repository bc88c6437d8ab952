import unittest

import model


class TestModel(unittest.TestCase):
    def test_generate_counts_tokens(self):
        model.LOAD_SECONDS = 0
        out = model.TinyModel("tiny").generate("hello world")
        self.assertEqual(out["tokens"], 7)


if __name__ == "__main__":
    unittest.main()
