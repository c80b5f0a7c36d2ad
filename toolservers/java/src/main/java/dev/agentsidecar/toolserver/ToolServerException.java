package dev.agentsidecar.toolserver;

/**
 * Anything this library throws on purpose; one tree:
 *
 * <pre>
 * ToolServerException           anything the library throws on purpose
 * ├── ToolDefinitionException   a tool is declared wrongly (at registration)
 * └── ToolFailure               thrown by a tool: fail with a message for the model
 * </pre>
 */
public class ToolServerException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public ToolServerException(String message) {
    super(message);
  }

  public ToolServerException(String message, Throwable cause) {
    super(message, cause);
  }
}
