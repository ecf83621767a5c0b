"""A small business MCP server (stdio): customers and their invoices.

It backs graphs/assistant.yaml in tests/integration/shipped_apps/assistant.rs and works as
a demo (docs/assistant.md). Run it with a Python that has the `mcp` SDK
(tests/run.sh makes a venv from tests/mcp/requirements.txt):

    python tests/mcp/business_server.py          # MCP over stdin/stdout

and point stategraph at it:

    [tools.mcp.servers.business]
    command = ["/path/to/venv/bin/python", "tests/mcp/business_server.py"]

The data is a fixed in-memory set, so answers are reproducible. Tools:

- `find_customer(name)`       the best match by name (exact, then prefix, then
                              substring; ties by id) with the same fields as
                              `get_customer`, plus `other_matches`
- `get_customer(customer_id)` one customer
- `list_invoices(customer_id, status?)`
                              the customer's invoices as data, with totals
- `invoice_table(customer_id)`
                              the same invoices as a markdown table, ready to
                              show (configure it `pass_through = true`)
- `call_counts()`             how often each tool ran in this process, so a
                              test can tell a cached call from a real one

And tools shaped like the invoice assistant's own (docs/assistant.md):

- `find_customer_by_name(customer_name)`
                              `{"result": {id, customer_id, name, address…}}`
- `search_customer_list(search)`
                              `{"result": [{id, customer_name, …}, …]}` (by id;
                              the last is the latest)
- `search_invoice_list(customer_id)`
                              `<table>[{…}, …]</table>`: display-ready by its
                              content, no configuration needed
- `send_invoice_reminder(invoice_id)`
                              `[DISPLAY_VERBATIM] Reminder …`: shown as it is,
                              without the marker

Unknown names and ids fail with an `isError` result naming what exists.
"""

import json
from collections import Counter
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("stategraph-business")

CUSTOMERS: list[dict[str, Any]] = [
    {"id": "C-1001", "name": "Acme Corporation", "city": "Rotterdam", "segment": "enterprise", "email": "ap@acme.example", "address": "Wilhelminakade 91, 3072 AP Rotterdam"},
    {"id": "C-1002", "name": "Globex Industries", "city": "Lyon", "segment": "mid-market", "email": "billing@globex.example", "address": "12 rue de la Barre, 69002 Lyon"},
    {"id": "C-1003", "name": "Initech", "city": "Austin", "segment": "smb", "email": "accounts@initech.example", "address": "4120 Freidrich Lane, Austin TX"},
    {"id": "C-1004", "name": "Acme Logistics GmbH", "city": "Hamburg", "segment": "mid-market", "email": "finance@acme-logistics.example", "address": "Am Sandtorkai 50, 20457 Hamburg"},
]

INVOICES: list[dict[str, Any]] = [
    {"id": "INV-2024-0107", "customer_id": "C-1001", "issued": "2024-01-15", "due": "2024-02-14", "amount": 12500.00, "currency": "EUR", "status": "paid"},
    {"id": "INV-2024-0311", "customer_id": "C-1001", "issued": "2024-03-20", "due": "2024-04-19", "amount": 8420.50, "currency": "EUR", "status": "overdue"},
    {"id": "INV-2024-0518", "customer_id": "C-1001", "issued": "2024-05-31", "due": "2024-06-30", "amount": 15980.00, "currency": "EUR", "status": "open"},
    {"id": "INV-2024-0202", "customer_id": "C-1002", "issued": "2024-02-02", "due": "2024-03-03", "amount": 4300.00, "currency": "EUR", "status": "paid"},
    {"id": "INV-2024-0415", "customer_id": "C-1002", "issued": "2024-04-15", "due": "2024-05-15", "amount": 2750.25, "currency": "EUR", "status": "open"},
    {"id": "INV-2024-0620", "customer_id": "C-1004", "issued": "2024-06-20", "due": "2024-07-20", "amount": 3100.00, "currency": "EUR", "status": "open"},
    {"id": "INV-2024-0330", "customer_id": "C-1003", "issued": "2024-03-30", "due": "2024-04-29", "amount": 990.00, "currency": "USD", "status": "paid"},
]

calls: Counter[str] = Counter()


def customer(customer_id: str) -> dict[str, Any]:
    for c in CUSTOMERS:
        if c["id"] == customer_id:
            return c
    known = ", ".join(c["id"] for c in CUSTOMERS)
    raise ToolError(f"no customer with id {customer_id!r}; known ids: {known}")


def invoices_of(customer_id: str, status: str | None = None) -> list[dict[str, Any]]:
    customer(customer_id)
    return [i for i in INVOICES if i["customer_id"] == customer_id and (status is None or i["status"] == status)]


@server.tool()
def find_customer(name: str) -> dict[str, Any]:
    """Find the customer whose name best matches `name` (case-insensitive).

    Returns its id, name, city, segment and email, and `other_matches` (id
    and name of other customers that also match)."""
    calls["find_customer"] += 1
    q = name.strip().lower()
    if not q:
        raise ToolError("give a (part of a) customer name")
    ranked = []
    for c in CUSTOMERS:
        n = c["name"].lower()
        rank = 0 if n == q else 1 if n.startswith(q) else 2 if q in n else None
        if rank is not None:
            ranked.append((rank, c["id"], c))
    if not ranked:
        names = ", ".join(c["name"] for c in CUSTOMERS)
        raise ToolError(f"no customer matches {name!r}; customers: {names}")
    ranked.sort(key=lambda r: (r[0], r[1]))
    best = dict(ranked[0][2])
    best["other_matches"] = [{"id": c["id"], "name": c["name"]} for _, _, c in ranked[1:]]
    return best


@server.tool()
def get_customer(customer_id: str) -> dict[str, Any]:
    """Get one customer by id (e.g. C-1001)."""
    calls["get_customer"] += 1
    return dict(customer(customer_id))


@server.tool()
def list_invoices(customer_id: str, status: str | None = None) -> dict[str, Any]:
    """List a customer's invoices (optionally only `paid`, `open` or `overdue`)
    with the outstanding total."""
    calls["list_invoices"] += 1
    items = invoices_of(customer_id, status)
    outstanding = sum(i["amount"] for i in items if i["status"] != "paid")
    return {
        "customer_id": customer_id,
        "customer_name": customer(customer_id)["name"],
        "invoices": items,
        "outstanding": round(outstanding, 2),
    }


@server.tool(structured_output=False)
def invoice_table(customer_id: str) -> str:
    """The customer's invoices as a markdown table, ready to show the user."""
    calls["invoice_table"] += 1
    c = customer(customer_id)
    rows = [
        f"**Invoices of {c['name']} ({c['id']})**",
        "",
        "| Invoice | Issued | Due | Amount | Status |",
        "|---|---|---|---:|---|",
    ]
    for i in invoices_of(customer_id):
        rows.append(f"| {i['id']} | {i['issued']} | {i['due']} | {i['amount']:,.2f} {i['currency']} | {i['status']} |")
    if len(rows) == 4:
        rows.append("| — | | | | no invoices |")
    return "\n".join(rows)


@server.tool()
def call_counts() -> dict[str, int]:
    """How many times each tool ran since the server started."""
    return dict(calls)


def matching(text: str) -> list[dict[str, Any]]:
    q = text.strip().lower()
    return [c for c in CUSTOMERS if q and q in c["name"].lower()]


@server.tool(structured_output=False)
def find_customer_by_name(customer_name: str) -> str:
    """Find one customer by (part of) its name: {"result": {...}}."""
    calls["find_customer_by_name"] += 1
    found = matching(customer_name)
    if not found:
        raise ToolError(f"no customer matches {customer_name!r}")
    c = found[0]
    return json.dumps({"result": {**c, "customer_id": c["id"]}})


@server.tool(structured_output=False)
def search_customer_list(search: str) -> str:
    """Search customers by name: {"result": [...]}, oldest first."""
    calls["search_customer_list"] += 1
    rows = [{"id": c["id"], "customer_name": c["name"], "address": c["address"]} for c in matching(search)]
    return json.dumps({"result": rows})


@server.tool(structured_output=False)
def search_invoice_list(customer_id: str) -> str:
    """The customer's invoices, display-ready: <table>[...]</table>."""
    calls["search_invoice_list"] += 1
    rows = [{k: i[k] for k in ("id", "issued", "due", "amount", "currency", "status")} for i in invoices_of(customer_id)]
    return "<table>" + json.dumps(rows) + "</table>"


@server.tool(structured_output=False)
def send_invoice_reminder(invoice_id: str) -> str:
    """Send a payment reminder for one invoice."""
    calls["send_invoice_reminder"] += 1
    for i in INVOICES:
        if i["id"] == invoice_id:
            c = customer(i["customer_id"])
            return f"[DISPLAY_VERBATIM] Reminder for {invoice_id} ({i['amount']:,.2f} {i['currency']}) sent to {c['email']}."
    known = ", ".join(i["id"] for i in INVOICES)
    raise ToolError(f"no invoice {invoice_id!r}; known invoices: {known}")


if __name__ == "__main__":
    server.run()
