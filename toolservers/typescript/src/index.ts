/**
 * `@agent-sidecar/toolserver`: write tool servers for the agent sidecar in TypeScript.
 *
 * - {@link ToolServer}: register tools (a JSON Schema and a handler each), serve them over
 *   the tool-server protocol with health, reflection, TLS, a bearer token and a graceful drain.
 * - {@link ToolFailure}: throw it to fail with a message for the model.
 * - {@link ToolDefinitionError}: a tool declared wrongly, said how to fix.
 *
 * See the package's README for the declaration, the two error channels, deadlines and drain.
 */
export { ToolDefinitionError, ToolFailure, ToolServerError } from "./errors.js";
export { LEVELS, type Logger, type LogLevel } from "./logger.js";
export { parseServeArgs, type ServeOptions } from "./options.js";
export { HEALTH_SERVICE_NAME, SERVICE_NAME } from "./protocol.js";
export { KEEPALIVE_OPTIONS, type RunningServer, ToolServer } from "./server.js";
export type { JsonSchema, Tool, ToolContext, ToolDefinition, ToolHandler } from "./tool.js";
