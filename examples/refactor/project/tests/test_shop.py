"""The shop's tests (stdlib unittest, so no install is needed).

``RenameDone`` fails until every module uses ``load_data``: it is the
refactor's acceptance test.
"""

import pathlib
import unittest

from shop import api, inventory, orders, reports

SRC = pathlib.Path(__file__).resolve().parent.parent / "shop"


class Behaviour(unittest.TestCase):
    def test_order_total(self):
        self.assertEqual(orders.order_total(1), 4.5)
        self.assertEqual(orders.revenue(), 14.5)

    def test_report(self):
        self.assertEqual(reports.report(), "ink: 1\npen: 5")

    def test_inventory(self):
        self.assertEqual(inventory.out_of_stock(), ["ink"])
        self.assertEqual(inventory.on_hand("pad"), 4)


class RenameDone(unittest.TestCase):
    def test_api_renamed(self):
        self.assertTrue(hasattr(api, "load_data"))
        self.assertFalse(hasattr(api, "fetch_data"))

    def test_no_module_uses_old_name(self):
        users = [p.name for p in sorted(SRC.glob("*.py")) if "fetch_data" in p.read_text()]
        self.assertEqual(users, [])


if __name__ == "__main__":
    unittest.main()
