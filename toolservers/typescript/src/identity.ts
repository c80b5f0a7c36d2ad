/**
 * Who a call serves, as the sidecar's metadata states it (docs/tool-servers.md, "Who the call
 * serves"): the principal, session, run and call as percent-encoded UTF-8 text entries, the
 * session's labels as JSON in a `-bin` entry. Plain metadata proves nothing: anything that
 * reaches the port can send it; {@link IdentityVerifier} checks the signed assertion beside it.
 */
import type { Metadata, MetadataValue } from "@grpc/grpc-js";

import { ToolServerError } from "./errors.js";

export const PRINCIPAL_KEY = "x-agent-principal";
export const SESSION_ID_KEY = "x-agent-session-id";
export const RUN_ID_KEY = "x-agent-run-id";
export const CALL_ID_KEY = "x-agent-call-id";
export const LABELS_KEY = "x-agent-labels-bin";
export const ASSERTION_KEY = "x-agent-identity";
/** Every key of the contract: each occurs at most once. */
export const IDENTITY_KEYS = [PRINCIPAL_KEY, SESSION_ID_KEY, RUN_ID_KEY, CALL_ID_KEY, LABELS_KEY, ASSERTION_KEY] as const;
/** The issuer the sidecar signs as unless its configuration names another. */
export const DEFAULT_ISSUER = "agent-sidecar";

/**
 * Who a call serves, as the sidecar says; with `verified`, as its signature proves. Without a
 * verified assertion anyone who can reach the server could have sent these: use them for logs
 * and defaults, not for decisions, unless the network is trusted.
 */
export interface CallerIdentity {
  /** The principal's name; empty for the sidecar's anonymous principal (or no sidecar). */
  readonly principal: string;
  /** The session's id, as the sidecar's caller knows it. */
  readonly sessionId: string;
  /** The run (turn) the call belongs to. */
  readonly runId: string;
  /** The call's id. */
  readonly callId: string;
  /** The session's labels; empty when it has none (or they were too large to send). */
  readonly labels: Readonly<Record<string, string>>;
  /** The session has labels, but too many to send (over 2 KiB of JSON). */
  readonly labelsOmitted: boolean;
  /**
   * The identity comes from an assertion whose signature, issuer, audience and lifetime this
   * server verified, and the plain metadata agrees with it.
   */
  readonly verified: boolean;
  /** The verified assertion's claims (`iss`, `sub`, `aud`, `exp`, `jti`...); empty when not verified. */
  readonly claims: Readonly<Record<string, unknown>>;
}

/** The call's identity metadata is malformed: it did not come from a sidecar as it left it. */
export class MalformedIdentity extends ToolServerError {}

/** The contract's entries of a call's metadata, each once. */
export type IdentityEntries = ReadonlyMap<string, MetadataValue>;

/**
 * The contract's entries of `metadata`, by key.
 *
 * @throws MalformedIdentity when a key occurs more than once (the sidecar sends each once: a
 *   second one was added on the way).
 */
export function identityEntries(metadata: Metadata): IdentityEntries {
  const found = new Map<string, MetadataValue>();
  for (const key of IDENTITY_KEYS) {
    const values = metadata.get(key);
    // HTTP/2 joins a repeated text header with ", "; no encoded value holds a comma.
    if (values.length > 1 || (typeof values[0] === "string" && values[0].includes(","))) {
      throw new MalformedIdentity(`the metadata holds ${key} more than once`);
    }
    if (values[0] !== undefined) found.set(key, values[0]);
  }
  return found;
}

/**
 * A text entry's value (percent-decoded; invalid UTF-8 becomes U+FFFD), or undefined when absent.
 *
 * @throws MalformedIdentity when it arrived as bytes.
 */
export function textEntry(found: IdentityEntries, key: string): string | undefined {
  const value = found.get(key);
  if (value === undefined) return undefined;
  if (typeof value !== "string") throw new MalformedIdentity("a text entry of the identity metadata arrived as bytes");
  return decodeText(value);
}

/** Percent-decodes as Python's `unquote` does: a `%` not followed by two hex digits stays. */
export function decodeText(value: string): string {
  if (!value.includes("%")) return value;
  const parts: Buffer[] = [];
  let plain = 0;
  for (let i = value.indexOf("%"); i !== -1; i = value.indexOf("%", i + 1)) {
    const hex = value.slice(i + 1, i + 3);
    if (!/^[0-9A-Fa-f]{2}$/.test(hex)) continue;
    parts.push(Buffer.from(value.slice(plain, i), "utf8"), Buffer.from([parseInt(hex, 16)]));
    plain = i + 3;
    i += 2;
  }
  parts.push(Buffer.from(value.slice(plain), "utf8"));
  return new TextDecoder("utf-8").decode(Buffer.concat(parts));
}

/**
 * The labels entry's labels: `{}` when absent, `null` when the entry is `null` (too large to
 * send), `undefined` never.
 *
 * @throws MalformedIdentity when it is neither a JSON object of strings nor `null`.
 */
export function labelsEntry(found: IdentityEntries): Record<string, string> | null {
  const value = found.get(LABELS_KEY);
  if (value === undefined) return {};
  let decoded: unknown;
  try {
    const text = typeof value === "string" ? value : new TextDecoder("utf-8", { fatal: true }).decode(value);
    decoded = JSON.parse(text);
  } catch {
    throw new MalformedIdentity("the labels entry is not JSON");
  }
  if (decoded === null) return null;
  if (!isStringRecord(decoded)) throw new MalformedIdentity("the labels entry is not a JSON object of strings");
  return decoded;
}

export function isStringRecord(value: unknown): value is Record<string, string> {
  return (
    typeof value === "object" &&
    value !== null &&
    !Array.isArray(value) &&
    Object.values(value).every((v) => typeof v === "string")
  );
}

/**
 * The identity a call's metadata states, unverified; `callId` is the request's, unless the
 * metadata names one.
 *
 * @throws MalformedIdentity when the identity metadata is malformed.
 */
export function plainIdentity(metadata: Metadata, callId: string): CallerIdentity {
  const found = identityEntries(metadata);
  const labels = labelsEntry(found);
  return identity({
    principal: textEntry(found, PRINCIPAL_KEY) ?? "",
    sessionId: textEntry(found, SESSION_ID_KEY) ?? "",
    runId: textEntry(found, RUN_ID_KEY) ?? "",
    callId: textEntry(found, CALL_ID_KEY) ?? callId,
    labels: labels ?? {},
    labelsOmitted: labels === null,
    verified: false,
    claims: {},
  });
}

/** A frozen identity: handlers of concurrent calls may share one. */
export function identity(fields: CallerIdentity): CallerIdentity {
  return Object.freeze({
    ...fields,
    labels: Object.freeze({ ...fields.labels }),
    claims: Object.freeze({ ...fields.claims }),
  });
}
