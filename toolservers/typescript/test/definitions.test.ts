// Declaring tools: what the descriptor says, the safe defaults, and mistakes refused with a
// message that says how to fix them, when the tool is registered.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ToolDefinitionError, type ToolDefinition, ToolServer, ToolServerError } from "@agent-sidecar/toolserver";

import { serving } from "./support.js";

const object = (properties: object, required: string[] = []) => ({ type: "object", properties, required });
const noop = () => "ok";

test("ListTools reports each schema and descriptor fact", async () => {
  const server = new ToolServer("facts", { version: "7" });
  server.tool(
    {
      name: "reserve_stock",
      description: "  Reserve stock of a SKU.  ",
      input: object({ sku: { type: "string" }, quantity: { type: "integer" } }, ["sku", "quantity"]),
      output: object({ reserved: { type: "integer" }, left: { type: "integer" } }),
      idempotent: true,
      destructive: true,
      requiresApproval: true,
      readKeys: ["warehouse"],
      writeKeys: ["sku:{sku}"],
      timeout: 2.5,
      version: "3",
      resultFields: ["reserved"],
    },
    noop,
  );
  server.tool({ name: "lookup", description: "Look a SKU up.", input: object({ sku: { type: "string" } }), readOnly: true, cacheTtl: 30 }, noop);
  const { tools, close } = await serving(server);
  try {
    const { tools: listed, tool_set_version } = await tools.listTools();
    assert.match(tool_set_version, /^[0-9a-f]{16}$/);
    const [reserve, lookup] = listed;
    assert.equal(reserve?.name, "reserve_stock");
    assert.equal(reserve?.description, "Reserve stock of a SKU.");
    assert.deepEqual(JSON.parse(reserve?.input_schema ?? ""), {
      ...object({ sku: { type: "string" }, quantity: { type: "integer" } }, ["sku", "quantity"]),
      additionalProperties: false,
    });
    assert.deepEqual(JSON.parse(reserve?.output_schema ?? "").properties.left, { type: "integer" });
    assert.equal(reserve?.read_only, false);
    assert.equal(reserve?.idempotent, true);
    assert.equal(reserve?.destructive, true);
    assert.equal(reserve?.requires_approval, true);
    assert.deepEqual(reserve?.read_keys, ["warehouse"]);
    assert.deepEqual(reserve?.write_keys, ["sku:{sku}"]);
    assert.deepEqual(reserve?.default_timeout, { seconds: "2", nanos: 500_000_000 });
    assert.equal(reserve?.cache_ttl, null);
    assert.equal(reserve?.version, "3");
    assert.deepEqual(reserve?.result_fields, ["reserved"]);
    assert.equal(lookup?.read_only, true);
    assert.deepEqual(lookup?.cache_ttl, { seconds: "30", nanos: 0 });
    assert.equal(lookup?.version, "7");
    assert.equal(lookup?.output_schema, "");
    // The same tools answer with the same version; any change makes another.
    const again = new ToolServer("facts", { version: "7" });
    for (const tool of server.tools) again.tool(tool, noop);
    const same = await serving(again);
    const changed = new ToolServer("facts", { version: "8" });
    for (const tool of server.tools) changed.tool({ ...tool, version: undefined }, noop);
    const other = await serving(changed);
    try {
      assert.equal((await same.tools.listTools()).tool_set_version, tool_set_version);
      assert.notEqual((await other.tools.listTools()).tool_set_version, tool_set_version);
    } finally {
      same.close();
      other.close();
    }
  } finally {
    close();
  }
});

test("descriptor facts default to the safe choices", () => {
  const server = new ToolServer("defaults");
  server.tool({ name: "plain", description: "Do a thing." }, noop);
  const [tool] = server.tools;
  assert.deepEqual(
    { ...tool, handler: undefined },
    {
      name: "plain",
      description: "Do a thing.",
      input: { type: "object", properties: {}, additionalProperties: false },
      output: undefined,
      readOnly: false,
      idempotent: false,
      destructive: false,
      requiresApproval: false,
      readKeys: [],
      writeKeys: [],
      timeout: undefined,
      cacheTtl: undefined,
      version: "",
      resultFields: [],
      handler: undefined,
    },
  );
});

test("a schema's own additionalProperties is kept", () => {
  const server = new ToolServer("open");
  server.tool({ name: "open", description: "Take anything.", input: { type: "object", additionalProperties: true } }, noop);
  assert.equal(server.tools[0]?.input.additionalProperties, true);
});

const mistakes: [string, ToolDefinition, RegExp][] = [
  ["a bad name", { name: "get order", description: "x" }, /invalid name; use 1 to 64 characters/],
  ["a long name", { name: "x".repeat(65), description: "x" }, /invalid name/],
  ["no description", { name: "t", description: "  " }, /no description; say what the tool does/],
  ["a root that is no object", { name: "t", description: "x", input: { type: "string" } }, /root must be \{type: "object", \.\.\.\}/],
  ["required naming no property", { name: "t", description: "x", input: object({ a: {} }, ["b"]) }, /required names "b"/],
  ["cacheTtl without readOnly", { name: "t", description: "x", cacheTtl: 5 }, /cacheTtl needs readOnly: true/],
  ["readOnly and destructive", { name: "t", description: "x", readOnly: true, destructive: true }, /both readOnly and destructive/],
  ["readOnly with writeKeys", { name: "t", description: "x", readOnly: true, writeKeys: ["k"] }, /readOnly tool cannot declare writeKeys/],
  ["a key naming no argument", { name: "t", description: "x", input: object({ sku: {} }), readKeys: ["sku:{id}"] }, /uses \{id\}, but a placeholder must name a top-level argument, one of \["sku"\]/],
  ["keys as one string", { name: "t", description: "x", writeKeys: "sku" as unknown as string[] }, /writeKeys takes a list of keys, got the string "sku"; write writeKeys: \["sku"\]/],
  ["a timeout that is not positive", { name: "t", description: "x", timeout: 0 }, /timeout is a positive number of seconds/],
  ["a result field the output lacks", { name: "t", description: "x", output: object({ status: {} }), resultFields: ["eta"] }, /resultFields entry "eta" names no field/],
  ["a schema that does not compile", { name: "t", description: "x", input: { type: "object", properties: { a: { type: "colour" } } } }, /the input schema does not compile/],
];

for (const [what, definition, message] of mistakes) {
  test(`a declaration mistake is refused with a helpful error: ${what}`, () => {
    const server = new ToolServer("mistakes");
    let error: unknown;
    try {
      server.tool(definition, noop);
    } catch (caught) {
      error = caught;
    }
    assert.ok(error instanceof ToolDefinitionError, `${what}: ${String(error)}`);
    assert.match(error.message, message);
  });
}

test("a handler that is no function is refused", () => {
  assert.throws(() => new ToolServer("s").tool({ name: "t", description: "x" }, "nope" as never), /no handler; pass a function/);
});

test("registering two tools under one name fails", () => {
  const server = new ToolServer("twice");
  server.tool({ name: "t", description: "x" }, noop);
  assert.throws(() => server.tool({ name: "t", description: "y" }, noop), /already registered on server "twice"; tool names must be unique/);
});

test("tools cannot be added once the server listens", async () => {
  const server = new ToolServer("late");
  const running = await server.listen({ logLevel: "error" });
  try {
    assert.throws(() => server.tool({ name: "t", description: "x" }, noop), /serving already/);
  } finally {
    running.stop();
  }
});

test("declaration errors belong to the package's error tree", () => {
  const error = new ToolDefinitionError("x");
  assert.ok(error instanceof ToolServerError && error instanceof Error);
  assert.equal(error.name, "ToolDefinitionError");
});

test("inconsistent serve options are refused before anything listens", async () => {
  const server = new ToolServer("options");
  await assert.rejects(server.listen({ tlsCertFile: "a.pem" }), /tlsCertFile and tlsKeyFile go together/);
  await assert.rejects(server.listen({ token: " " }), /token is empty/);
  await assert.rejects(server.listen({ port: 70000 }), /port must be an integer from 0 to 65535/);
});
