package dev.agentsidecar.toolserver;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Semaphore;

/**
 * A tool server run as its own process by the lifecycle tests: {@code hold} runs until a line
 * arrives on stdin, so a test can have a call running while it sends SIGTERM.
 */
public final class FixtureServer {
  private static final Semaphore RELEASES = new Semaphore(0);

  @Tool(name = "hold", description = "Run until released through stdin.")
  public String hold(ToolContext context) throws InterruptedException {
    context.reportProgress(0, 1, "holding");
    RELEASES.acquire();
    return "released";
  }

  @Tool(name = "ping", description = "Answer pong.")
  public String ping() {
    return "pong";
  }

  @Tool(name = "whoami", description = "Answer who the call serves and whether it was verified.")
  public String whoami(ToolContext context) {
    return context.identity().principal() + " " + context.identity().verified();
  }

  public static void main(String[] args) {
    Thread stdin = new Thread(() -> {
      try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
        while (in.readLine() != null) {
          RELEASES.release();
        }
      } catch (java.io.IOException e) {
        // the test went away
      }
    });
    stdin.setDaemon(true);
    stdin.start();
    new ToolServer("fixture").register(new FixtureServer()).main(args);
  }
}
