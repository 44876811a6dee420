"""A tiny shop: the bundled project that examples/refactor renames an API across."""
