// The decoding of the rich-error trailer, on bytes made by the generated encoders (the same
// wire format the sidecar sends); no server needed.
import assert from "node:assert/strict";
import { test } from "node:test";

import { AgentSidecarError, ErrorReason, Metadata, status } from "@agent-sidecar/client";
import { Any } from "@agent-sidecar/client/gen/google/protobuf/any";
import {
  BadRequest,
  ErrorInfo,
  ResourceInfo,
  RetryInfo,
} from "@agent-sidecar/client/gen/google/rpc/error_details";
import { Status } from "@agent-sidecar/client/gen/google/rpc/status";

function packed(typeName: string, value: Uint8Array): Any {
  return { typeUrl: `type.googleapis.com/${typeName}`, value: Buffer.from(value) };
}

function trailers(details: Any[], code = status.FAILED_PRECONDITION): Metadata {
  const metadata = new Metadata();
  const bytes = Status.encode({ code, message: "m", details }).finish();
  metadata.set("grpc-status-details-bin", Buffer.from(bytes));
  return metadata;
}

test("every detail the sidecar sends is decoded into the error's fields", () => {
  const metadata = trailers([
    packed(
      "google.rpc.ErrorInfo",
      ErrorInfo.encode({
        reason: "SESSION_BUSY",
        domain: "agentsidecar.v1",
        metadata: { session_id: "s-1" },
      }).finish(),
    ),
    packed("google.rpc.RetryInfo", RetryInfo.encode({ retryDelay: { seconds: 1, nanos: 500_000_000 } }).finish()),
    packed(
      "google.rpc.BadRequest",
      BadRequest.encode({
        fieldViolations: [{ field: "input", description: "must not be empty", reason: "", localizedMessage: undefined }],
      }).finish(),
    ),
    packed(
      "google.rpc.ResourceInfo",
      ResourceInfo.encode({ resourceType: "session", resourceName: "s-1", owner: "", description: "" }).finish(),
    ),
    packed("example.Unknown", new Uint8Array([1, 2, 3])),
  ]);
  const error = new AgentSidecarError({ code: status.FAILED_PRECONDITION, details: "busy", trailers: metadata });
  assert.equal(error.reason, ErrorReason.SESSION_BUSY);
  assert.equal(error.domain, "agentsidecar.v1");
  assert.deepEqual(error.metadata, { session_id: "s-1" });
  assert.equal(error.retryDelayMs, 1500);
  assert.deepEqual(
    error.fieldViolations.map((v) => [v.field, v.description]),
    [["input", "must not be empty"]],
  );
  assert.equal(error.resourceInfo?.resourceName, "s-1");
  assert.equal(error.statusDetails.length, 5);
  assert.equal(error.statusDetails[4]?.typeUrl, "type.googleapis.com/example.Unknown");
  assert.equal(error.message, "FAILED_PRECONDITION (SESSION_BUSY): busy");
  assert.equal(error.name, "AgentSidecarError");
});

test("a status without details leaves the code to read and the details empty", () => {
  const error = new AgentSidecarError({ code: status.UNAVAILABLE, details: "connection refused" });
  assert.equal(error.codeName, "UNAVAILABLE");
  assert.equal(error.reason, undefined);
  assert.equal(error.retryDelayMs, undefined);
  assert.deepEqual(error.fieldViolations, []);
  assert.deepEqual(error.metadata, {});
  assert.equal(error.message, "UNAVAILABLE: connection refused");
});

test("a malformed trailer hides nothing but the details", () => {
  const metadata = new Metadata();
  metadata.set("grpc-status-details-bin", Buffer.from([0xff, 0xff, 0xff]));
  const error = new AgentSidecarError({ code: status.INTERNAL, details: "x", trailers: metadata });
  assert.equal(error.code, status.INTERNAL);
  assert.equal(error.reason, undefined);
});

test("anything that is not a status is wrapped as UNKNOWN with the original as cause", () => {
  const cause = new RangeError("oops");
  const error = AgentSidecarError.from(cause);
  assert.equal(error.code, status.UNKNOWN);
  assert.equal(error.cause, cause);
  assert.equal(AgentSidecarError.from(error), error);
});
