package dev.agentsidecar.toolserver;

/** A tool is declared wrongly; the message says how to fix it. Thrown at registration. */
public final class ToolDefinitionException extends ToolServerException {
  private static final long serialVersionUID = 1L;

  public ToolDefinitionException(String message) {
    super(message);
  }
}
