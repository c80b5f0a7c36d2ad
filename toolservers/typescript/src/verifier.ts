/**
 * Verifying the sidecar's signed identity assertion (`x-agent-identity`, a JWT) of each call
 * by the rule every SDK follows (docs/tool-servers.md, "The rule every verifier follows"),
 * checked in its order: size, shape, header, key, the key's algorithm, signature (jose's
 * `compactVerify`, the only part left to a library), claims present, claim types, issuer,
 * audience, lifetime, and that the plain metadata agrees with the claims.
 *
 * A given assertion is verified once: the sidecar reuses one per run and server, so a run's
 * later calls cost a lookup (and an expiry check). The keys file is reread within a second of
 * a change (a key rotation), which forgets what was verified before; keys fetched from a
 * sidecar instead ({@link KeysFetcher}) are refetched by the fetch rule, and new ones forget too.
 */
import type { Metadata } from "@grpc/grpc-js";
import { compactVerify } from "jose";

import { ToolServerError } from "./errors.js";
import { KeysFetcher } from "./fetcher.js";
import {
  ASSERTION_KEY,
  CALL_ID_KEY,
  type CallerIdentity,
  DEFAULT_ISSUER,
  identity,
  type IdentityEntries,
  identityEntries,
  isStringRecord,
  LABELS_KEY,
  labelsEntry,
  MalformedIdentity,
  plainIdentity,
  PRINCIPAL_KEY,
  RUN_ID_KEY,
  SESSION_ID_KEY,
  textEntry,
} from "./identity.js";
import { ALGORITHMS, FileWatch, type KeySet, keyCount, keyFor, loadKeys } from "./keys.js";
import type { Logger } from "./logger.js";

/** The longest assertion looked at: the sidecar's are about 1 KB, 4 KB with the most labels. */
export const MAX_ASSERTION_BYTES = 6144;
/** The latest time a claim may name: 9999-12-31T23:59:59Z. */
const MAX_TIME = 253402300799;
const CACHE_SIZE = 1024; // assertions remembered as verified (one per run in flight, about)
const REREAD_EVERY_MS = 1000; // between checks of the keys file
const BASE64URL = /^[A-Za-z0-9_-]*$/;

/** How a server verifies the identity assertion of each call. */
export interface IdentityOptions {
  /**
   * The sidecar's public keys: a JWKS (`agent-sidecar identity jwks` prints it) or a PEM
   * public key. Reread within a second of a change; a file that is then unusable keeps the old keys.
   * Give this or `keysFrom`.
   */
  keysFile?: string;
  /**
   * The gRPC target of a sidecar to fetch the keys from (`host:port` or `unix:/path`;
   * `agentsidecar.v1.IdentityKeysService`), instead of `keysFile`. Fetched in the background
   * from the verifier's construction: until the first answer an assertion is refused (`the
   * identity keys are not fetched yet`); a failed fetch is retried after `keysRetryAfter`,
   * doubling to `keysRetryMax`; then refetched every `max_age` of the answer, and soon (at most
   * once every `keysUnknownKidEvery`) after an assertion names a kid the keys lack. A failed
   * refresh keeps the keys. Plaintext only to a local target (loopback, `localhost`, `unix:`);
   * TLS otherwise, or with `keysCa`. {@link IdentityVerifier.close} stops it.
   */
  keysFrom?: string;
  /** PEM CA bundle to verify the TLS certificate of `keysFrom` with. Default: the system's roots. */
  keysCa?: string;
  /** Seconds before a failed fetch from `keysFrom` is tried again (then doubling). Default 1. */
  keysRetryAfter?: number;
  /** The longest wait, in seconds, between failed fetches from `keysFrom`. Default 30. */
  keysRetryMax?: number;
  /** The least seconds between a fetch and one an assertion's unknown kid asks for. Default 10. */
  keysUnknownKidEvery?: number;
  /** This server's name in the sidecar's configuration (`tool_servers[].name`). */
  audience: string;
  /** The issuer the sidecar signs as (`auth.tool_assertion.issuer`). Default `agent-sidecar`. */
  issuer?: string;
  /** Refuse calls that carry no assertion; otherwise they run with the plain, unverified identity. Default false. */
  required?: boolean;
  /** Seconds of clock difference allowed when checking `exp`, `iat` and `nbf`. Default 10. */
  leeway?: number;
  /** Wall-clock seconds since the epoch (tests pass their own). */
  clock?: () => number;
  /** Where key reloads and failed fetches are logged. */
  log?: Logger;
}

/** A call's identity does not verify; the message says why (never the token). */
export class IdentityRefused extends ToolServerError {}

type Claims = Readonly<Record<string, unknown>>;

/** Verifies the identity assertion of each call. */
export class IdentityVerifier {
  readonly audience: string;
  readonly issuer: string;
  readonly required: boolean;
  readonly leeway: number;
  readonly #file: string | undefined;
  readonly #clock: () => number;
  readonly #log: Logger | undefined;
  readonly #watch: FileWatch | undefined;
  readonly #fetcher: KeysFetcher | undefined;
  #keys: KeySet | undefined; // undefined until fetched from keysFrom
  #checked = performance.now();
  #generation = 0;
  readonly #verified = new Map<string, Claims>();

  /**
   * @throws ToolServerError when the keys file cannot be read or holds no usable key, the CA
   *   file of `keysFrom` cannot be read, not exactly one of `keysFile` and `keysFrom` is given,
   *   or the audience is empty.
   */
  constructor(options: IdentityOptions) {
    if ((options.keysFile === undefined) === (options.keysFrom === undefined)) {
      throw new ToolServerError("give the identity keys as a file (keysFile) or a sidecar to fetch them from (keysFrom): one of the two");
    }
    if (options.keysCa !== undefined && options.keysFrom === undefined) {
      throw new ToolServerError("keysCa is the CA of keysFrom: it needs keysFrom");
    }
    if (!options.audience) {
      throw new ToolServerError("the identity audience is required: this server's name in the sidecar's configuration (tool_servers[].name)");
    }
    const leeway = options.leeway ?? 10;
    if (!(leeway >= 0) || !Number.isFinite(leeway)) throw new ToolServerError(`the identity leeway must be seconds >= 0, got ${leeway}`);
    this.audience = options.audience;
    this.issuer = options.issuer ?? DEFAULT_ISSUER;
    this.required = options.required ?? false;
    this.leeway = leeway;
    this.#file = options.keysFile;
    this.#clock = options.clock ?? (() => Date.now() / 1000);
    this.#log = options.log;
    if (options.keysFile !== undefined) {
      this.#watch = new FileWatch(options.keysFile);
      this.#keys = loadKeys(options.keysFile);
      return;
    }
    const seconds = (value: number | undefined) => (value === undefined ? undefined : value * 1000);
    this.#fetcher = new KeysFetcher({
      target: options.keysFrom ?? "",
      caFile: options.keysCa,
      retryMs: seconds(options.keysRetryAfter),
      retryMaxMs: seconds(options.keysRetryMax),
      unknownKidEveryMs: seconds(options.keysUnknownKidEvery),
      log: options.log,
      onKeys: (keys) => {
        this.#keys = keys;
        this.#verified.clear(); // a key may be gone
        this.#generation += 1;
      },
    });
    this.#fetcher.start();
  }

  /** Stops fetching the keys from `keysFrom` (and closes its channel); nothing to stop with a keys file. */
  close(): void {
    this.#fetcher?.close();
  }

  /**
   * The verified identity of a call (or, when no assertion is sent and none is required, the
   * plain one).
   *
   * @throws IdentityRefused when the assertion is missing (and required), malformed, tampered
   *   with, signed by an unknown key, for another server or issuer, out of its lifetime, or
   *   contradicted by the plain metadata.
   */
  async verify(metadata: Metadata, callId: string): Promise<CallerIdentity> {
    const found = malformedRefused(() => identityEntries(metadata));
    const token = found.get(ASSERTION_KEY);
    if (token === undefined) {
      if (this.required) {
        throw new IdentityRefused(
          `the call carries no identity assertion (${ASSERTION_KEY}); this tool server requires one: ` +
            "the sidecar signs them with auth.tool_assertion",
        );
      }
      return malformedRefused(() => plainIdentity(metadata, callId));
    }
    if (typeof token !== "string") throw new IdentityRefused(`${ASSERTION_KEY} arrived as bytes; it is text`);
    return checkedAgainst(await this.#claims(token), found, callId);
  }

  async #claims(token: string): Promise<Claims> {
    this.#reread();
    if (this.#keys === undefined) {
      throw new IdentityRefused(
        `the identity keys are not fetched yet from ${this.#fetcher?.target ?? "the sidecar"}: ` +
          "no assertion verifies until they are, and this server keeps asking",
      );
    }
    const now = this.#clock();
    const cached = this.#verified.get(token);
    if (cached !== undefined) {
      // Verified before: only time has passed since.
      if (now > (cached.exp as number) + this.leeway) throw new IdentityRefused(expired(cached.exp as number));
      this.#verified.delete(token);
      this.#verified.set(token, cached);
      return cached;
    }
    const generation = this.#generation;
    const claims = await this.#decode(token, now);
    if (generation === this.#generation) {
      this.#verified.set(token, claims);
      if (this.#verified.size > CACHE_SIZE) this.#verified.delete(this.#verified.keys().next().value as string);
    }
    return claims;
  }

  /** Steps 1 to 11 of the rule: the claims of a token that passes them. */
  async #decode(token: string, now: number): Promise<Claims> {
    const size = Buffer.byteLength(token, "utf8");
    if (size > MAX_ASSERTION_BYTES) {
      throw new IdentityRefused(`the identity assertion is over ${MAX_ASSERTION_BYTES} bytes (${size}); the sidecar's are about 1 KB`);
    }
    const parts = token.split(".");
    if (parts.length !== 3 || !parts.every(isBase64url)) {
      throw new IdentityRefused("the identity assertion is not a JWT: it is not three base64url parts");
    }
    const header = jsonObject(parts[0] ?? "");
    const claims = jsonObject(parts[1] ?? "");
    if (header === undefined) throw new IdentityRefused("the identity assertion is not a JWT: its header is not a JSON object");
    if (claims === undefined) throw new IdentityRefused("the identity assertion is not a JWT: its payload is not a JSON object");

    const { alg, kid } = header;
    if (typeof alg !== "string" || !(ALGORITHMS as readonly string[]).includes(alg)) {
      throw new IdentityRefused(`the identity assertion's header is refused: alg ${shown(alg)} is not EdDSA or ES256`);
    }
    if (Object.hasOwn(header, "crit")) {
      throw new IdentityRefused("the identity assertion's header is refused: it has crit, and no extension is understood");
    }
    if (Object.hasOwn(header, "b64")) {
      throw new IdentityRefused(
        "the identity assertion's header is refused: it has b64 (RFC 7797's unencoded payloads are not taken)",
      );
    }
    const key = this.#keys === undefined ? undefined : keyFor(this.#keys, kid);
    if (key === undefined) {
      if (this.#fetcher !== undefined) {
        this.#fetcher.refreshSoon(); // a rotation this server has not heard of yet?
        throw new IdentityRefused(
          `the identity assertion is signed by a key this server does not know (kid ${shown(kid)}): ` +
            `it asks ${this.#fetcher.target} for the keys again`,
        );
      }
      throw new IdentityRefused(
        `the identity assertion is signed by a key this server does not know (kid ${shown(kid)}): ` +
          "give it the sidecar's current JWKS",
      );
    }
    if (key.alg !== alg) {
      throw new IdentityRefused(`the identity assertion's header is refused: alg ${alg}, but its key (kid ${shown(kid)}) signs ${key.alg}`);
    }
    try {
      await compactVerify(token, key.key, { algorithms: [alg] });
    } catch {
      throw new IdentityRefused(
        "the identity assertion's signature does not verify: it was changed on the way, or signed with another key",
      );
    }

    for (const name of ["iss", "aud", "exp", "iat", "sid", "run_id"]) {
      if (!Object.hasOwn(claims, name)) throw new IdentityRefused(`the identity assertion lacks the claim ${JSON.stringify(name)}`);
    }
    for (const name of ["exp", "iat", "nbf"]) {
      if (Object.hasOwn(claims, name) && !isTime(claims[name])) {
        throw new IdentityRefused(`the identity assertion's claim ${JSON.stringify(name)} is not a whole number of seconds from 0 to ${MAX_TIME}`);
      }
    }
    for (const name of ["iss", "sub", "sid", "run_id"]) {
      if (Object.hasOwn(claims, name) && typeof claims[name] !== "string") {
        throw new IdentityRefused(`the identity assertion's claim ${JSON.stringify(name)} is not a string`);
      }
    }
    const aud = claims.aud;
    const audiences = typeof aud === "string" ? [aud] : aud;
    if (!Array.isArray(audiences) || !audiences.length || !audiences.every((a) => typeof a === "string")) {
      throw new IdentityRefused(`the identity assertion's claim "aud" is neither a string nor a non-empty list of strings`);
    }
    if (Object.hasOwn(claims, "labels") && !isStringRecord(claims.labels)) {
      throw new IdentityRefused(`the identity assertion's claim "labels" is not an object of strings`);
    }

    if (claims.iss !== this.issuer) throw new IdentityRefused(`the identity assertion's issuer is not ${JSON.stringify(this.issuer)}`);
    if (!audiences.includes(this.audience)) {
      throw new IdentityRefused(
        `the identity assertion is for another tool server; this one is ${JSON.stringify(this.audience)} ` +
          "(tool_servers[].name in the sidecar's configuration)",
      );
    }
    const exp = claims.exp as number;
    if (exp + this.leeway < now) throw new IdentityRefused(expired(exp));
    if ((claims.iat as number) - this.leeway > now) {
      throw new IdentityRefused(
        "the identity assertion is issued in the future: are the clocks of the sidecar and this server apart by more than the leeway?",
      );
    }
    if (Object.hasOwn(claims, "nbf") && (claims.nbf as number) - this.leeway > now) {
      throw new IdentityRefused(`the identity assertion is not valid before ${isoTime(claims.nbf as number)}`);
    }
    return deepFreeze(claims);
  }

  #reread(): void {
    if (this.#watch === undefined || this.#file === undefined) return;
    const now = performance.now();
    if (now - this.#checked < REREAD_EVERY_MS) return;
    this.#checked = now;
    if (!this.#watch.changed()) return;
    try {
      this.#keys = loadKeys(this.#file);
    } catch (error) {
      // Half-written, or removed for a moment: keep the keys we have.
      this.#log?.warn(`identity keys not reloaded: ${(error as Error).message}`);
      return;
    }
    this.#verified.clear(); // a key may be gone
    this.#generation += 1;
    this.#log?.info(`identity keys reloaded from ${this.#file}: ${keyCount(this.#keys)} keys`);
  }
}

/** Step 12: the identity of verified claims, when the plain metadata agrees with them. */
function checkedAgainst(claims: Claims, found: IdentityEntries, callId: string): CallerIdentity {
  const asserted: Record<string, string> = {
    [PRINCIPAL_KEY]: (claims.sub as string | undefined) ?? "",
    [SESSION_ID_KEY]: claims.sid as string,
    [RUN_ID_KEY]: claims.run_id as string,
    [CALL_ID_KEY]: callId,
  };
  for (const [key, value] of Object.entries(asserted)) {
    const stated = malformedRefused(() => textEntry(found, key));
    if (stated !== undefined && stated !== value) {
      throw new IdentityRefused(`${key} contradicts ${key === CALL_ID_KEY ? "the request's call_id" : "the identity assertion"}`);
    }
  }
  const labels = (claims.labels as Record<string, string> | undefined) ?? null;
  if (found.has(LABELS_KEY) && !sameLabels(malformedRefused(() => labelsEntry(found)), labels)) {
    throw new IdentityRefused(`${LABELS_KEY} contradicts the identity assertion`);
  }
  return identity({
    principal: asserted[PRINCIPAL_KEY] ?? "",
    sessionId: asserted[SESSION_ID_KEY] ?? "",
    runId: asserted[RUN_ID_KEY] ?? "",
    callId,
    labels: labels ?? {},
    labelsOmitted: labels === null,
    verified: true,
    claims,
  });
}

function sameLabels(a: Record<string, string> | null, b: Record<string, string> | null): boolean {
  if (a === null || b === null) return a === b;
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && a[k] === b[k]);
}

function malformedRefused<T>(read: () => T): T {
  try {
    return read();
  } catch (error) {
    if (error instanceof MalformedIdentity) throw new IdentityRefused(`the call's identity metadata is malformed: ${error.message}`);
    throw error;
  }
}

/** Cached claims are shared by every call that carries their token: no handler may change them. */
function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

function isBase64url(part: string): boolean {
  return BASE64URL.test(part) && part.length % 4 !== 1;
}

/** The JSON object a base64url part encodes (strict UTF-8), or undefined. */
function jsonObject(part: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(Buffer.from(part, "base64url")));
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** A NumericDate the rule accepts: a JSON number of whole seconds (`1800000000.0` is one), in range. */
function isTime(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 0 && value <= MAX_TIME;
}

function isoTime(seconds: number): string {
  return new Date(seconds * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

function expired(exp: number): string {
  return `the identity assertion expired at ${isoTime(exp)}`;
}

/** A header value in a message, short: it comes from whoever sent the call. */
function shown(value: unknown): string {
  if (value === undefined) return "none";
  const text = typeof value === "string" ? value : (JSON.stringify(value) ?? String(value));
  return JSON.stringify(text.length > 64 ? `${text.slice(0, 64)}...` : text);
}
