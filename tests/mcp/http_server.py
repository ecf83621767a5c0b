"""A small streamable-HTTP MCP server for tests/integration/models_and_tools/mcp.rs.

Run with the test venv's Python (tests/run.sh creates it):

    python http_server.py [--port N]

It binds 127.0.0.1:N (0 = a free port), prints `PORT <n>` on stdout once it
listens, and serves MCP at /mcp until killed. Tools:

- `add(a, b)`            structured result `{"result": a + b}` (and text)
- `shout(text)`          text-only result, upper-cased
- `fail(message)`        always fails: an `isError: true` result
- `toggle_extra()`       adds (or removes) the tool `extra`, so a client's
                         refresh can be seen to pick up a changed tool list
"""

import argparse
import asyncio
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("stategraph-test-http")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(structured_output=False)
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


@server.tool(structured_output=False)
def fail(message: str) -> str:
    """Always fails with the given message."""
    raise ToolError(message)


def extra() -> str:
    """A tool that comes and goes."""
    return "extra here"


@server.tool(structured_output=False)
async def toggle_extra() -> str:
    """Adds the tool `extra`, or removes it if present."""
    names = {t.name for t in await server.list_tools()}
    if "extra" in names:
        server.remove_tool("extra")
        return "removed"
    server.add_tool(extra, name="extra", structured_output=False)
    return "added"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning")
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
