"""Order arithmetic."""

from shop.api import fetch_data


def order_total(order_id: int) -> float:
    for row in fetch_data("orders"):
        if row["id"] == order_id:
            return row["qty"] * row["price"]
    raise KeyError(f"no order {order_id}")


def revenue() -> float:
    return sum(row["qty"] * row["price"] for row in fetch_data("orders"))
