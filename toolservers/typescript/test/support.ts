/**
 * What the tests talk to a tool server with: grpc-js clients built from the package's own
 * `.proto` files through proto-loader (as any client in another project would), and a few
 * helpers to coordinate with events instead of sleeping.
 */
import assert from "node:assert/strict";
import { type ChildProcessWithoutNullStreams, execFileSync, spawn } from "node:child_process";
import { generateKeyPairSync, type KeyObject, randomUUID } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import * as grpc from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";
import { protoPath as healthProtoPath } from "grpc-health-check";
import { exportJWK, SignJWT } from "jose";

import { type RunningServer, ToolServer, type ServeOptions } from "@agent-sidecar/toolserver";

const HERE = path.dirname(fileURLToPath(import.meta.url));
/** This package's root: the tests run as build/test/*.js. */
export const PACKAGE_ROOT = path.resolve(HERE, "..", "..");
export const REPO_ROOT = path.resolve(PACKAGE_ROOT, "..", "..");

const definition = loadSync(
  [path.join(PACKAGE_ROOT, "proto", "agentsidecar", "v1", "tool.proto"), healthProtoPath],
  { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true, includeDirs: [path.join(PACKAGE_ROOT, "proto")] },
);
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const loaded = grpc.loadPackageDefinition(definition) as any;
type Constructor = new (address: string, credentials: grpc.ChannelCredentials, options?: grpc.ChannelOptions) => grpc.Client;
const ToolServiceClient: Constructor = loaded.agentsidecar.v1.ToolService;
const HealthClient: Constructor = loaded.grpc.health.v1.Health;

export interface ToolResult {
  call_id: string;
  outcome: "output" | "error";
  output?: string;
  error?: { kind: string; message: string };
  handler_duration?: { seconds: string; nanos: number };
}

export interface Descriptor {
  name: string;
  description: string;
  input_schema: string;
  output_schema: string;
  read_only: boolean;
  idempotent: boolean;
  destructive: boolean;
  requires_approval: boolean;
  read_keys: string[];
  write_keys: string[];
  default_timeout: { seconds: string; nanos: number } | null;
  cache_ttl: { seconds: string; nanos: number } | null;
  version: string;
  result_fields: string[];
}

/** A client of one tool server: ToolService and Health. */
export class Tools {
  readonly raw: grpc.Client;
  readonly health: grpc.Client;

  constructor(address: string, credentials = grpc.credentials.createInsecure(), options: grpc.ChannelOptions = {}) {
    this.raw = new ToolServiceClient(address, credentials, options);
    this.health = new HealthClient(address, credentials, options);
  }

  listTools(metadata = new grpc.Metadata()): Promise<{ tools: Descriptor[]; tool_set_version: string }> {
    return unary(this.raw, "ListTools", {}, metadata, {});
  }

  async call(
    tool_name: string,
    args: unknown,
    { call_id = "c1", deadline, metadata = new grpc.Metadata() }: { call_id?: string; deadline?: number; metadata?: grpc.Metadata } = {},
  ): Promise<ToolResult> {
    const text = typeof args === "string" ? args : JSON.stringify(args);
    const reply = await unary<{ result: ToolResult }>(this.raw, "CallTool", { call_id, tool_name, arguments: text }, metadata, deadline ? { deadline } : {});
    return reply.result;
  }

  stream(tool_name: string, args: unknown, options: grpc.CallOptions = {}): grpc.ClientReadableStream<{ event: string; progress?: { progress: number; total: number; message: string }; result?: ToolResult }> {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    return (this.raw as any).StreamTool({ call: { call_id: "s1", tool_name, arguments: JSON.stringify(args) } }, options);
  }

  check(service = ""): Promise<{ status: string }> {
    return unary(this.health, "Check", { service }, new grpc.Metadata(), { deadline: Date.now() + 5000 });
  }

  close(): void {
    this.raw.close();
    this.health.close();
  }
}

function unary<T>(client: grpc.Client, method: string, request: object, metadata: grpc.Metadata, options: grpc.CallOptions): Promise<T> {
  return new Promise((resolve, reject) => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    (client as any)[method](request, metadata, { deadline: Date.now() + 10_000, ...options }, (error: grpc.ServiceError | null, reply: T) =>
      error ? reject(error) : resolve(reply),
    );
  });
}

/** Rejects with the gRPC error a promise rejects with, and fails when it resolves. */
export async function statusOf(promise: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await promise;
  } catch (error) {
    return error as grpc.ServiceError;
  }
  throw new Error("the call succeeded; expected a status");
}

/** A server of `tools` listening on a free port; `close()` stops it. */
export async function serving(
  server: ToolServer,
  options: ServeOptions = {},
): Promise<{ running: RunningServer; tools: Tools; close(): void }> {
  const running = await server.listen({ logLevel: "error", ...options });
  const tools = new Tools(running.address);
  return {
    running,
    tools,
    close() {
      tools.close();
      running.stop();
    },
  };
}

/** A promise with its resolve function, to wait for an event from inside a handler. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** Resolves with `promise`, or rejects when it takes longer than `ms` (a bound, not a sleep). */
export function within<T>(promise: Promise<T>, ms = 10_000, what = "the event"): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** The fixture server (test/fixture-server.ts) as a process of its own, started through ToolServer.main. */
export async function startFixture(args: string[] = []): Promise<{ child: ChildProcessWithoutNullStreams; address: string; exited: Promise<unknown[]> }> {
  const script = path.join(PACKAGE_ROOT, "build", "test", "fixture-server.js");
  const child = spawn(process.execPath, [script, "--port", "0", "--log-level", "warn", ...args]);
  const exited = once(child, "exit");
  const lines = createInterface({ input: child.stdout });
  const first = await within(once(lines, "line") as Promise<string[]>, 30_000, "the listening line");
  const address = (first[0] ?? "").replace(/^listening on /, "");
  assert.match(first[0] ?? "", /^listening on 127\.0\.0\.1:\d+$/);
  return { child, address, exited };
}

/** A certificate authority made at run time by the repository's Python test helpers. */
export function certificates(): { ca: string; server: { cert: string; key: string }; client: { cert: string; key: string } } {
  const dir = mkdtempSync(path.join(tmpdir(), "toolserver-tls-"));
  const python = process.env.AGENT_SIDECAR_PYTHON ?? path.join(REPO_ROOT, ".venv", "bin", "python");
  const script = [
    "import json, sys, pathlib",
    "from sidecar.testing.certs import TestCA",
    "ca = TestCA(pathlib.Path(sys.argv[1]))",
    "server = ca.issue('server')",
    "client = ca.issue('client', client=True)",
    "print(json.dumps({'ca': ca.ca_file, 'server': {'cert': server.cert_file, 'key': server.key_file}, 'client': {'cert': client.cert_file, 'key': client.key_file}}))",
  ].join("\n");
  return JSON.parse(execFileSync(python, ["-c", script, dir], { cwd: REPO_ROOT, encoding: "utf8" }));
}

/** Metadata as a sidecar sends it: `-bin` entries as their UTF-8 bytes. */
export function metadataOf(entries: readonly (readonly [string, string])[], token?: string | null): grpc.Metadata {
  const metadata = new grpc.Metadata();
  for (const [key, value] of entries) metadata.add(key, key.endsWith("-bin") ? Buffer.from(value, "utf8") : value);
  if (token) metadata.add("x-agent-identity", token);
  return metadata;
}

/** A key pair of the sidecar's kind, and its JWKS entry. */
export async function sidecarKey(kid: string = randomUUID()): Promise<{ privateKey: KeyObject; publicKey: KeyObject; jwk: object; kid: string }> {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  return { privateKey, publicKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: "EdDSA", use: "sig" }, kid };
}

/** An assertion as the sidecar signs one: iat now, exp in 5 minutes. */
export function assertion(
  key: { privateKey: KeyObject; kid?: string },
  { audience = "orders", now = Math.floor(Date.now() / 1000), sub = "alice" }: { audience?: string; now?: number; sub?: string } = {},
): Promise<string> {
  return new SignJWT({ sid: "s-1", run_id: "r-1", labels: { tenant: "acme" }, jti: randomUUID() })
    .setProtectedHeader({ alg: "EdDSA", typ: "JWT", ...(key.kid === undefined ? {} : { kid: key.kid }) })
    .setIssuer("agent-sidecar")
    .setSubject(sub)
    .setAudience(audience)
    .setIssuedAt(now)
    .setExpirationTime(now + 300)
    .sign(key.privateKey);
}
