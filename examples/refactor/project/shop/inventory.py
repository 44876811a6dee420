"""Stock levels."""

from shop.api import fetch_data as _fetch


def out_of_stock() -> list[str]:
    return sorted(row["sku"] for row in _fetch("stock") if row["on_hand"] == 0)


def on_hand(sku: str) -> int:
    return next((row["on_hand"] for row in _fetch("stock") if row["sku"] == sku), 0)
