"""Text reports built on the data API."""

from shop import api


def units_by_sku() -> dict[str, int]:
    units: dict[str, int] = {}
    for row in api.fetch_data("orders"):
        units[row["sku"]] = units.get(row["sku"], 0) + row["qty"]
    return units


def report() -> str:
    return "\n".join(f"{sku}: {n}" for sku, n in sorted(units_by_sku().items()))
