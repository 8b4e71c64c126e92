// The identity provider of the gateway's OAuth tests: the certified `oidc-provider`, with
// the client credentials grant and resource indicators, so access tokens are JWTs (RFC 9068)
// whose `aud` is the resource the client asked for.
//
//   PORT=0 KEY_ID=key-1 node provider.mjs
//
// Prints `provider listening on http://127.0.0.1:PORT` once it serves. Binds 127.0.0.1 only.
//
// Beside the provider, a few routes under /test/ for what a real provider will not do on
// request: sign hand-made claims (expired, wrong audience, wrong issuer, …) with its own
// key, with a stranger's key, or HS256 with its public key as the secret; and count how
// often its discovery document and JWKS were fetched.
import http from 'node:http';
import { generateKeyPair, exportJWK, exportSPKI, jwtVerify, SignJWT } from 'jose';
import Provider from 'oidc-provider';

const keyId = process.env.KEY_ID || 'key-1';
const port = Number(process.env.PORT || 0);

// The test clients: id → secret, the claims their tokens carry, and the grants beside
// client credentials. `gateway` is toolgate itself, exchanging callers' tokens (RFC 8693).
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const CLIENTS = {
  agent: { secret: 'agent-secret', claims: { roles: ['reader'], tenant: 'acme' } },
  admin: { secret: 'admin-secret', claims: { roles: ['admin'], tenant: 'acme' } },
  gateway: { secret: 'gateway-secret', claims: {}, grants: [TOKEN_EXCHANGE] },
};
// The scopes a resource server (the gateway) may be granted.
const SCOPES = 'tools:read tools:call tools:admin';

// The gateway's console, signing people in with the authorization code flow and PKCE,
// when the test says where its callback is (the provider's own login and consent pages
// are on then).
const consoleRedirect = process.env.CONSOLE_REDIRECT_URI;
const CONSOLE_CLAIMS = { roles: ['admin'] };

const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true });
const signingJwk = { ...(await exportJWK(privateKey)), kid: keyId, alg: 'RS256', use: 'sig' };
const publicPem = await exportSPKI(publicKey);
const stranger = await generateKeyPair('RS256');

const counts = { discovery: 0, jwks: 0, token: 0, exchange: 0 };

const server = http.createServer();
await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: Object.entries(CLIENTS).map(([id, c]) => ({
    client_id: id,
    client_secret: c.secret,
    grant_types: ['client_credentials', ...(c.grants || [])],
    redirect_uris: [],
    response_types: [],
  })).concat(consoleRedirect ? [{
    client_id: 'console',
    client_secret: 'console-secret',
    grant_types: ['authorization_code'],
    redirect_uris: [consoleRedirect],
    response_types: ['code'],
  }] : []),
  jwks: { keys: [signingJwk] },
  features: {
    devInteractions: { enabled: Boolean(consoleRedirect) },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // A token request must name the resource (RFC 8707): no default audience.
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, resource) => ({
        scope: SCOPES,
        audience: resource,
        accessTokenTTL: Number(process.env.TOKEN_TTL || 300),
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'RS256' } },
      }),
    },
  },
  extraTokenClaims: (_ctx, token) =>
    (token.clientId === 'console' ? CONSOLE_CLAIMS : CLIENTS[token.clientId]?.claims),
});
provider.proxy = false;

// RFC 8693 token exchange: a client allowed the grant (the gateway) trades a caller's
// access token from this issuer for one for `resource` (an upstream), with the caller as
// `sub` and itself as the actor. The subject token is verified as any resource server
// would: signature, issuer, expiry.
provider.registerGrantType(TOKEN_EXCHANGE, async (ctx) => {
  const params = ctx.oidc.params;
  const fail = (error, description) => {
    ctx.status = 400;
    ctx.body = { error, error_description: description };
  };
  if (params.subject_token_type !== 'urn:ietf:params:oauth:token-type:access_token') {
    return fail('invalid_request', 'subject_token_type must be an access token');
  }
  if (!params.resource) return fail('invalid_target', 'resource is required');
  let subject;
  try {
    ({ payload: subject } = await jwtVerify(params.subject_token, publicKey, { issuer }));
  } catch (e) {
    return fail('invalid_grant', `the subject token is not valid: ${e.code || e.message}`);
  }
  counts.exchange += 1;
  const now = Math.floor(Date.now() / 1000);
  const ttl = Number(process.env.EXCHANGED_TTL || 300);
  const token = await new SignJWT({
    iss: issuer,
    sub: subject.sub,
    aud: params.resource,
    iat: now,
    exp: Math.min(now + ttl, subject.exp),
    scope: params.scope || subject.scope,
    client_id: ctx.oidc.client.clientId,
    act: { sub: ctx.oidc.client.clientId },
  }).setProtectedHeader({ alg: 'RS256', kid: keyId, typ: 'at+jwt' }).sign(privateKey);
  ctx.body = {
    access_token: token,
    issued_token_type: 'urn:ietf:params:oauth:token-type:access_token',
    token_type: 'Bearer',
    expires_in: Math.min(ttl, subject.exp - now),
  };
}, ['subject_token', 'subject_token_type', 'resource', 'audience', 'scope', 'requested_token_type']);

// Hand-made tokens: `{claims, key: provider|stranger|hmac-public, kid?}`.
async function sign(body) {
  const now = Math.floor(Date.now() / 1000);
  const claims = { iss: issuer, iat: now, exp: now + 300, sub: 'handmade', ...body.claims };
  for (const [k, v] of Object.entries(claims)) if (v === null) delete claims[k];
  const jwt = new SignJWT(claims);
  switch (body.key) {
    case 'stranger':
      return jwt.setProtectedHeader({ alg: 'RS256', kid: body.kid || 'stranger-1' }).sign(stranger.privateKey);
    case 'hmac-public':
      // The old HS/RS confusion: the public key, which anyone can fetch, as an HMAC secret.
      return jwt.setProtectedHeader({ alg: 'HS256', kid: keyId }).sign(new TextEncoder().encode(publicPem));
    default:
      return jwt.setProtectedHeader({ alg: 'RS256', kid: body.kid || keyId }).sign(privateKey);
  }
}

function readJson(req) {
  return new Promise((resolve, reject) => {
    let text = '';
    req.on('data', (chunk) => { text += chunk; });
    req.on('end', () => { try { resolve(JSON.parse(text || '{}')); } catch (e) { reject(e); } });
  });
}

const handle = provider.callback();
server.on('request', async (req, res) => {
  const path = req.url.split('?')[0];
  if (path === '/.well-known/openid-configuration') counts.discovery += 1;
  if (path === '/jwks') counts.jwks += 1;
  if (path === '/token') counts.token += 1;
  if (path === '/test/counts') {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(counts));
    return;
  }
  if (path === '/test/sign' && req.method === 'POST') {
    try {
      const token = await sign(await readJson(req));
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ token }));
    } catch (e) {
      res.statusCode = 400;
      res.end(String(e));
    }
    return;
  }
  handle(req, res);
});

const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
console.log(`provider listening on ${issuer}`);
