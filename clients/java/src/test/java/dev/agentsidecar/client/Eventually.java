package dev.agentsidecar.client;

import java.time.Duration;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Supplier;

/** Waits for a condition that only polling can observe, within a bound. */
final class Eventually {
  private static final Duration POLL = Duration.ofMillis(20);

  private Eventually() {}

  /** The first non-null value {@code probe} returns within {@code limit}. */
  static <T> T get(Duration limit, Supplier<T> probe) {
    long deadline = System.nanoTime() + limit.toNanos();
    while (true) {
      T value = probe.get();
      if (value != null) {
        return value;
      }
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("not within " + limit);
      }
      LockSupport.parkNanos(POLL.toNanos());
    }
  }
}
