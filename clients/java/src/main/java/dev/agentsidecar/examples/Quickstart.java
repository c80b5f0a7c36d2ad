package dev.agentsidecar.examples;

import dev.agentsidecar.client.AgentClient;
import dev.agentsidecar.client.AgentSidecarException;
import dev.agentsidecar.client.Approval;
import dev.agentsidecar.client.RunStream;
import dev.agentsidecar.v1.RunResponse;
import dev.agentsidecar.v1.RunResult;
import dev.agentsidecar.v1.Session;
import dev.agentsidecar.v1.StreamRunResponse;
import java.io.PrintStream;
import java.time.Duration;

/**
 * A first conversation with a sidecar: a streamed turn with its tool calls, a unary turn, an
 * approval policy, and an error read by its reason.
 *
 * <pre>
 * mvn -q compile exec:java -Dexec.args=127.0.0.1:50051
 * </pre>
 */
public final class Quickstart {
  private Quickstart() {}

  public static void main(String[] args) {
    String target = args.length > 0 ? args[0] : "127.0.0.1:50051";
    try (AgentClient client = AgentClient.connect(target)) {
      run(client, System.out);
    }
  }

  /** The quickstart's conversation, printed to {@code out}. */
  public static void run(AgentClient client, PrintStream out) {
    AgentClient agent = client.withTimeout(Duration.ofSeconds(30));
    Session session = agent.createSession("default");
    out.println("session " + session.getSessionId());

    // A streamed turn: tool calls and answer text as they happen. Tools that need approval
    // ask the handler; this one lets read-only work through and denies anything destructive.
    String question = "What is the status of order 20250101, and where is its parcel?";
    try (RunStream events =
        agent.stream(
            session.getSessionId(),
            question,
            request ->
                request.getDestructive()
                    ? Approval.deny("the quickstart changes nothing")
                    : Approval.approve())) {
      for (StreamRunResponse event : events) {
        switch (event.getEventCase()) {
          case TOOL_CALL_STARTED -> out.println("-> " + event.getToolCallStarted().getToolName());
          case TOOL_CALL_FINISHED ->
              out.println(
                  "<- " + event.getToolCallFinished().getToolName()
                      + " " + event.getToolCallFinished().getStatus());
          case TEXT_DELTA -> out.print(event.getTextDelta().getText());
          case RUN_FINISHED -> {
            RunResult result = event.getRunFinished();
            out.println();
            out.println("stop " + result.getStopReason() + ", " + result.getToolCalls()
                + " tool calls, " + result.getUsage().getCompletionTokens() + " tokens");
          }
          default -> {}
        }
      }
    }

    // A unary turn: only the result.
    RunResponse reply = agent.run(session.getSessionId(), "Thanks. Anything else I should know?");
    out.println("answer " + reply.getResult().getAnswer());

    // Errors carry a stable reason: branch on it, never on the message.
    try {
      agent.getSession("no-such-session");
    } catch (AgentSidecarException e) {
      out.println("error " + e.code() + " " + (e.reason().isEmpty() ? "(no reason)" : e.reason()));
    }
  }
}
