// An MCP client (the official TypeScript SDK) that starts with no token: the gateway's 401
// points it to the protected resource metadata, which names the authorization server; the
// SDK's ClientCredentialsProvider discovers that server, gets a token for the gateway's MCP
// endpoint (RFC 8707 resource indicator) and calls a tool with it.
//
// Usage: node oauth_client.mjs URL ISSUER CLIENT_ID CLIENT_SECRET. Prints one JSON object
// with the tools it was listed and what `echo` answered.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';

const [url, issuer, clientId, clientSecret] = process.argv.slice(2);
const authProvider = new ClientCredentialsProvider({ clientId, clientSecret, expectedIssuer: issuer });
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider });
const client = new Client({ name: 'toolgate-oauth-test', version: '0' });
await client.connect(transport);
const listed = await client.listTools();
const echoed = await client.callTool({ name: 'echo', arguments: { text: 'hello over oauth' } });
await client.close();
console.log(JSON.stringify({
  tools: listed.tools.map((t) => t.name).sort(),
  echo: echoed.content[0].text,
  is_error: Boolean(echoed.isError),
  scope: authProvider.tokens()?.scope ?? null,
}));
