/**
 * Fetching the sidecar's public keys from a sidecar (`--identity-keys-from TARGET`), by the rule
 * every SDK follows (docs/tool-servers.md, "The signed assertion"):
 *
 * - **Who it trusts.** The keys decide whom the server believes, so they travel in plaintext
 *   only to this machine (a loopback address, `localhost`, a `unix:` socket); any other target
 *   is dialled with TLS, verified against the CA file (`--identity-keys-ca`) or the system's
 *   roots. With a CA file even a local target is dialled with TLS (a sidecar port that serves TLS).
 * - **When.** At start, in the background; a failed fetch is tried again after 1 s, doubling
 *   to 30 s. Then again every `max_age` of the answer (300 s when it says none), and soon (at
 *   most once every 10 s) after an assertion names a `kid` the keys lack. A failed refresh
 *   keeps the keys it has (logged as a warning).
 *
 * The JWKS is parsed as a keys file's is ({@link parseJwks}). Its timers never keep the process alive.
 */
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { BlockList, isIP } from "node:net";

import { type ChannelCredentials, Client, credentials, Metadata, type ServiceError, status } from "@grpc/grpc-js";

import { ToolServerError } from "./errors.js";
import { type KeySet, keyCount, parseJwks } from "./keys.js";
import type { Logger } from "./logger.js";
import { type GetIdentityKeysResponse, identityKeysService } from "./protocol.js";

/** How long to rely on keys whose answer names no `max_age`. */
export const DEFAULT_MAX_AGE_MS = 300_000;
const MIN_MAX_AGE_MS = 1_000; // a sidecar's max_age below this is taken as this: no busy loop
const MAX_TIMER_MS = 2 ** 31 - 1; // setTimeout's longest delay (24.8 days)
const FETCH_TIMEOUT_MS = 10_000; // deadline of one GetIdentityKeys call

/** When the fetcher asks, in milliseconds. */
export interface FetchTiming {
  /** After the first failed fetch. Default 1000. */
  retryMs: number;
  /** The longest wait after failed fetches (the wait doubles up to it). Default 30000. */
  retryMaxMs: number;
  /** The least time between a fetch and one an unknown `kid` asks for. Default 10000. */
  unknownKidEveryMs: number;
}

export interface KeysFetcherOptions extends Partial<FetchTiming> {
  /** The sidecar's gRPC target: `host:port` or `unix:/path`. */
  target: string;
  /** A PEM CA bundle to verify the sidecar's TLS certificate with, instead of the system's roots. */
  caFile?: string;
  /** Called with the keys of each answer whose JWKS differs from the one before (the first included). */
  onKeys: (keys: KeySet) => void;
  log?: Logger;
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet("127.0.0.0", 8, "ipv4");
LOOPBACK.addAddress("::1", "ipv6");
LOOPBACK.addSubnet("::ffff:127.0.0.0", 104, "ipv6");

/**
 * Whether a gRPC target is on this machine: a `unix:` socket, `localhost`, or a loopback
 * address (`127.0.0.0/8`, `::1`), as `host:port`, `[v6]:port`, `dns:`, `ipv4:` or `ipv6:`.
 */
export function isLocalTarget(target: string): boolean {
  if (/^unix(-abstract)?:/.test(target)) return true;
  let rest = target;
  const scheme = /^(dns|ipv4|ipv6):(\/\/[^/]*\/)?/.exec(rest);
  if (scheme) rest = rest.slice(scheme[0].length);
  const addresses = scheme && scheme[1] !== "dns" ? rest.split(",") : [rest];
  return addresses.every((address) => {
    const host = hostOf(address);
    if (host.toLowerCase() === "localhost" || host.toLowerCase() === "localhost.") return true;
    const family = isIP(host);
    return family !== 0 && LOOPBACK.check(host, family === 4 ? "ipv4" : "ipv6");
  });
}

function hostOf(address: string): string {
  if (address.startsWith("[")) {
    const end = address.indexOf("]");
    return end === -1 ? address : address.slice(1, end);
  }
  if (isIP(address) === 6) return address; // a bare IPv6 address, no port
  const colon = address.lastIndexOf(":");
  return colon === -1 ? address : address.slice(0, colon);
}

/**
 * How the keys are fetched from `target`: plaintext to a local target without a CA file, TLS
 * otherwise (the CA file's roots, or the system's).
 *
 * @throws ToolServerError when the CA file cannot be read or holds no certificate.
 */
export function keysCredentials(target: string, caFile?: string): ChannelCredentials {
  if (caFile === undefined) return isLocalTarget(target) ? credentials.createInsecure() : credentials.createSsl();
  let ca: Buffer;
  try {
    ca = readFileSync(caFile);
  } catch (error) {
    throw new ToolServerError(`cannot read the identity keys CA ${caFile}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
  }
  const pems = ca.toString("latin1").match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
  if (!pems.length) throw new ToolServerError(`the identity keys CA ${caFile} holds no PEM certificate`);
  for (const pem of pems) {
    try {
      new X509Certificate(pem);
    } catch (error) {
      throw new ToolServerError(`the identity keys CA ${caFile} holds a certificate that does not parse: ${(error as Error).message}`);
    }
  }
  try {
    return credentials.createSsl(ca);
  } catch (error) {
    throw new ToolServerError(`the identity keys CA ${caFile} is unusable: ${(error as Error).message}`);
  }
}

/** The milliseconds a `max_age` says (300 s when it says none), bounded to what a timer can wait. */
export function maxAgeMs(maxAge: GetIdentityKeysResponse["max_age"]): number {
  const ms = Number(maxAge?.seconds ?? 0) * 1000 + Number(maxAge?.nanos ?? 0) / 1e6;
  if (!(ms > 0) || !Number.isFinite(ms)) return DEFAULT_MAX_AGE_MS;
  return Math.min(Math.max(ms, MIN_MAX_AGE_MS), MAX_TIMER_MS);
}

/** Fetches the keys from a sidecar, in the background, until closed. */
export class KeysFetcher {
  readonly target: string;
  readonly #client: Client;
  readonly #onKeys: (keys: KeySet) => void;
  readonly #log: Logger | undefined;
  readonly #timing: FetchTiming;
  #timer: NodeJS.Timeout | undefined;
  #due = Infinity; // performance.now() of the next fetch
  #inFlight = false;
  #askedInFlight = false; // an unknown kid arrived while a fetch was on its way
  #lastStart = -Infinity;
  #retry: number;
  #jwks: string | undefined; // the JWKS of the last answer
  #keyCount = 0;
  #closed = false;

  /** @throws ToolServerError when the target is empty or the CA file cannot be read. */
  constructor(options: KeysFetcherOptions) {
    if (!options.target.trim()) throw new ToolServerError("the identity keys target is empty: give the sidecar's gRPC address");
    this.target = options.target;
    this.#onKeys = options.onKeys;
    this.#log = options.log;
    this.#timing = {
      retryMs: options.retryMs ?? 1_000,
      retryMaxMs: options.retryMaxMs ?? 30_000,
      unknownKidEveryMs: options.unknownKidEveryMs ?? 10_000,
    };
    for (const [name, value] of Object.entries(this.#timing)) {
      if (!(value > 0) || !Number.isFinite(value)) throw new ToolServerError(`the identity keys ${name} must be > 0, got ${value}`);
    }
    this.#retry = this.#timing.retryMs;
    this.#client = new Client(options.target, keysCredentials(options.target, options.caFile), {
      // The channel's own reconnection waits no longer than this loop does between tries.
      "grpc.initial_reconnect_backoff_ms": Math.min(this.#timing.retryMs, 1_000),
      "grpc.max_reconnect_backoff_ms": this.#timing.retryMaxMs,
    });
  }

  /** Whether keys have been fetched (an answer with usable keys arrived). */
  get fetched(): boolean {
    return this.#jwks !== undefined;
  }

  /** Fetches now, then goes on by the rule. */
  start(): void {
    if (!this.#closed && !this.#inFlight && this.#timer === undefined) this.#fetch();
  }

  /**
   * An assertion named a `kid` the keys lack: fetch soon, at most once every
   * `unknownKidEveryMs` (counted from the last fetch). Before the first keys the retries go on
   * as they are; during a fetch, the one after it comes as soon (its answer may predate the key).
   */
  refreshSoon(): void {
    if (this.#closed || !this.fetched) return;
    if (this.#inFlight) {
      this.#askedInFlight = true;
      return;
    }
    const now = performance.now();
    const at = Math.max(now, this.#lastStart + this.#timing.unknownKidEveryMs);
    if (at < this.#due) this.#schedule(at - now);
  }

  /** Stops fetching and closes the channel. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#client.close();
  }

  #schedule(delayMs: number): void {
    clearTimeout(this.#timer);
    const delay = Math.min(Math.max(0, delayMs), MAX_TIMER_MS);
    this.#due = performance.now() + delay;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#fetch();
    }, delay);
    this.#timer.unref();
  }

  #fetch(): void {
    if (this.#closed) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#due = Infinity;
    this.#inFlight = true;
    this.#lastStart = performance.now();
    const method = identityKeysService.GetIdentityKeys;
    if (method === undefined) throw new ToolServerError("identity.proto defines no GetIdentityKeys"); // a broken package
    this.#client.makeUnaryRequest<object, GetIdentityKeysResponse>(
      method.path,
      method.requestSerialize,
      method.responseDeserialize,
      {},
      new Metadata(),
      { deadline: Date.now() + FETCH_TIMEOUT_MS },
      (error: ServiceError | null, reply?: GetIdentityKeysResponse) => {
        this.#inFlight = false;
        const asked = this.#askedInFlight;
        this.#askedInFlight = false;
        if (this.#closed) return;
        if (error) {
          this.#failed(`${status[error.code] ?? error.code}: ${error.details || error.message}`);
          return;
        }
        try {
          this.#answered(reply ?? {});
        } catch (problem) {
          this.#failed((problem as Error).message);
          return;
        }
        if (asked) this.refreshSoon();
      },
    );
  }

  #answered(reply: GetIdentityKeysResponse): void {
    const jwks = reply.jwks ?? "";
    const keys = parseJwks(jwks, `the JWKS of ${this.target}`);
    const maxAge = maxAgeMs(reply.max_age);
    this.#retry = this.#timing.retryMs;
    const first = this.#jwks === undefined;
    if (jwks !== this.#jwks) {
      this.#jwks = jwks;
      this.#keyCount = keyCount(keys);
      this.#onKeys(keys);
      this.#log?.info(`identity keys ${first ? "fetched" : "changed"} from ${this.target}: ${this.#keyCount} keys, asked again in ${maxAge / 1000} s`);
    } else {
      this.#log?.debug(`identity keys from ${this.target} unchanged, asked again in ${maxAge / 1000} s`);
    }
    this.#schedule(maxAge);
  }

  #failed(reason: string): void {
    const wait = this.#retry;
    this.#retry = Math.min(this.#retry * 2, this.#timing.retryMaxMs);
    this.#log?.warn(
      this.fetched
        ? `identity keys not refreshed from ${this.target} (keeping the ${this.#keyCount} keys it has), asked again in ${wait / 1000} s: ${reason}`
        : `identity keys not fetched from ${this.target} yet, asked again in ${wait / 1000} s: ${reason}`,
    );
    this.#schedule(wait);
  }
}
