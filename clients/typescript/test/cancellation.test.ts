import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { AgentClient, AgentSidecarError, StopReason, status } from "@agent-sidecar/client";

import { eventually, type Stack, startStack } from "./stack.js";

let stack: Stack;
let client: AgentClient;

before(async () => {
  stack = await startStack();
  client = new AgentClient(stack.sidecar);
});

after(async () => {
  client?.close();
  await stack?.stop();
});

async function turnRecorded(sessionId: string): Promise<boolean> {
  return (await client.getSession(sessionId)).turns.length > 0;
}

test("aborting a stream mid-answer cancels the run, and the session takes a new run", async () => {
  const session = await client.createSession();
  const controller = new AbortController();
  const seen: string[] = [];
  await assert.rejects(
    (async () => {
      for await (const event of client.stream(session.sessionId, "a slow answer please", {
        signal: controller.signal,
        deadline: Date.now() + 30_000,
      })) {
        seen.push(event.event?.$case ?? "");
        if (event.event?.$case === "runStarted") controller.abort(); // the model is still thinking
      }
    })(),
    (error: unknown) => {
      assert.ok(error instanceof AgentSidecarError);
      assert.equal(error.code, status.CANCELLED);
      return true;
    },
  );
  assert.deepEqual(seen, ["runStarted"]);

  await eventually(() => turnRecorded(session.sessionId));
  const stored = await client.getSession(session.sessionId);
  assert.equal(stored.turns[0]?.stopReason, StopReason.STOP_REASON_CANCELLED);

  const next = await client.run(session.sessionId, "Where is order 20250101?", {
    deadline: Date.now() + 30_000,
  });
  assert.equal(next.result?.stopReason, StopReason.STOP_REASON_ANSWERED);
});

test("aborting a unary run in flight fails it with CANCELLED", async () => {
  const session = await client.createSession();
  const controller = new AbortController();
  const running = client.run(session.sessionId, "a slow answer please", { signal: controller.signal });
  controller.abort(); // the call has started; its answer is 3 s away
  await assert.rejects(running, (error: unknown) => {
    assert.ok(error instanceof AgentSidecarError);
    assert.equal(error.code, status.CANCELLED);
    return true;
  });
});

test("a signal aborted before the call fails it at once, without sending it", async () => {
  const session = await client.createSession();
  const signal = AbortSignal.abort(new Error("not wanted any more"));
  await assert.rejects(client.run(session.sessionId, "Where is order 20250101?", { signal }), (error: unknown) => {
    assert.ok(error instanceof AgentSidecarError);
    assert.equal(error.code, status.CANCELLED);
    assert.equal((error.cause as Error).message, "not wanted any more");
    return true;
  });
  assert.equal((await client.getSession(session.sessionId)).turns.length, 0);
});

test("leaving a stream early cancels its run", async () => {
  const session = await client.createSession();
  for await (const event of client.stream(session.sessionId, "a slow answer please")) {
    if (event.event?.$case === "runStarted") break;
  }
  await eventually(() => turnRecorded(session.sessionId));
  const stored = await client.getSession(session.sessionId);
  assert.equal(stored.turns[0]?.stopReason, StopReason.STOP_REASON_CANCELLED);
});
