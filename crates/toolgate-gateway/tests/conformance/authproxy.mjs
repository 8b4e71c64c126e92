// A loopback proxy that adds `Authorization: Bearer $TOOLGATE_KEY` to every request and
// forwards it, otherwise untouched (Host and Origin included), to the gateway at $TARGET.
// The conformance suite cannot send a key; the gateway's /mcp requires one.
//
// Usage: TARGET=http://127.0.0.1:PORT TOOLGATE_KEY=… node authproxy.mjs
// Listens on a free port of 127.0.0.1 and prints `authproxy listening on http://127.0.0.1:PORT`.
// Responses are streamed (SSE), and a client that hangs up closes its upstream request.
import http from 'node:http';

const target = new URL(process.env.TARGET ?? '');
const key = process.env.TOOLGATE_KEY;
if (target.protocol !== 'http:' || target.hostname !== '127.0.0.1' || !key) {
  console.error('authproxy: set TARGET=http://127.0.0.1:PORT and TOOLGATE_KEY');
  process.exit(2);
}

const server = http.createServer((req, res) => {
  const upstream = http.request(
    {
      host: target.hostname,
      port: target.port,
      method: req.method,
      path: req.url,
      headers: { ...req.headers, authorization: `Bearer ${key}` },
    },
    (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    },
  );
  upstream.on('error', (error) => {
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
    res.end(`authproxy: ${error.message}`);
  });
  res.on('close', () => upstream.destroy());
  req.pipe(upstream);
});

server.listen(0, '127.0.0.1', () => {
  console.log(`authproxy listening on http://127.0.0.1:${server.address().port}`);
});
