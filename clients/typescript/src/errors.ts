/**
 * The sidecar's errors as one typed class, read from the standard rich-error trailer.
 *
 * Every error status the sidecar answers carries a `google.rpc.Status` in the
 * `grpc-status-details-bin` trailer, whose details hold a `google.rpc.ErrorInfo` (a stable
 * `reason` in the domain `agentsidecar.v1`) and, where they apply, `RetryInfo`, `BadRequest`
 * and `ResourceInfo`. {@link AgentSidecarError} decodes them once, so callers branch on
 * `reason` (or on the gRPC `code` when a status came without details, e.g. from a proxy),
 * never on the English message.
 */
import { Metadata, status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";

import type { Any } from "./gen/google/protobuf/any.js";
import {
  BadRequest,
  type BadRequest_FieldViolation,
  ErrorInfo,
  ResourceInfo,
  RetryInfo,
} from "./gen/google/rpc/error_details.js";
import { Status } from "./gen/google/rpc/status.js";

/** The domain of the sidecar's `ErrorInfo` reasons. */
export const ERROR_DOMAIN = "agentsidecar.v1";

/**
 * The reasons the sidecar gives, each with the gRPC code it comes with. A newer sidecar may
 * send reasons not listed here; {@link AgentSidecarError.reason} is a plain string.
 */
export const ErrorReason = {
  /** NOT_FOUND: no session has the id. */
  SESSION_NOT_FOUND: "SESSION_NOT_FOUND",
  /** NOT_FOUND: the sidecar's configuration has no such profile. */
  PROFILE_NOT_FOUND: "PROFILE_NOT_FOUND",
  /** NOT_FOUND: no tool call with this id waits for approval. */
  CALL_NOT_PENDING: "CALL_NOT_PENDING",
  /** ALREADY_EXISTS: a session with the requested id exists. */
  SESSION_EXISTS: "SESSION_EXISTS",
  /** ALREADY_EXISTS: a startRun requestId started a run with another request. */
  REQUEST_ID_REUSED: "REQUEST_ID_REUSED",
  /** FAILED_PRECONDITION: the session is running another turn; retry after the delay. */
  SESSION_BUSY: "SESSION_BUSY",
  /** FAILED_PRECONDITION: the session's profile was removed from the configuration. */
  PROFILE_REMOVED: "PROFILE_REMOVED",
  /** INVALID_ARGUMENT: a field is invalid; see the field violations. */
  INVALID_REQUEST: "INVALID_REQUEST",
  /** INVALID_ARGUMENT: the input is larger than the sidecar accepts. */
  INPUT_TOO_LARGE: "INPUT_TOO_LARGE",
  /** UNAVAILABLE: the sidecar is shutting down; retry (elsewhere) after the delay. */
  DRAINING: "DRAINING",
  /** RESOURCE_EXHAUSTED: the sidecar is at capacity; retry after the delay. */
  OVERLOADED: "OVERLOADED",
  /** RESOURCE_EXHAUSTED: the caller used up its quota; retry after the delay. */
  QUOTA_EXCEEDED: "QUOTA_EXCEEDED",
  /** UNAUTHENTICATED: the call carried no valid credentials. */
  UNAUTHENTICATED: "UNAUTHENTICATED",
  /** PERMISSION_DENIED: the caller may not do this. */
  PERMISSION_DENIED: "PERMISSION_DENIED",
  /** INTERNAL: a defect; `metadata.error_id` names the sidecar's log line. */
  INTERNAL: "INTERNAL",
  /** NOT_FOUND: no such background run (never started, expired, or another caller's). */
  RUN_NOT_FOUND: "RUN_NOT_FOUND",
  /** RESOURCE_EXHAUSTED: as many background runs wait or run as allowed; retry after the delay. */
  RUN_QUEUE_FULL: "RUN_QUEUE_FULL",
  /** PERMISSION_DENIED: the configuration does not let a run's callback go to that URL. */
  CALLBACK_NOT_ALLOWED: "CALLBACK_NOT_ALLOWED",
  /** FAILED_PRECONDITION: the sidecar serves no background runs. */
  BACKGROUND_RUNS_DISABLED: "BACKGROUND_RUNS_DISABLED",
} as const;

/** One of the reasons listed in {@link ErrorReason}. */
export type ErrorReason = (typeof ErrorReason)[keyof typeof ErrorReason];

/** A field of the request that was invalid (`google.rpc.BadRequest.FieldViolation`). */
export type FieldViolation = BadRequest_FieldViolation;

/** The resource a call was about (`google.rpc.ResourceInfo`), e.g. the missing session. */
export type { ResourceInfo };

const STATUS_DETAILS_KEY = "grpc-status-details-bin";
const TYPE_PREFIX = "type.googleapis.com/";

/** What {@link AgentSidecarError}'s constructor takes; every field but `code` is optional. */
export interface AgentSidecarErrorInit {
  /** The gRPC status code. */
  code: GrpcStatus;
  /** The status message (for people; never parse it). */
  details?: string;
  /** The trailers the status came with. */
  trailers?: Metadata;
  /** The error this one wraps. */
  cause?: unknown;
}

/**
 * A call to the sidecar failed with a gRPC status.
 *
 * Read `reason` first (stable, machine-readable); fall back to `code` when `reason` is
 * undefined, which means the status carried no `ErrorInfo` (it may come from a proxy or
 * from the client itself: a deadline that passed, a call the caller cancelled).
 */
export class AgentSidecarError extends Error {
  override readonly name = "AgentSidecarError";
  /** The gRPC status code, e.g. `status.NOT_FOUND` (5). */
  readonly code: GrpcStatus;
  /** The code's name, e.g. `"NOT_FOUND"`. */
  readonly codeName: string;
  /** The status message, for people; never branch on it. */
  readonly details: string;
  /** `ErrorInfo.reason`, e.g. `"SESSION_NOT_FOUND"`; undefined when the status had none. */
  readonly reason: string | undefined;
  /** `ErrorInfo.domain`: `"agentsidecar.v1"` for the sidecar's own errors. */
  readonly domain: string | undefined;
  /** `ErrorInfo.metadata`, e.g. `error_id` for INTERNAL; empty when none. */
  readonly metadata: Readonly<Record<string, string>>;
  /** `RetryInfo.retry_delay` in milliseconds: wait this long before retrying; undefined when the status gives no delay. */
  readonly retryDelayMs: number | undefined;
  /** `BadRequest.field_violations`: which request fields were invalid, and why. */
  readonly fieldViolations: readonly FieldViolation[];
  /** `ResourceInfo`: the resource the call was about, e.g. the session that was not found. */
  readonly resourceInfo: ResourceInfo | undefined;
  /** Every detail of the `google.rpc.Status`, decoded or not, in order. */
  readonly statusDetails: readonly Any[];
  /** The trailers the status came with. */
  readonly trailers: Metadata;

  constructor(init: AgentSidecarErrorInit) {
    const codeName = GrpcStatus[init.code] ?? `CODE_${init.code}`;
    const details = init.details ?? "";
    const trailers = init.trailers ?? new Metadata();
    const decoded = decodeStatusDetails(trailers);
    const reason = decoded.errorInfo?.reason || undefined;
    super(
      `${codeName}${reason ? ` (${reason})` : ""}${details ? `: ${details}` : ""}`,
      init.cause === undefined ? undefined : { cause: init.cause },
    );
    this.code = init.code;
    this.codeName = codeName;
    this.details = details;
    this.reason = reason;
    this.domain = decoded.errorInfo?.domain || undefined;
    this.metadata = Object.freeze({ ...(decoded.errorInfo?.metadata ?? {}) });
    this.retryDelayMs = decoded.retryDelayMs;
    this.fieldViolations = Object.freeze(decoded.fieldViolations);
    this.resourceInfo = decoded.resourceInfo;
    this.statusDetails = Object.freeze(decoded.all);
    this.trailers = trailers;
  }

  /**
   * The error for anything a gRPC call rejected with: a grpc-js `ServiceError` becomes an
   * `AgentSidecarError` with its details decoded; an `AgentSidecarError` is returned as is;
   * anything else (a bug, not a status) is wrapped as UNKNOWN.
   */
  static from(error: unknown): AgentSidecarError {
    if (error instanceof AgentSidecarError) {
      return error;
    }
    if (isServiceError(error)) {
      return new AgentSidecarError({
        code: error.code,
        details: error.details,
        trailers: error.metadata,
        cause: error,
      });
    }
    return new AgentSidecarError({
      code: GrpcStatus.UNKNOWN,
      details: error instanceof Error ? error.message : String(error),
      cause: error,
    });
  }
}

/** True for the errors grpc-js rejects calls with (a status with trailers). */
export function isServiceError(error: unknown): error is ServiceError {
  return (
    error instanceof Error &&
    typeof (error as Partial<ServiceError>).code === "number" &&
    (error as Partial<ServiceError>).metadata instanceof Metadata
  );
}

interface DecodedDetails {
  errorInfo: ErrorInfo | undefined;
  retryDelayMs: number | undefined;
  fieldViolations: FieldViolation[];
  resourceInfo: ResourceInfo | undefined;
  all: Any[];
}

/** Decodes the `google.rpc.Status` trailer; a missing or malformed one decodes to nothing. */
function decodeStatusDetails(trailers: Metadata): DecodedDetails {
  const decoded: DecodedDetails = {
    errorInfo: undefined,
    retryDelayMs: undefined,
    fieldViolations: [],
    resourceInfo: undefined,
    all: [],
  };
  const [raw] = trailers.get(STATUS_DETAILS_KEY);
  if (!(raw instanceof Uint8Array)) {
    return decoded;
  }
  let status: Status;
  try {
    status = Status.decode(raw);
  } catch {
    return decoded; // a trailer we cannot read is no reason to hide the status itself
  }
  decoded.all = status.details;
  for (const detail of status.details) {
    const type = detail.typeUrl.startsWith(TYPE_PREFIX)
      ? detail.typeUrl.slice(TYPE_PREFIX.length)
      : detail.typeUrl.slice(detail.typeUrl.lastIndexOf("/") + 1);
    try {
      switch (type) {
        case "google.rpc.ErrorInfo":
          decoded.errorInfo ??= ErrorInfo.decode(detail.value);
          break;
        case "google.rpc.RetryInfo": {
          const delay = RetryInfo.decode(detail.value).retryDelay;
          if (delay) {
            decoded.retryDelayMs = delay.seconds * 1000 + delay.nanos / 1e6;
          }
          break;
        }
        case "google.rpc.BadRequest":
          decoded.fieldViolations.push(...BadRequest.decode(detail.value).fieldViolations);
          break;
        case "google.rpc.ResourceInfo":
          decoded.resourceInfo ??= ResourceInfo.decode(detail.value);
          break;
        default:
          break; // kept in `all` for callers that know the type
      }
    } catch {
      // One malformed detail leaves the others readable.
    }
  }
  return decoded;
}
