/**
 * The sidecar's public keys, from the file `--identity-keys` names: a JWKS (`agent-sidecar
 * identity jwks` prints it; keys by `kid`) or one PEM public key (which takes any `kid`); or
 * the JWKS a sidecar serves (`--identity-keys-from`, parsed by the same {@link parseJwks}).
 * Only the kinds the sidecar signs with are kept: Ed25519 (EdDSA) and ECDSA P-256 (ES256).
 */
import { createPublicKey, type KeyObject } from "node:crypto";
import { readFileSync, statSync } from "node:fs";

import { ToolServerError } from "./errors.js";

export type Algorithm = "EdDSA" | "ES256";
export const ALGORITHMS: readonly Algorithm[] = ["EdDSA", "ES256"];

/** One key the sidecar may sign with, and the algorithm it signs. */
export interface PublicKey {
  readonly alg: Algorithm;
  readonly key: KeyObject;
}

/** The keys of a file: by `kid`, or the one key of a PEM file. */
export type KeySet = { readonly byKid: ReadonlyMap<string, PublicKey> } | { readonly pem: PublicKey };

/** The key `kid` names, or undefined; a PEM file's key takes any kid (or none). */
export function keyFor(keys: KeySet, kid: unknown): PublicKey | undefined {
  if ("pem" in keys) return keys.pem;
  return typeof kid === "string" ? keys.byKid.get(kid) : undefined;
}

export function keyCount(keys: KeySet): number {
  return "pem" in keys ? 1 : keys.byKid.size;
}

/**
 * Reads a keys file.
 *
 * @throws ToolServerError when it cannot be read or holds no key the sidecar signs with.
 */
export function loadKeys(path: string): KeySet {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new ToolServerError(`cannot read the identity keys ${path}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
  }
  const unusable = unusableKeys(path);
  if (text.trimStart().startsWith("-----BEGIN")) {
    // A private key would parse too (its public half derived): refuse what is not public.
    if (!text.includes("-----BEGIN PUBLIC KEY-----")) throw unusable;
    let key: KeyObject;
    try {
      key = createPublicKey({ key: text, format: "pem" });
    } catch {
      throw unusable;
    }
    const pem = supported(key);
    if (!pem) throw unusable;
    return { pem };
  }
  return parseJwks(text, path, true);
}

/**
 * The keys of a JWKS (a file's, or one a sidecar serves): each entry with a `kid` and a key of
 * a kind the sidecar signs with is kept; other entries are skipped. `source` names where the
 * text came from, in the messages (which mention PEM keys when `orPem`: a file may hold one).
 *
 * @throws ToolServerError when the text is no JWKS or holds no usable key.
 */
export function parseJwks(text: string, source: string, orPem = false): KeySet {
  let set: unknown;
  try {
    set = JSON.parse(text);
  } catch {
    set = undefined;
  }
  const entries = typeof set === "object" && set !== null ? (set as { keys?: unknown }).keys : undefined;
  if (!Array.isArray(entries)) {
    const jwks = 'a JWKS (a JSON object with "keys")';
    throw new ToolServerError(orPem ? `${source} is neither ${jwks} nor a PEM key` : `${source} is not ${jwks}`);
  }
  const byKid = new Map<string, PublicKey>();
  for (const jwk of entries as unknown[]) {
    if (typeof jwk !== "object" || jwk === null) continue;
    const { kid } = jwk as { kid?: unknown };
    if (typeof kid !== "string" || !kid) continue;
    const key = fromJwk(jwk as Record<string, unknown>);
    if (key) byKid.set(kid, key);
  }
  if (!byKid.size) throw unusableKeys(source, orPem);
  return { byKid };
}

function unusableKeys(source: string, orPem = true): ToolServerError {
  const jwks = "a JWKS as 'agent-sidecar identity jwks' prints it (each key with a kid)";
  return new ToolServerError(
    `${source} holds no usable key: ` +
      (orPem ? `an Ed25519 (EdDSA) or ECDSA P-256 (ES256) public key as PEM, or ${jwks}` : `${jwks}, of Ed25519 (EdDSA) or ECDSA P-256 (ES256) keys`),
  );
}

/** The key of an OKP Ed25519 or EC P-256 JWK; other kinds (another party's keys) are skipped. */
function fromJwk(jwk: Record<string, unknown>): PublicKey | undefined {
  const { kty, crv, x, y, alg } = jwk;
  const okp = kty === "OKP" && crv === "Ed25519" && (alg === undefined || alg === "EdDSA");
  const ec = kty === "EC" && crv === "P-256" && (alg === undefined || alg === "ES256");
  if (!okp && !ec) return undefined;
  if (typeof x !== "string" || (ec && typeof y !== "string")) return undefined;
  try {
    // Only the public parameters are read: whatever else the JWK holds decides nothing.
    const key = createPublicKey({ key: ec ? { kty, crv, x, y } : { kty, crv, x }, format: "jwk" } as Parameters<typeof createPublicKey>[0]);
    return supported(key);
  } catch {
    return undefined;
  }
}

function supported(key: KeyObject): PublicKey | undefined {
  if (key.asymmetricKeyType === "ed25519") return { alg: "EdDSA", key };
  if (key.asymmetricKeyType === "ec" && key.asymmetricKeyDetails?.namedCurve === "prime256v1") return { alg: "ES256", key };
  return undefined;
}

/** Whether a file changed (modification time, size, inode) since last asked. */
export class FileWatch {
  readonly #path: string;
  #seen: string;

  constructor(path: string) {
    this.#path = path;
    this.#seen = this.#state();
  }

  changed(): boolean {
    const state = this.#state();
    if (state === this.#seen) return false;
    this.#seen = state;
    return true;
  }

  #state(): string {
    try {
      const stat = statSync(this.#path, { bigint: true });
      return `${stat.mtimeNs}:${stat.size}:${stat.ino}`;
    } catch {
      return "";
    }
  }
}
