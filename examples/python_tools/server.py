"""Two Python functions as stategraph tools: an MCP server over stdio.

Built on the official MCP Python SDK (`pip install mcp`; in SDK 2.x the
FastMCP class is `MCPServer`, in 1.x `from mcp.server.fastmcp import
FastMCP` works the same way). Each decorated function is a tool; its type
hints become the input schema the model is offered, its docstring the
description, its return value the result.

Run it yourself to see it speak MCP on stdin/stdout:

    python examples/python_tools/server.py

stategraph starts it as configured in examples/python_tools/stategraph.toml.
"""

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("shop")

# A fixed catalogue, so answers are reproducible.
ORDERS = {
    "A-100": {"status": "shipped", "items": 2, "weight_kg": 1.5, "country": "FR"},
    "A-101": {"status": "processing", "items": 1, "weight_kg": 0.4, "country": "DE"},
}
RATES = {"FR": 4.0, "DE": 3.5, "US": 9.0}


@server.tool()
def order_status(order_id: str) -> dict:
    """The status of an order: status, number of items, weight and country."""
    order = ORDERS.get(order_id.strip().upper())
    if order is None:
        raise ToolError(f"no order {order_id}; known: {', '.join(sorted(ORDERS))}")
    return {"order_id": order_id.upper(), **order}


@server.tool()
def shipping_quote(weight_kg: float, country: str) -> dict:
    """The shipping price in euros for a parcel of `weight_kg` to `country` (FR, DE, US)."""
    rate = RATES.get(country.strip().upper())
    if rate is None:
        raise ToolError(f"no shipping to {country}; we ship to {', '.join(sorted(RATES))}")
    return {"country": country.upper(), "weight_kg": weight_kg, "price_eur": round(2.0 + rate * weight_kg, 2)}


if __name__ == "__main__":
    server.run()  # stdio
