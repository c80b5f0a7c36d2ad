import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import {
  AgentClient,
  AgentSidecarError,
  ERROR_DOMAIN,
  ErrorReason,
  OutputMode,
  StopReason,
  type StreamRunResponse,
  status,
  ToolCallStatus,
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

async function collect(events: AsyncIterable<StreamRunResponse>): Promise<StreamRunResponse[]> {
  const seen: StreamRunResponse[] = [];
  for await (const event of events) seen.push(event);
  return seen;
}

test("a streamed run yields its events in order and ends with run_finished", async () => {
  const session = await client.createSession("default");
  const events = await collect(
    client.stream(session.sessionId, "What is the status of order 20250101, and where is its parcel?", {
      deadline: Date.now() + 30_000,
    }),
  );
  assert.deepEqual(
    events.map((e) => e.sequence),
    events.map((_, i) => i + 1),
  );
  assert.equal(events[0]?.event?.$case, "runStarted");
  const last = events.at(-1)?.event;
  assert.equal(last?.$case, "runFinished");
  assert.equal(last.value.stopReason, StopReason.STOP_REASON_ANSWERED);
  assert.match(last.value.answer, /^\[simulated\]/);
  const finished = events.flatMap((e) => (e.event?.$case === "toolCallFinished" ? [e.event.value] : []));
  assert.deepEqual(finished.map((f) => f.toolName).sort(), ["get_order_status", "track_parcel"]);
  // Each call ran, or was answered from the sidecar's result cache (an earlier test may have
  // asked the same); either way it started first.
  const answered = [ToolCallStatus.TOOL_CALL_STATUS_OK, ToolCallStatus.TOOL_CALL_STATUS_CACHED];
  assert.ok(finished.every((f) => answered.includes(f.status)));
  const started = events.flatMap((e) => (e.event?.$case === "toolCallStarted" ? [e.event.value.callId] : []));
  assert.deepEqual(started.sort(), finished.map((f) => f.callId).sort());
  const text = events.flatMap((e) => (e.event?.$case === "textDelta" ? [e.event.value.text] : [])).join("");
  assert.equal(text, last.value.answer);
  assert.ok((last.value.timeline?.stages.length ?? 0) > 0);

  const stored = await client.getSession(session.sessionId);
  assert.deepEqual(
    stored.turns.map((t) => t.runId),
    [events[0]?.runId],
  );
});

test("a unary structured run answers JSON with an answer field", async () => {
  const session = await client.createSession("structured", { labels: { team: "typescript" } });
  assert.equal(session.profile, "structured");
  assert.deepEqual(session.labels, { team: "typescript" });
  const response = await client.run(session.sessionId, "Where is order 20250101?", {
    outputMode: OutputMode.OUTPUT_MODE_STRUCTURED,
    deadline: Date.now() + 30_000,
  });
  const result = response.result;
  assert.equal(result?.stopReason, StopReason.STOP_REASON_ANSWERED);
  const answer: unknown = JSON.parse(result.answer);
  assert.equal(typeof (answer as { answer?: unknown }).answer, "string");
  assert.ok(response.runId);
});

test("a deadline shorter than the answer ends the run within it, as BUDGET_EXHAUSTED", async () => {
  // The sidecar keeps a little of the caller's deadline back to deliver the result in: the
  // run stops with its timeline instead of the call failing, and the call succeeds. Only when
  // that margin is lost on the way (a loaded machine) does the deadline itself end the call.
  const session = await client.createSession();
  let response;
  try {
    response = await client.run(session.sessionId, "a slow answer please", {
      deadline: new Date(Date.now() + 1_000), // the answer takes 3 s
    });
  } catch (error) {
    assertClientDeadline(error);
    return;
  }
  assert.equal(response.result?.stopReason, StopReason.STOP_REASON_BUDGET_EXHAUSTED);
  assert.equal(response.result.error?.code, "deadline_exceeded");
  assert.equal(response.result.answer, "");
});

test("a stream's deadline ends the run within it: run_finished says BUDGET_EXHAUSTED", async () => {
  const session = await client.createSession();
  let events;
  try {
    events = await collect(
      client.stream(session.sessionId, "a slow answer please", { deadline: Date.now() + 1_000 }),
    );
  } catch (error) {
    assertClientDeadline(error); // the margin lost on the way, as above
    return;
  }
  assert.equal(events[0]?.event?.$case, "runStarted");
  const last = events.at(-1)?.event;
  assert.equal(last?.$case, "runFinished");
  assert.equal(last.value.stopReason, StopReason.STOP_REASON_BUDGET_EXHAUSTED);
  assert.ok(!events.some((e) => e.event?.$case === "textDelta"));
});

test("a deadline passed before the call fails with DEADLINE_EXCEEDED, as an AgentSidecarError", async () => {
  // A deadline already passed, not one a millisecond away: the sidecar answers a deadline it
  // cannot meet at once (BUDGET_EXHAUSTED), and that answer can beat a timer on a busy loop.
  const session = await client.createSession();
  const passed = Date.now() - 1_000;
  await assert.rejects(
    client.run(session.sessionId, "a slow answer please", { deadline: passed }),
    (error: unknown) => assertClientDeadline(error),
  );
  await assert.rejects(
    collect(client.stream(session.sessionId, "a slow answer please", { deadline: passed })),
    (error: unknown) => assertClientDeadline(error),
  );
});

function assertClientDeadline(error: unknown): true {
  assert.ok(error instanceof AgentSidecarError, String(error));
  assert.equal(error.code, status.DEADLINE_EXCEEDED);
  assert.equal(error.codeName, "DEADLINE_EXCEEDED");
  assert.equal(error.reason, undefined); // the client's own status: no ErrorInfo
  return true;
}

test("an unknown session is told by its reason, SESSION_NOT_FOUND", async () => {
  const missing = "no-such-session-4711";
  await assert.rejects(client.getSession(missing), (error: unknown) => {
    assert.ok(error instanceof AgentSidecarError);
    assert.equal(error.code, status.NOT_FOUND);
    assert.equal(error.reason, ErrorReason.SESSION_NOT_FOUND);
    assert.equal(error.domain, ERROR_DOMAIN);
    return true;
  });
});

test("a run on a busy session is told by its reason, SESSION_BUSY, with a retry delay", async () => {
  const session = await client.createSession();
  const controller = new AbortController();
  const first = client.stream(session.sessionId, "a slow answer please", { signal: controller.signal });
  try {
    const started = await first.next(); // run_started: the session is claimed
    assert.equal(started.value?.event?.$case, "runStarted");
    await assert.rejects(client.run(session.sessionId, "Where is order 20250101?"), (error: unknown) => {
      assert.ok(error instanceof AgentSidecarError);
      assert.equal(error.code, status.FAILED_PRECONDITION);
      assert.equal(error.reason, ErrorReason.SESSION_BUSY);
      assert.ok((error.retryDelayMs ?? 0) > 0, `retry delay ${error.retryDelayMs}`);
      return true;
    });
  } finally {
    await first.return(undefined); // leaving the stream cancels the slow run
  }
});

test("a session is deleted once; deleting it again reports that none existed", async () => {
  const session = await client.createSession();
  assert.equal(await client.deleteSession(session.sessionId), true);
  assert.equal(await client.deleteSession(session.sessionId), false);
  await assert.rejects(
    client.getSession(session.sessionId),
    (error: unknown) => error instanceof AgentSidecarError && error.code === status.NOT_FOUND,
  );
});

test("a session lists the tools of its profile", async () => {
  const session = await client.createSession();
  const names = (await client.listSessionTools(session.sessionId)).map((t) => t.tool?.name);
  assert.ok(names.includes("get_order_status"));
  assert.ok(names.includes("refund_order"));
});

test("the quickstart example runs against the sidecar", async () => {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const example = path.resolve(here, "..", "examples", "quickstart.js");
  const { stdout } = await promisify(execFile)(process.execPath, [example, stack.sidecar], {
    timeout: 30_000,
  });
  assert.match(stdout, /get_order_status/);
  assert.match(stdout, /\[simulated\]/);
});
