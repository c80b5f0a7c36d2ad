/**
 * `@agent-sidecar/client`: a typed Node.js client for the agent sidecar.
 *
 * - {@link AgentClient}: sessions, unary and streamed runs, approvals, background runs
 *   (start, watch with resumption, get, list, cancel); deadlines and AbortSignal on every call.
 * - {@link AgentSidecarError}: every failure, with the gRPC code and the sidecar's
 *   `ErrorInfo` reason, retry delay, field violations and resource info.
 * - The messages and enums of `agentsidecar.v1`, generated from the protos at build time.
 *   Tool-server messages and the raw generated modules are under
 *   `@agent-sidecar/client/gen/...` (e.g. `.../gen/agentsidecar/v1/tool`).
 */
export {
  AgentClient,
  type AgentClientOptions,
  type ApprovalAnswer,
  type ApprovalContext,
  type ApprovalHandler,
  type CallOptions,
  type CreateSessionOptions,
  type DenyOptions,
  type ListRunsOptions,
  type RunOptions,
  type StartRunOptions,
  type StreamOptions,
  type WatchRunOptions,
} from "./client.js";
export {
  AgentSidecarError,
  type AgentSidecarErrorInit,
  ERROR_DOMAIN,
  ErrorReason,
  type FieldViolation,
  type ResourceInfo,
} from "./errors.js";
export * from "./gen/agentsidecar/v1/agent.js";
export { ToolDescriptor } from "./gen/agentsidecar/v1/tool.js";
export { Metadata, status } from "@grpc/grpc-js";
