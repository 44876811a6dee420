"""textstats: tiny text statistics (the quickstart's sample project)."""

from .core import summarise, top_words, word_counts

__all__ = ["summarise", "top_words", "word_counts"]
