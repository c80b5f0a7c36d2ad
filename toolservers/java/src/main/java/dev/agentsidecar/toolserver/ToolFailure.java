package dev.agentsidecar.toolserver;

/**
 * Thrown by a tool to fail with exactly this message for the model, for failures it anticipated
 * ("order 1 does not exist"). Any other exception reaches the model as {@code Type: message}.
 */
public final class ToolFailure extends ToolServerException {
  private static final long serialVersionUID = 1L;

  public ToolFailure(String message) {
    super(message);
  }
}
