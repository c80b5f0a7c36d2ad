package dev.agentsidecar.client;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * The shared test stack ({@code python -m sidecar.testing}: the LLM simulator, the example tool
 * servers and a sidecar on them), started once for the whole test run and stopped when it ends.
 *
 * <p>Python is {@code -Dagentsidecar.python}, else {@code $AGENT_SIDECAR_PYTHON}, else the
 * repository's {@code .venv/bin/python}; the launcher runs in {@code -Dagentsidecar.repoRoot}
 * (the pom sets it to the repository root). Its stderr goes to {@code
 * target/sidecar-stack.log}.
 */
final class SidecarStack implements BeforeAllCallback {
  private static final long START_TIMEOUT_SECONDS = 90;

  /** Use with {@code @RegisterExtension static final SidecarStack STACK = new SidecarStack();}. */
  SidecarStack() {}

  private Running running;

  @Override
  public void beforeAll(ExtensionContext context) throws Exception {
    running =
        context
            .getRoot()
            .getStore(ExtensionContext.Namespace.create(SidecarStack.class))
            .getOrComputeIfAbsent(Running.class, key -> Running.start(), Running.class);
  }

  /** The sidecar's {@code host:port}. */
  String target() {
    return running.target;
  }

  /** The launcher's process, which JUnit closes at the end of the run. */
  static final class Running implements AutoCloseable {
    private final Process process;
    private final String target;

    private Running(Process process, String target) {
      this.process = process;
      this.target = target;
    }

    static Running start() {
      Path root = Path.of(System.getProperty("agentsidecar.repoRoot", "../..")).toAbsolutePath()
          .normalize();
      String python = python(root);
      Path log = Path.of("target", "sidecar-stack.log").toAbsolutePath();
      Process process;
      try {
        Files.createDirectories(log.getParent());
        process =
            new ProcessBuilder(List.of(python, "-m", "sidecar.testing"))
                .directory(root.toFile())
                .redirectError(log.toFile())
                .start();
      } catch (IOException e) {
        throw new IllegalStateException("could not start " + python + " -m sidecar.testing", e);
      }
      // Its stdin stays open: the launcher stops at EOF, so it cannot outlive this JVM. Its
      // stdout is read to the end, so that it never blocks on a full pipe.
      CompletableFuture<String> listening = new CompletableFuture<>();
      Thread reader =
          new Thread(
              () -> {
                try (BufferedReader out =
                    new BufferedReader(
                        new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                  for (String line; (line = out.readLine()) != null; ) {
                    if (line.startsWith("listening on ")) {
                      listening.complete(line.substring("listening on ".length()).trim());
                    }
                  }
                } catch (IOException e) {
                  // The process went away; the start below fails or close() reaps it.
                } finally {
                  listening.complete(null);
                }
              },
              "sidecar-stack-stdout");
      reader.setDaemon(true);
      reader.start();
      String target;
      try {
        target = listening.get(START_TIMEOUT_SECONDS, TimeUnit.SECONDS);
      } catch (InterruptedException | ExecutionException | TimeoutException e) {
        target = null;
      }
      if (target == null) {
        process.destroyForcibly();
        throw new IllegalStateException(
            "the test stack did not start within " + START_TIMEOUT_SECONDS + " s; see " + log);
      }
      return new Running(process, target);
    }

    @Override
    public void close() throws IOException {
      process.getOutputStream().close(); // EOF on its stdin: the launcher stops everything
      try {
        if (!process.waitFor(20, TimeUnit.SECONDS)) {
          process.destroy();
          if (!process.waitFor(10, TimeUnit.SECONDS)) {
            process.destroyForcibly();
          }
        }
      } catch (InterruptedException e) {
        process.destroyForcibly();
        Thread.currentThread().interrupt();
      }
    }

    private static String python(Path root) {
      String python = System.getProperty("agentsidecar.python");
      if (python == null || python.isEmpty()) {
        python = System.getenv("AGENT_SIDECAR_PYTHON");
      }
      if (python == null || python.isEmpty()) {
        python = root.resolve(".venv/bin/python").toString();
      }
      return python;
    }
  }
}
