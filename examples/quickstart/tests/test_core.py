import unittest

from textstats import summarise, top_words, word_counts


class CoreTest(unittest.TestCase):
    def test_counts_ignore_case_and_quotes(self):
        self.assertEqual(word_counts("The cat, the 'cat' and THE dog"),
                         {"the": 3, "cat": 2, "and": 1, "dog": 1})

    def test_top_words_ties_are_alphabetical(self):
        self.assertEqual(top_words("b a c b a", n=2), [("a", 2), ("b", 2)])

    def test_summary(self):
        report = summarise("doc", "one two\ntwo three three three\n")
        self.assertEqual(report, {"name": "doc", "lines": 2, "words": 6, "distinct": 3,
                                  "top": [("three", 3), ("two", 2), ("one", 1)]})


if __name__ == "__main__":
    unittest.main()
