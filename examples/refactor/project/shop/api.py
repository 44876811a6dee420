"""Data access: the API the refactor renames."""

_TABLES = {
    "orders": [
        {"id": 1, "sku": "pen", "qty": 3, "price": 1.5},
        {"id": 2, "sku": "ink", "qty": 1, "price": 7.0},
        {"id": 3, "sku": "pen", "qty": 2, "price": 1.5},
    ],
    "stock": [
        {"sku": "pen", "on_hand": 10},
        {"sku": "ink", "on_hand": 0},
        {"sku": "pad", "on_hand": 4},
    ],
}


def fetch_data(table: str) -> list[dict]:
    """Return a copy of every row of ``table``."""
    if table not in _TABLES:
        raise KeyError(f"unknown table {table!r}; known: {', '.join(sorted(_TABLES))}")
    return [dict(row) for row in _TABLES[table]]
