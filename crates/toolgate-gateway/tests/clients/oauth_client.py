"""An MCP client (the official Python SDK) that starts with no token: the gateway's 401
points it to the protected resource metadata, which names the authorization server; the
SDK's client-credentials provider discovers that server, gets a token for the gateway's
MCP endpoint (RFC 8707 resource indicator) and calls a tool with it.

Usage: oauth_client.py URL ISSUER CLIENT_ID CLIENT_SECRET. Prints one JSON object with the
tools it was listed and what `echo` answered.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


class InMemory(TokenStorage):
    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


async def main(url: str, issuer: str, client_id: str, client_secret: str) -> None:
    storage = InMemory()
    auth = ClientCredentialsOAuthProvider(
        server_url=url,
        storage=storage,
        client_id=client_id,
        client_secret=client_secret,
        issuer=issuer,
    )
    client = create_mcp_http_client(auth=auth)
    async with client, streamable_http_client(url, http_client=client) as (read, write, *_):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            echoed = await session.call_tool("echo", {"text": "hello over oauth"})
    print(
        json.dumps(
            {
                "tools": sorted(t.name for t in listed.tools),
                "echo": echoed.content[0].text,
                "is_error": bool(echoed.is_error),
                "scope": storage.tokens.scope if storage.tokens else None,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
