package dev.agentsidecar.toolserver;

import io.grpc.Metadata;
import java.time.Duration;
import java.util.Optional;

/**
 * What a tool is told about its call; declare a parameter of this type to get it. The call runs
 * on a thread of its own, which is interrupted when the call's deadline passes or the caller
 * cancels: blocking calls throw {@link InterruptedException}, and loops can check {@link
 * #isCancelled()}.
 */
public interface ToolContext {
  /** The caller's id for the call (the model's tool-call id when the sidecar calls). */
  String callId();

  /** The tool's name. */
  String toolName();

  /** The gRPC metadata the caller sent (trace context, tenant...). */
  Metadata metadata();

  /** Time left before the call's deadline; empty when the caller set none. */
  Optional<Duration> timeRemaining();

  /** True once the deadline passed or the caller cancelled. */
  boolean isCancelled();

  /**
   * Sends a {@code ToolProgress} to a {@code StreamTool} caller; does nothing on {@code
   * CallTool}.
   */
  void reportProgress(double progress, double total, String message);
}
