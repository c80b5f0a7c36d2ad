/**
 * The package's errors, one tree:
 *
 * ```text
 * ToolServerError           anything this package throws on purpose
 * ├── ToolDefinitionError   a tool is declared wrongly (when it is registered)
 * ├── ToolFailure           thrown by a tool: fail with a message for the model
 * ├── MalformedIdentity     a call's identity metadata is malformed (identity.ts)
 * └── IdentityRefused       a call's identity assertion does not verify (verifier.ts)
 * ```
 */

/** Anything this package throws on purpose. */
export class ToolServerError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * A tool is declared wrongly: a bad or duplicate name, no description, a schema whose root
 * is not an object... Thrown by {@link ToolServer.tool}; the message says how to fix it.
 */
export class ToolDefinitionError extends ToolServerError {}

/**
 * Thrown by a tool to fail with exactly this message for the model
 * (`TOOL_ERROR_KIND_EXECUTION_FAILED`), for failures the tool anticipated
 * ("order 1 does not exist"). Any other error reaches the model as `Name: message`.
 */
export class ToolFailure extends ToolServerError {}
