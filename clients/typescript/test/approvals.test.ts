import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  AgentClient,
  AgentSidecarError,
  type ApprovalRequired,
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
});

after(async () => {
  client?.close();
  await stack?.stop();
});

const REFUND = "Please refund order 20250101, the parcel arrived damaged.";

function cases(events: readonly StreamRunResponse[]): string[] {
  return events.map((e) => e.event?.$case ?? "");
}

test("onApproval approves a call, which then runs and the run answers", async () => {
  const session = await client.createSession();
  const asked: ApprovalRequired[] = [];
  const events: StreamRunResponse[] = [];
  for await (const event of client.stream(session.sessionId, REFUND, {
    deadline: Date.now() + 30_000,
    onApproval: (request, context) => {
      assert.equal(context.sessionId, session.sessionId);
      assert.ok(context.runId);
      asked.push(request);
      return "approve";
    },
  })) {
    events.push(event);
  }
  assert.equal(asked.length, 1);
  assert.equal(asked[0]?.toolName, "refund_order");
  assert.equal(JSON.parse(asked[0]?.arguments ?? "{}").order_id, "20250101");
  const order = cases(events);
  const approval = order.indexOf("approvalRequired");
  const finishedAt = order.indexOf("toolCallFinished");
  assert.ok(approval >= 0 && finishedAt > approval, order.join(", "));
  const finished = events[finishedAt]?.event;
  assert.equal(finished?.$case, "toolCallFinished");
  assert.equal(finished.value.callId, asked[0]?.callId);
  assert.equal(finished.value.status, ToolCallStatus.TOOL_CALL_STATUS_OK);
  const last = events.at(-1)?.event;
  assert.equal(last?.$case, "runFinished");
  assert.equal(last.value.stopReason, StopReason.STOP_REASON_ANSWERED);
  assert.match(last.value.answer, /refund was handled/);
});

test("onApproval denies a call with a reason, and the call ends DENIED", async () => {
  const session = await client.createSession();
  const events: StreamRunResponse[] = [];
  for await (const event of client.stream(session.sessionId, REFUND, {
    deadline: Date.now() + 30_000,
    onApproval: async () => ({ decision: "deny", reason: "refunds need a ticket" }),
  })) {
    events.push(event);
  }
  const finished = events.find((e) => e.event?.$case === "toolCallFinished")?.event;
  assert.equal(finished?.$case, "toolCallFinished");
  assert.equal(finished.value.status, ToolCallStatus.TOOL_CALL_STATUS_DENIED);
  assert.equal(events.at(-1)?.event?.$case, "runFinished");
});

test("without onApproval, approve() answers the event while iterating", async () => {
  const session = await client.createSession();
  const events: StreamRunResponse[] = [];
  for await (const event of client.stream(session.sessionId, REFUND, { deadline: Date.now() + 30_000 })) {
    events.push(event);
    if (event.event?.$case === "approvalRequired") {
      await client.approve(session.sessionId, event.event.value.callId);
    }
  }
  const finished = events.find((e) => e.event?.$case === "toolCallFinished")?.event;
  assert.equal(finished?.$case, "toolCallFinished");
  assert.equal(finished.value.status, ToolCallStatus.TOOL_CALL_STATUS_OK);
});

test("approving a call nobody waits for fails NOT_FOUND", async () => {
  const session = await client.createSession();
  await assert.rejects(
    client.approve(session.sessionId, "call-that-does-not-exist"),
    (error: unknown) => error instanceof AgentSidecarError && error.code === status.NOT_FOUND,
  );
});

test("an approval handler that throws ends the stream with its own error", async () => {
  const session = await client.createSession();
  const boom = new Error("the approval service is down");
  await assert.rejects(
    (async () => {
      for await (const _ of client.stream(session.sessionId, REFUND, {
        deadline: Date.now() + 30_000,
        onApproval: () => {
          throw boom;
        },
      })) {
        // drain
      }
    })(),
    (error: unknown) => error === boom,
  );
});

test("aborting while the approval handler decides ends the stream and tells the handler", async () => {
  const session = await client.createSession();
  const controller = new AbortController();
  let handlerSignal: AbortSignal | undefined;
  await assert.rejects(
    (async () => {
      for await (const _ of client.stream(session.sessionId, REFUND, {
        signal: controller.signal,
        deadline: Date.now() + 30_000,
        onApproval: (_request, context) => {
          handlerSignal = context.signal;
          controller.abort(); // the person walked away; the handler never answers
          return new Promise<never>(() => undefined);
        },
      })) {
        // drain
      }
    })(),
    (error: unknown) => error instanceof AgentSidecarError && error.code === status.CANCELLED,
  );
  assert.equal(handlerSignal?.aborted, true);
});
