package dev.agentsidecar.client;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.agentsidecar.examples.Quickstart;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** The quickstart example, run against the real stack. */
class QuickstartTest {
  @RegisterExtension static final SidecarStack STACK = new SidecarStack();

  @Test
  void theQuickstartHoldsAConversationAndReadsAnErrorsCode() {
    ByteArrayOutputStream printed = new ByteArrayOutputStream();
    try (AgentClient client = AgentClient.connect(STACK.target());
        PrintStream out = new PrintStream(printed, true, StandardCharsets.UTF_8)) {
      Quickstart.run(client, out);
    }
    String text = printed.toString(StandardCharsets.UTF_8);

    assertTrue(text.contains("-> get_order_status"), text);
    assertTrue(text.contains("<- track_parcel TOOL_CALL_STATUS_OK"), text);
    assertTrue(text.contains("[simulated]"), text);
    assertTrue(text.contains("stop STOP_REASON_ANSWERED, 2 tool calls"), text);
    assertTrue(text.contains("answer "), text);
    assertTrue(text.contains("error NOT_FOUND"), text);
  }
}
