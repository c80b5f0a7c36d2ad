package dev.agentsidecar.toolserver;

import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;

/** Tools for the tests; latches let a test wait for what happens inside a handler. */
public final class Fixtures {
  public enum Priority { LOW, HIGH }

  public record Line(@Arg(description = "The SKU") String sku, int quantity) {}

  public record Summary(int lines, int units, Priority priority) {}

  static final Map<String, CountDownLatch> STARTED = new ConcurrentHashMap<>();
  static final Map<String, CountDownLatch> INTERRUPTED = new ConcurrentHashMap<>();
  static final Map<String, CountDownLatch> RELEASE = new ConcurrentHashMap<>();
  static volatile ToolContext lastContext;
  static volatile int reserveRuns;

  static CountDownLatch latch(Map<String, CountDownLatch> map, String key) {
    return map.computeIfAbsent(key, k -> new CountDownLatch(1));
  }

  @Tool(name = "echo_int", description = "Return the integer it was given.")
  public java.math.BigInteger echoInt(java.math.BigInteger value) {
    return value;
  }

  @Tool(name = "reserve", description = "Reserve stock of a SKU.", writeKeys = "sku:{sku}", idempotent = true)
  public Map<String, Object> reserve(@Arg(description = "The SKU to reserve") String sku, int quantity) {
    reserveRuns++;
    if (quantity < 1) {
      throw new ToolFailure("reserve at least one unit");
    }
    return Map.of("sku", sku, "reserved", quantity);
  }

  @Tool(name = "order", description = "Place an order of several lines.")
  public Summary order(List<Line> lines, Optional<Priority> priority) {
    return new Summary(lines.size(), lines.stream().mapToInt(Line::quantity).sum(), priority.orElse(Priority.LOW));
  }

  @Tool(name = "explode", description = "Throw an IllegalStateException.")
  public String explode() {
    throw new IllegalStateException("the value is out of range");
  }

  @Tool(name = "hold", description = "Wait until released, interrupted or the deadline.", readOnly = true, cacheTtlSeconds = 30, timeoutSeconds = 2.5)
  public String hold(String key, ToolContext context) throws InterruptedException {
    latch(STARTED, key).countDown();
    try {
      latch(RELEASE, key).await();
    } catch (InterruptedException e) {
      latch(INTERRUPTED, key).countDown();
      throw e;
    }
    return "released " + key;
  }

  @Tool(name = "count", description = "Report progress to a total, then answer.")
  public String count(int to, ToolContext context) {
    for (int done = 1; done <= to; done++) {
      context.reportProgress(done, to, done + " of " + to);
    }
    return "counted to " + to;
  }

  @Tool(name = "context", description = "Describe the call's context.")
  public String context(ToolContext context) {
    lastContext = context;
    return context.callId() + " " + context.toolName() + " " + context.timeRemaining().isPresent();
  }
}
