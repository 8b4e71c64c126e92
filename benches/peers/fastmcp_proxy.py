"""FastMCP's proxy in front of the peers benchmark's upstream (run by benches/peers/run.sh
with the pinned FastMCP of its venv).

    python fastmcp_proxy.py UPSTREAM_URL PORT off|on [CALLER_TOKEN AUDIT_LOG]

The upstream's bearer token comes from the environment (UPSTREAM_TOKEN). One client session
to the upstream is opened at start and shared by every caller (FastMCP reuses a connected
client's session for all requests; a fresh upstream session per request is FastMCP's other
mode, several times slower). Served over streamable HTTP at /mcp with FastMCP's defaults.

With policies on, FastMCP's own pieces: a static bearer token verifier (the caller's
token), the rate-limiting middleware per caller (client id of the token), high enough never
to refuse, and the structured logging middleware writing one record per tools/call
(started and succeeded) to AUDIT_LOG.
"""

import asyncio
import logging
import os
import sys

from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.server import create_proxy
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.server.dependencies import get_access_token
from fastmcp.server.middleware.logging import StructuredLoggingMiddleware
from fastmcp.server.middleware.rate_limiting import RateLimitingMiddleware


def caller_id(_context):
    token = get_access_token()
    return token.client_id if token else "anonymous"


async def main(upstream_url, port, policies, caller_token=None, audit_log=None):
    upstream = Client(StreamableHttpTransport(
        upstream_url, headers={"Authorization": f"Bearer {os.environ['UPSTREAM_TOKEN']}"}))
    async with upstream:
        settings = {"name": "peers-fastmcp"}
        if policies == "on":
            settings["auth"] = StaticTokenVerifier(
                tokens={caller_token: {"client_id": "bench", "scopes": []}})
        proxy = create_proxy(upstream, **settings)
        if policies == "on":
            proxy.add_middleware(RateLimitingMiddleware(
                max_requests_per_second=1_000_000, burst_capacity=1_000_000,
                get_client_id=caller_id))
            audit = logging.getLogger("peers.audit")
            audit.setLevel(logging.INFO)
            audit.propagate = False
            audit.addHandler(logging.FileHandler(audit_log))
            proxy.add_middleware(StructuredLoggingMiddleware(
                logger=audit, methods=["tools/call"], include_payloads=True))
        await proxy.run_http_async(show_banner=False, transport="http", host="127.0.0.1",
                                   port=port, path="/mcp", log_level="warning")


if __name__ == "__main__":
    if len(sys.argv) not in (4, 6) or sys.argv[3] not in ("off", "on") \
            or (sys.argv[3] == "on") != (len(sys.argv) == 6):
        sys.exit("usage: fastmcp_proxy.py UPSTREAM_URL PORT off | UPSTREAM_URL PORT on CALLER_TOKEN AUDIT_LOG")
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:]))
