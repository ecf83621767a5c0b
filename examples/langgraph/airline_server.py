"""The airline tools of LangGraph's customer-support tutorial (part 3), as an
MCP server over stdio on the official Python SDK. Every tool takes the
passenger's id; the graph binds it to the signed-in user, so the model can
neither see nor change it (graphs/customer_support.yaml).
"""

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("airline")

# ticket → [passenger, flight, cancelled]; in memory, per process.
TICKETS = {
    "T-ALICE": ["alice", "LX 318 ZRH-CDG", False],
    "T-BOB": ["bob", "AF 1015 CDG-ZRH", False],
}


@server.tool()
def list_tickets(passenger_id: str) -> dict:
    """The passenger's tickets: ticket id, flight, and whether it is cancelled."""
    return {
        "tickets": [
            {"ticket_id": t, "flight": f, "cancelled": c}
            for t, (p, f, c) in sorted(TICKETS.items())
            if p == passenger_id
        ]
    }


@server.tool()
def cancel_ticket(passenger_id: str, ticket_id: str) -> dict:
    """Cancel one of the passenger's tickets."""
    ticket = TICKETS.get(ticket_id)
    if ticket is None or ticket[0] != passenger_id:
        raise ToolError(f"passenger {passenger_id} has no ticket {ticket_id}")
    if ticket[2]:
        raise ToolError(f"ticket {ticket_id} is already cancelled")
    ticket[2] = True
    return {"cancelled": ticket_id, "flight": ticket[1]}


if __name__ == "__main__":
    server.run()  # stdio
