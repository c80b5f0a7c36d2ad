/**
 * `@agent-sidecar/toolserver`: write tool servers for the agent sidecar in TypeScript.
 *
 * - {@link ToolServer}: register tools (a JSON Schema and a handler each), serve them over
 *   the tool-server protocol with health, reflection, TLS, a bearer token and a graceful drain.
 * - {@link ToolFailure}: throw it to fail with a message for the model.
 * - {@link ToolDefinitionError}: a tool declared wrongly, said how to fix.
 * - {@link CallerIdentity}: who a call serves (`context.identity`), verified by
 *   {@link IdentityVerifier} when the server has the sidecar's keys.
 *
 * See the package's README for the declaration, the two error channels, deadlines and drain.
 */
export { ToolDefinitionError, ToolFailure, ToolServerError } from "./errors.js";
export {
  ASSERTION_KEY,
  CALL_ID_KEY,
  type CallerIdentity,
  DEFAULT_ISSUER,
  LABELS_KEY,
  MalformedIdentity,
  plainIdentity,
  PRINCIPAL_KEY,
  RUN_ID_KEY,
  SESSION_ID_KEY,
} from "./identity.js";
export { LEVELS, type Logger, type LogLevel } from "./logger.js";
export { parseServeArgs, type ServeOptions } from "./options.js";
export { HEALTH_SERVICE_NAME, IDENTITY_KEYS_SERVICE_NAME, SERVICE_NAME } from "./protocol.js";
export { KEEPALIVE_OPTIONS, type RunningServer, ToolServer } from "./server.js";
export { IdentityRefused, type IdentityOptions, IdentityVerifier, MAX_ASSERTION_BYTES } from "./verifier.js";
export type { JsonSchema, Tool, ToolContext, ToolDefinition, ToolHandler } from "./tool.js";
