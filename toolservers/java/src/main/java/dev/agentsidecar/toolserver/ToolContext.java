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

  /**
   * Who the call serves. With identity verification configured ({@link
   * ServeOptions#withIdentity}) it is the identity the sidecar's signed assertion proves ({@code
   * verified} true), checked before the tool ran; otherwise the plain metadata's, which anything
   * that reaches the server could have sent ({@code verified} false).
   *
   * <p>This default reads the plain metadata, so that a context made for a unit test has one.
   *
   * @throws ToolFailure the identity metadata is malformed (a key twice, labels that are no JSON):
   *     it did not come from a sidecar as sent; uncaught, the call's result says so
   */
  default CallerIdentity identity() {
    try {
      return IdentityMetadata.plain(metadata(), callId());
    } catch (IdentityMetadata.Malformed e) {
      throw new ToolFailure("the call's identity metadata is malformed: " + e.getMessage());
    }
  }

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
