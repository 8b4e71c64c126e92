// An MCP client on the official TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// package.json) against toolgate, with everything.py imported as the upstream: it lists and
// calls tools (text, image, progress, sampling and elicitation relayed through the gateway),
// gets a prompt and reads a resource, and checks each answer. Usage:
//   node ts_client.mjs URL API_KEY            streamable HTTP (the gateway's /mcp)
//   node ts_client.mjs --stdio COMMAND ARG…   stdio (`toolgate mcp --config …`)
// Prints one line per check; exits 1 on any failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CreateMessageRequestSchema, ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const args = process.argv.slice(2);
const transport =
  args[0] === "--stdio"
    ? new StdioClientTransport({ command: args[1], args: args.slice(2), stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(args[0]), {
        requestInit: { headers: { Authorization: `Bearer ${args[1]}` } },
      });
const client = new Client(
  { name: "toolgate-ts-interop", version: "0" },
  { capabilities: { sampling: {}, elicitation: {} } },
);
client.setRequestHandler(CreateMessageRequestSchema, async () => ({
  role: "assistant",
  content: { type: "text", text: "forty-two" },
  model: "canned",
}));
client.setRequestHandler(ElicitRequestSchema, async () => ({
  action: "accept",
  content: { response: "from the TypeScript client" },
}));

let failures = 0;
function check(name, ok, detail) {
  console.log(`${ok ? "ok  " : "FAIL"} ${name}${ok ? "" : `: ${JSON.stringify(detail)}`}`);
  if (!ok) failures += 1;
}
const text = (result) => result.content?.find((c) => c.type === "text")?.text ?? "";

await client.connect(transport);
const { tools } = await client.listTools();
check("tools/list", tools.some((t) => t.name === "test_simple_text") && !tools.some((t) => t.name.startsWith("prompt.")), tools.map((t) => t.name));

const simple = await client.callTool({ name: "test_simple_text", arguments: {} });
check("tools/call text", text(simple) === "This is a simple text response for testing.", simple);

const image = await client.callTool({ name: "test_image_content", arguments: {} });
check("tools/call image", image.content?.[0]?.type === "image" && image.content[0].mimeType === "image/png" && image.content[0].data.length > 0, image);

const progress = [];
const counted = await client.callTool({ name: "test_tool_with_progress", arguments: {} }, undefined, {
  onprogress: (p) => progress.push(p.progress),
});
// Every step arrives, in order, before the answer (the Python client's test holds the gateway
// to all three). This SDK hands a notification to its handler a microtask later but settles
// a response at once, so when the last step and the answer arrive in one read (stdio on a
// loaded machine) it drops that step itself: here the first two must arrive, in order.
const steps = [0, 50, 100];
check(
  "progress relayed",
  progress.length >= 2 && progress.every((p, i) => p === steps[i]),
  { progress, counted },
);

const sampled = await client.callTool({ name: "test_sampling", arguments: { prompt: "the answer?" } });
check("sampling relayed", text(sampled) === "LLM response: forty-two", sampled);

const elicited = await client.callTool({ name: "test_elicitation", arguments: { message: "say something" } });
check("elicitation relayed", JSON.stringify(elicited).includes("from the TypeScript client"), elicited);

const prompt = await client.getPrompt({ name: "test_simple_prompt", arguments: {} });
check("prompts/get", prompt.messages?.length > 0, prompt);

const resource = await client.readResource({ uri: "test://static-text" });
check("resources/read", typeof resource.contents?.[0]?.text === "string", resource);

await client.close();
console.log(`ts-sdk: ${failures === 0 ? "every check passed" : `${failures} failed`}`);
process.exit(failures === 0 ? 0 : 1);
