/**
 * Quickstart: one streamed run and one unary run against a sidecar.
 *
 *   node build/examples/quickstart.js 127.0.0.1:50051
 */
import { AgentClient, AgentSidecarError, ErrorReason } from "@agent-sidecar/client";

const address = process.argv[2] ?? process.env.AGENT_SIDECAR_ADDRESS ?? "127.0.0.1:50051";
const client = new AgentClient(address);

try {
  const session = await client.createSession("default", { labels: { app: "quickstart" } });

  // Events as they happen; approvals answered by a callback.
  for await (const event of client.stream(
    session.sessionId,
    "What is the status of order 20250101, and where is its parcel?",
    {
      deadline: Date.now() + 30_000,
      onApproval: (call) => (call.destructive ? "deny" : "approve"),
    },
  )) {
    switch (event.event?.$case) {
      case "toolCallStarted":
        console.log(`-> ${event.event.value.toolName}(${event.event.value.arguments})`);
        break;
      case "toolCallFinished":
        console.log(`<- ${event.event.value.toolName}: ${event.event.value.status}`);
        break;
      case "textDelta":
        process.stdout.write(event.event.value.text);
        break;
      case "runFinished": {
        const result = event.event.value;
        console.log(`\n(${result.stopReason}, ${result.steps} steps, ${result.toolCalls} tool calls)`);
        break;
      }
      default:
        break;
    }
  }

  // Only the result.
  const { result } = await client.run(session.sessionId, "And when will it arrive?", {
    deadline: Date.now() + 30_000,
  });
  console.log(result?.answer);

  await client.deleteSession(session.sessionId);
} catch (error) {
  if (error instanceof AgentSidecarError && error.reason === ErrorReason.SESSION_BUSY) {
    console.error(`busy; retry in ${error.retryDelayMs ?? 1000} ms`);
  } else {
    throw error;
  }
} finally {
  client.close();
}
