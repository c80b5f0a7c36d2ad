// Calls through real gRPC on 127.0.0.1: results, the two error channels, deadlines,
// cancellation, progress and the call's context.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import * as grpc from "@grpc/grpc-js";

import { ToolFailure, ToolServer, type ToolContext } from "@agent-sidecar/toolserver";

import { deferred, serving, statusOf, type Tools, within } from "./support.js";

const started = new Map<string, ReturnType<typeof deferred<AbortSignal>>>();
const aborted = new Map<string, ReturnType<typeof deferred<unknown>>>();
const gates = new Map<string, ReturnType<typeof deferred<unknown>>>();
const seen: { ran: string[]; context?: Omit<ToolContext, "reportProgress" | "timeRemaining" | "signal"> & { remaining?: number } } = { ran: [] };

function slot<T>(map: Map<string, ReturnType<typeof deferred<T>>>, key: string) {
  let entry = map.get(key);
  if (!entry) {
    entry = deferred<T>();
    map.set(key, entry);
  }
  return entry;
}

const server = new ToolServer("fixtures", { version: "test" });
server
  .tool(
    {
      name: "echo_int",
      description: "Return the integer it was given.",
      input: { type: "object", properties: { value: { type: "integer" } }, required: ["value"] },
    },
    ({ value }: { value: number | bigint }) => value,
  )
  .tool({ name: "nothing", description: "Take no arguments and say so." }, () => "no arguments")
  .tool(
    {
      name: "reserve",
      description: "Reserve stock of a SKU.",
      input: {
        type: "object",
        properties: { sku: { type: "string", minLength: 1 }, quantity: { type: "integer", minimum: 1 } },
        required: ["sku", "quantity"],
      },
    },
    ({ sku, quantity }: { sku: string; quantity: number }) => {
      seen.ran.push(sku);
      return { sku, reserved: quantity };
    },
  )
  .tool(
    {
      name: "order",
      description: "Place an order of several lines.",
      input: {
        type: "object",
        properties: {
          lines: {
            type: "array",
            items: {
              type: "object",
              properties: { sku: { type: "string" }, quantity: { type: "integer", minimum: 1 } },
              required: ["sku", "quantity"],
              additionalProperties: false,
            },
          },
          priority: { enum: ["low", "high"] },
        },
        required: ["lines"],
      },
    },
    ({ lines, priority = "low" }: { lines: { sku: string; quantity: number }[]; priority?: string }) => ({
      lines: lines.length,
      units: lines.reduce((sum, line) => sum + line.quantity, 0),
      priority,
    }),
  )
  .tool({ name: "explode", description: "Throw a RangeError." }, () => {
    throw new RangeError("the value is out of range");
  })
  .tool({ name: "refuse", description: "Fail with a ToolFailure." }, () => {
    throw new ToolFailure("order 1 does not exist");
  })
  .tool({ name: "circular", description: "Return a value JSON cannot encode." }, () => {
    const value: { self?: unknown } = {};
    value.self = value;
    return value;
  })
  .tool(
    {
      name: "hold",
      description: "Wait until released or stopped.",
      input: { type: "object", properties: { key: { type: "string" } }, required: ["key"] },
    },
    async ({ key }: { key: string }, { signal }) => {
      slot(started, key).resolve(signal);
      signal.addEventListener("abort", () => slot(aborted, key).resolve(signal.reason), { once: true });
      await Promise.race([slot(gates, key).promise, new Promise((resolve) => signal.addEventListener("abort", resolve))]);
      return `released ${key}`;
    },
  )
  .tool(
    {
      name: "count",
      description: "Report progress to a total, then answer.",
      input: { type: "object", properties: { to: { type: "integer", minimum: 0 } }, required: ["to"] },
    },
    async ({ to }: { to: number }, context) => {
      for (let done = 1; done <= to; done += 1) await context.reportProgress(done, to, `${done} of ${to}`);
      return `counted to ${to}`;
    },
  )
  .tool({ name: "context", description: "Describe the call's context." }, (_args, context) => {
    seen.context = {
      callId: context.callId,
      toolName: context.toolName,
      deadline: context.deadline,
      metadata: context.metadata,
      identity: context.identity,
      remaining: context.timeRemaining(),
    };
    return "described";
  });

let tools: Tools;
let close: () => void;

before(async () => {
  ({ tools, close } = await serving(server));
});
after(() => close());

test("a call returns the output and echoes the call id", async () => {
  const result = await tools.call("reserve", { sku: "X-100", quantity: 2 }, { call_id: "call-7" });
  assert.equal(result.call_id, "call-7");
  assert.deepEqual(JSON.parse(result.output ?? ""), { sku: "X-100", reserved: 2 });
});

test("handler_duration is filled in", async () => {
  const result = await tools.call("reserve", { sku: "X-101", quantity: 1 });
  const { seconds, nanos } = result.handler_duration ?? { seconds: "0", nanos: 0 };
  assert.ok(Number(seconds) > 0 || nanos > 0, JSON.stringify(result.handler_duration));
});

test("a string output is sent as is", async () => {
  const result = await tools.call("nothing", "");
  assert.equal(result.output, "no arguments");
});

test("large integers survive the round trip exactly", async () => {
  for (const big of ["123456789012345678901234567890", "-9007199254740993", "42"]) {
    const result = await tools.call("echo_int", `{"value": ${big}}`);
    assert.equal(result.output, big);
  }
});

test("empty arguments mean no arguments", async () => {
  assert.equal((await tools.call("nothing", "")).output, "no arguments");
  assert.equal((await tools.call("nothing", "{}")).output, "no arguments");
});

test("arguments violating the schema are an invalid-arguments result naming each field, and the handler never runs", async () => {
  const before = seen.ran.length;
  const result = await tools.call("reserve", { quantity: 0, colour: "red" });
  assert.equal(result.error?.kind, "TOOL_ERROR_KIND_INVALID_ARGUMENTS");
  const message = result.error?.message ?? "";
  assert.match(message, /^Invalid arguments for reserve:$/m);
  assert.match(message, /^- sku: required argument is missing; expected string$/m);
  assert.match(message, /^- quantity: must be >= 1; got 0$/m);
  assert.match(message, /^- colour: unknown argument; reserve takes: sku, quantity$/m);
  assert.match(message, /^Call reserve again with corrected arguments\.$/m);
  const wrongType = await tools.call("reserve", { sku: 7, quantity: "two" });
  assert.match(wrongType.error?.message ?? "", /^- sku: must be string; got 7$/m);
  assert.match(wrongType.error?.message ?? "", /^- quantity: must be integer; got "two"$/m);
  assert.equal(seen.ran.length, before);
});

test("nested argument errors name the path to the field", async () => {
  const result = await tools.call("order", { lines: [{ sku: "A", quantity: 1 }, { sku: "B", quantity: 0, gift: true }], priority: "urgent" });
  const message = result.error?.message ?? "";
  assert.match(message, /^- lines\[1\]\.quantity: must be >= 1; got 0$/m);
  assert.match(message, /^- lines\[1\]\.gift: unknown field; remove it$/m);
  assert.match(message, /^- priority: must be equal to one of the allowed values; got "urgent"$/m);
});

test("valid nested arguments reach the tool", async () => {
  const result = await tools.call("order", { lines: [{ sku: "A", quantity: 2 }, { sku: "B", quantity: 3 }], priority: "high" });
  assert.deepEqual(JSON.parse(result.output ?? ""), { lines: 2, units: 5, priority: "high" });
});

test("arguments that are not a JSON object fail with INVALID_ARGUMENT", async () => {
  for (const text of ["[1]", "null", '"text"', "{broken", "12"]) {
    const error = await statusOf(tools.call("reserve", text));
    assert.equal(error.code, grpc.status.INVALID_ARGUMENT, text);
    assert.match(error.details, /^reserve: arguments must be a JSON object/, text);
  }
});

test("an unknown tool fails with NOT_FOUND listing the tools", async () => {
  const error = await statusOf(tools.call("no_such_tool", {}));
  assert.equal(error.code, grpc.status.NOT_FOUND);
  assert.match(error.details, /unknown tool "no_such_tool"; this server offers: echo_int, nothing, reserve/);
});

test("an empty tool name fails with INVALID_ARGUMENT", async () => {
  const error = await statusOf(tools.call("", {}));
  assert.equal(error.code, grpc.status.INVALID_ARGUMENT);
  assert.equal(error.details, "tool_name is empty");
});

test("an error thrown in a tool is an execution-failed result with its name and message", async () => {
  const result = await tools.call("explode", {});
  assert.deepEqual(result.error, { kind: "TOOL_ERROR_KIND_EXECUTION_FAILED", message: "RangeError: the value is out of range" });
});

test("a ToolFailure reaches the model with exactly its message", async () => {
  const result = await tools.call("refuse", {});
  assert.deepEqual(result.error, { kind: "TOOL_ERROR_KIND_EXECUTION_FAILED", message: "order 1 does not exist" });
});

test("an output JSON cannot encode is an execution-failed result", async () => {
  const result = await tools.call("circular", {});
  assert.equal(result.error?.kind, "TOOL_ERROR_KIND_EXECUTION_FAILED");
  assert.match(result.error?.message ?? "", /^circular returned a value that cannot be encoded as JSON/);
});

test("a passed deadline fails the call with DEADLINE_EXCEEDED and aborts the handler's signal", async () => {
  const pending = statusOf(tools.call("hold", { key: "deadline" }, { deadline: Date.now() + 300 }));
  await within(slot(started, "deadline").promise, 10_000, "the handler's start");
  const error = await within(pending);
  assert.equal(error.code, grpc.status.DEADLINE_EXCEEDED);
  await within(slot(aborted, "deadline").promise, 10_000, "the abort");
});

test("a caller cancelling aborts the handler's signal", async () => {
  const call = tools.stream("hold", { key: "cancel" });
  call.on("error", () => undefined);
  await within(slot(started, "cancel").promise, 10_000, "the handler's start");
  call.cancel();
  await within(slot(aborted, "cancel").promise, 10_000, "the abort");
});

test("StreamTool sends progress reports, then exactly one result", async () => {
  const messages: { event: string; progress?: { progress: number; total: number; message: string }; result?: { output?: string } }[] = [];
  for await (const message of tools.stream("count", { to: 3 })) messages.push(message);
  assert.deepEqual(
    messages.map((m) => m.event),
    ["progress", "progress", "progress", "result"],
  );
  assert.deepEqual(messages[1]?.progress, { progress: 2, total: 3, message: "2 of 3" });
  assert.equal(messages[3]?.result?.output, "counted to 3");
});

test("StreamTool without progress sends only the result", async () => {
  const messages = [];
  for await (const message of tools.stream("nothing", {})) messages.push(message);
  assert.deepEqual(messages.map((m) => m.event), ["result"]);
});

test("progress on CallTool is dropped and the result still arrives", async () => {
  assert.equal((await tools.call("count", { to: 3 })).output, "counted to 3");
});

test("StreamTool reports an unknown tool as NOT_FOUND", async () => {
  const error = await statusOf(
    (async () => {
      for await (const _ of tools.stream("no_such_tool", {})) void _;
    })(),
  );
  assert.equal(error.code, grpc.status.NOT_FOUND);
});

test("the context exposes the call id, tool name, deadline, metadata and identity", async () => {
  const metadata = new grpc.Metadata();
  metadata.set("x-tenant", "acme");
  metadata.set("x-agent-principal", "alice");
  const deadline = Date.now() + 30_000;
  await tools.call("context", {}, { call_id: "ctx-1", deadline, metadata });
  const context = seen.context;
  assert.equal(context?.callId, "ctx-1");
  assert.equal(context?.toolName, "context");
  assert.ok(context?.deadline !== undefined && Math.abs(context.deadline - deadline) < 1000, String(context?.deadline));
  assert.ok(context?.remaining !== undefined && context.remaining > 20_000 && context.remaining <= 30_000);
  assert.deepEqual(context?.metadata.get("x-tenant"), ["acme"]);
  assert.deepEqual(
    [context?.identity.principal, context?.identity.callId, context?.identity.verified, context?.identity.labelsOmitted],
    ["alice", "ctx-1", false, false],
  );
});

test("calls run concurrently: one held call does not hold up another", async () => {
  const held = tools.call("hold", { key: "concurrent" });
  await within(slot(started, "concurrent").promise, 10_000, "the held call's start");
  assert.equal((await tools.call("nothing", {})).output, "no arguments");
  slot(gates, "concurrent").resolve(undefined);
  assert.equal((await held).output, "released concurrent");
});
