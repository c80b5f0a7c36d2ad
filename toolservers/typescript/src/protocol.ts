/**
 * The tool-server contract (`agentsidecar.v1.ToolService`) and `grpc.health.v1`, loaded at run
 * time from the `.proto` files this package ships: their service definitions, and the
 * package definition server reflection describes. Beside them, the sidecar's
 * `agentsidecar.v1.IdentityKeysService` (identity.proto), which this package calls (to fetch
 * the identity keys) and does not serve: it stays out of what reflection describes.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";

import { loadSync, type PackageDefinition, type ServiceDefinition } from "@grpc/proto-loader";
import { protoPath as healthProtoPath } from "grpc-health-check";

/** The health service name of the tool-server protocol. */
export const SERVICE_NAME = "agentsidecar.v1.ToolService";
/** The health service's full name. */
export const HEALTH_SERVICE_NAME = "grpc.health.v1.Health";

const PROTO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "proto");

/** Both services, fields by their proto names (`call_id`), oneofs named, enums as names. */
export const packageDefinition: PackageDefinition = loadSync(
  [path.join(PROTO_ROOT, "agentsidecar", "v1", "tool.proto"), healthProtoPath],
  { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true, includeDirs: [PROTO_ROOT] },
);

export const toolService = packageDefinition[SERVICE_NAME] as ServiceDefinition;

/** The sidecar's service that serves the public keys its identity assertions are signed with. */
export const IDENTITY_KEYS_SERVICE_NAME = "agentsidecar.v1.IdentityKeysService";

/** The identity keys service, fields by their proto names (`max_age`), as a client decodes them. */
export const identityKeysPackageDefinition: PackageDefinition = loadSync(
  [path.join(PROTO_ROOT, "agentsidecar", "v1", "identity.proto")],
  { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true, includeDirs: [PROTO_ROOT] },
);

export const identityKeysService = identityKeysPackageDefinition[IDENTITY_KEYS_SERVICE_NAME] as ServiceDefinition;

/** `GetIdentityKeysResponse`, as proto-loader decodes it (absent fields are undefined). */
export interface GetIdentityKeysResponse {
  jwks?: string;
  max_age?: { seconds?: string | number; nanos?: number } | null;
}

/** A `google.protobuf.Duration` from seconds. */
export interface Duration {
  seconds: number;
  nanos: number;
}

export function duration(secondsValue: number): Duration {
  const seconds = Math.floor(secondsValue);
  return { seconds, nanos: Math.round((secondsValue - seconds) * 1e9) };
}

export function durationFromNanos(nanos: bigint): Duration {
  return { seconds: Number(nanos / 1_000_000_000n), nanos: Number(nanos % 1_000_000_000n) };
}

/** `CallToolRequest`, as proto-loader decodes it. */
export interface CallToolRequest {
  call_id?: string;
  tool_name?: string;
  arguments?: string;
}

/** `ToolResult`, as proto-loader encodes it. */
export interface ToolResult {
  call_id: string;
  output?: string;
  error?: { kind: ToolErrorKind; message: string };
  handler_duration?: Duration;
}

export type ToolErrorKind = "TOOL_ERROR_KIND_INVALID_ARGUMENTS" | "TOOL_ERROR_KIND_EXECUTION_FAILED";
