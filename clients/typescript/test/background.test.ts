import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  AgentClient,
  AgentSidecarError,
  ErrorReason,
  RunState,
  type StreamRunResponse,
  status,
} from "@agent-sidecar/client";

import { type Stack, startStack } from "./stack.js";

let stack: Stack;
let client: AgentClient;

before(async () => {
  stack = await startStack();
  client = new AgentClient(stack.sidecar);
  await client.waitForReady(Date.now() + 10_000);
});

after(async () => {
  client?.close();
  await stack?.stop();
});

const ORDER_QUESTION = "What is the status of order 20250101, and where is its parcel?";

test("a background run is watched again from where its watcher left off", async () => {
  const session = await client.createSession("default");
  const run = await client.startRun(session.sessionId, ORDER_QUESTION);
  assert.equal(run.state, RunState.RUN_STATE_SUBMITTED);
  assert.ok(run.runId);
  const seen: StreamRunResponse[] = [];
  for await (const event of client.watchRun(run.runId, { deadline: Date.now() + 30_000 })) {
    seen.push(event);
    if (seen.length === 2) break; // the watcher leaves; the run goes on
  }
  for await (const event of client.watchRun(run.runId, {
    afterSequence: seen.at(-1)?.sequence ?? 0,
    deadline: Date.now() + 30_000,
  })) {
    seen.push(event);
  }
  assert.deepEqual(
    seen.map((e) => e.sequence),
    seen.map((_, i) => i + 1),
  );
  assert.equal(seen[0]?.event?.$case, "runStarted");
  const last = seen.at(-1)?.event;
  assert.equal(last?.$case, "runFinished");
  const got = await client.getRun(run.runId);
  assert.equal(got.state, RunState.RUN_STATE_COMPLETED);
  assert.equal(got.result?.answer, last.value.answer);
  const listed = await client.listRuns(session.sessionId);
  assert.deepEqual(
    listed.runs.map((r) => r.runId),
    [run.runId],
  );
  assert.equal(listed.nextPageToken, "");
});

test("cancelling a background run stops it, and a retry returns it as it is", async () => {
  const session = await client.createSession("default");
  const run = await client.startRun(session.sessionId, "slow answer");
  const cancelled = await client.cancelRun(run.runId);
  assert.equal(cancelled.state, RunState.RUN_STATE_CANCELED);
  assert.equal(cancelled.result?.error?.code, "cancelled");
  assert.equal((await client.cancelRun(run.runId)).state, RunState.RUN_STATE_CANCELED);
});

test("a startRun with a requestId is safe to retry, and its key is the run's", async () => {
  const session = await client.createSession("default");
  const requestId = `ts-${session.sessionId}`;
  const run = await client.startRun(session.sessionId, ORDER_QUESTION, { requestId });
  const again = await client.startRun(session.sessionId, ORDER_QUESTION, { requestId });
  assert.equal(again.runId, run.runId);
  assert.equal(again.requestId, requestId);
  await assert.rejects(client.startRun(session.sessionId, "another input", { requestId }), (error: unknown) => {
    assert.ok(error instanceof AgentSidecarError);
    assert.equal(error.code, status.ALREADY_EXISTS);
    assert.equal(error.reason, ErrorReason.REQUEST_ID_REUSED);
    return true;
  });
  await client.cancelRun(run.runId);
});

test("an unknown run is RUN_NOT_FOUND for every call", async () => {
  const calls: Array<() => Promise<unknown>> = [
    () => client.getRun("no-such-run"),
    () => client.cancelRun("no-such-run"),
    async () => {
      for await (const _ of client.watchRun("no-such-run")) {
        // no event
      }
    },
  ];
  for (const call of calls) {
    await assert.rejects(call(), (error: unknown) => {
      assert.ok(error instanceof AgentSidecarError);
      assert.equal(error.code, status.NOT_FOUND);
      assert.equal(error.reason, ErrorReason.RUN_NOT_FOUND);
      return true;
    });
  }
});
