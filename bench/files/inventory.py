"""A small stock ledger: items, movements and a report of what to reorder."""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path


@dataclass
class Item:
    sku: str
    name: str
    quantity: int = 0
    reorder_level: int = 5
    history: list[tuple[date, int]] = field(default_factory=list)

    def needs_reorder(self) -> bool:
        return self.quantity <= self.reorder_level


class Ledger:
    def __init__(self) -> None:
        self.items: dict[str, Item] = {}

    def add_item(self, sku: str, name: str, reorder_level: int = 5) -> Item:
        if sku in self.items:
            raise KeyError(f"duplicate sku {sku!r}")
        item = Item(sku=sku, name=name, reorder_level=reorder_level)
        self.items[sku] = item
        return item

    def receive(self, sku: str, amount: int, when: date | None = None) -> None:
        if amount <= 0:
            raise ValueError("amount must be positive")
        item = self.items[sku]
        item.quantity += amount
        item.history.append((when or date.today(), amount))

    def ship(self, sku: str, amount: int, when: date | None = None) -> None:
        item = self.items[sku]
        if amount > item.quantity:
            raise ValueError(f"only {item.quantity} of {sku} in stock")
        item.quantity -= amount
        item.history.append((when or date.today(), -amount))

    def reorder_list(self) -> list[Item]:
        return sorted((i for i in self.items.values() if i.needs_reorder()),
                      key=lambda i: i.quantity)

    def total_units(self) -> int:
        return sum(item.quantity for item in self.items.values())


def load_ledger(path: Path) -> Ledger:
    ledger = Ledger()
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            item = ledger.add_item(row["sku"], row["name"], int(row.get("reorder_level") or 5))
            item.quantity = int(row["quantity"])
    return ledger


def save_ledger(ledger: Ledger, path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["sku", "name", "quantity", "reorder_level"])
        for item in ledger.items.values():
            writer.writerow([item.sku, item.name, item.quantity, item.reorder_level])


def report(ledger: Ledger) -> str:
    lines = [f"{len(ledger.items)} items, {ledger.total_units()} units"]
    for item in ledger.reorder_list():
        lines.append(f"  reorder {item.sku} ({item.name}): {item.quantity} left")
    return "\n".join(lines)
