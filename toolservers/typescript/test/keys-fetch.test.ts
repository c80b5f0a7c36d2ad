// The identity keys fetched from a sidecar (--identity-keys-from): a real gRPC server in the
// test answers agentsidecar.v1.IdentityKeysService as the sidecar does, and the verifier, an
// in-process ToolServer and the fixture server process fetch from it: before the first answer,
// after it, on a rotation (an unknown kid), on a failed refresh, every max_age, over TLS, and
// not past their stop.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";

import * as grpc from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";

import { type CallerIdentity, IdentityRefused, IdentityVerifier, type Logger, parseServeArgs, ToolServer } from "@agent-sidecar/toolserver";

import { assertion, certificates, metadataOf, PACKAGE_ROOT, serving, sidecarKey, startFixture, statusOf, Tools, within } from "./support.js";

const NOT_FETCHED = "the identity keys are not fetched yet";

type Answer = { jwks: string; max_age?: { seconds: number; nanos?: number } } | { code: grpc.status; details: string };

/**
 * A sidecar's IdentityKeysService on 127.0.0.1: `answer` decides each reply (a JWKS and
 * max_age, or an error status); `requests` counts the calls.
 */
class KeysServer {
  answer: () => Answer;
  requests = 0;
  readonly #server = new grpc.Server();
  #waiters: { count: number; resolve: () => void }[] = [];
  address = "";

  constructor(answer: () => Answer) {
    this.answer = answer;
    const definition = loadSync(path.join(PACKAGE_ROOT, "proto", "agentsidecar", "v1", "identity.proto"), {
      keepCase: true,
      longs: String,
      defaults: true,
      includeDirs: [path.join(PACKAGE_ROOT, "proto")],
    });
    const service = definition["agentsidecar.v1.IdentityKeysService"] as grpc.ServiceDefinition;
    this.#server.addService(service, {
      GetIdentityKeys: (_call: grpc.ServerUnaryCall<object, object>, callback: grpc.sendUnaryData<object>) => {
        this.requests += 1;
        const reply = this.answer();
        if ("code" in reply) callback({ code: reply.code, details: reply.details });
        else callback(null, { max_age: { seconds: 300 }, ...reply });
        for (const waiter of this.#waiters.filter((w) => this.requests >= w.count)) waiter.resolve();
        this.#waiters = this.#waiters.filter((w) => this.requests < w.count);
      },
    });
  }

  async start(credentials = grpc.ServerCredentials.createInsecure()): Promise<this> {
    const port = await new Promise<number>((resolve, reject) =>
      this.#server.bindAsync("127.0.0.1:0", credentials, (error, bound) => (error ? reject(error) : resolve(bound))),
    );
    this.address = `127.0.0.1:${port}`;
    return this;
  }

  get port(): string {
    return this.address.split(":")[1] ?? "";
  }

  /** Resolves once `count` requests have been answered in all. */
  answered(count: number, ms = 10_000): Promise<void> {
    if (this.requests >= count) return Promise.resolve();
    return within(new Promise<void>((resolve) => this.#waiters.push({ count, resolve })), ms, `request ${count} of the keys`);
  }

  stop(): void {
    this.#server.forceShutdown();
  }
}

const jwksOf = (...keys: { jwk: object }[]): string => JSON.stringify({ keys: keys.map((k) => k.jwk) });

/** A logger that keeps the warnings. */
function keptLog(): { log: Logger; warnings: string[] } {
  const warnings: string[] = [];
  const ignore = () => undefined;
  return { log: { debug: ignore, info: ignore, warn: (m) => warnings.push(m), error: ignore }, warnings };
}

/** The outcome of verifying `token` now: the identity, or the refusal's message. */
async function outcome(verifier: IdentityVerifier, token: string, callId = "c1"): Promise<CallerIdentity | string> {
  try {
    return await verifier.verify(metadataOf([], token), callId);
  } catch (error) {
    if (error instanceof IdentityRefused) return error.message;
    throw error;
  }
}

/** Tries `attempt` every 20 ms until it returns something other than undefined. */
async function eventually<T>(attempt: () => Promise<T | undefined>, what: string, ms = 10_000): Promise<T> {
  const until = performance.now() + ms;
  for (;;) {
    const result = await attempt();
    if (result !== undefined) return result;
    if (performance.now() > until) throw new Error(`${what} did not happen within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The identity once `token` verifies (it is refused only as `refusedAs` until then). */
function verifiedSoon(verifier: IdentityVerifier, token: string, refusedAs: RegExp): Promise<CallerIdentity> {
  return eventually(async () => {
    const result = await outcome(verifier, token);
    if (typeof result !== "string") return result;
    assert.match(result, refusedAs);
    return undefined;
  }, "the verification");
}

test("keys fetched from a sidecar verify an assertion signed with them", async () => {
  const key = await sidecarKey();
  const keys = await new KeysServer(() => ({ jwks: jwksOf(key) })).start();
  const verifier = new IdentityVerifier({ keysFrom: keys.address, audience: "orders" });
  try {
    const sent = metadataOf(
      [["x-agent-principal", "alice"], ["x-agent-session-id", "s-1"], ["x-agent-run-id", "r-1"], ["x-agent-call-id", "call-1"], ["x-agent-labels-bin", '{"tenant":"acme"}']],
      await assertion(key),
    );
    const identity = await eventually(async () => {
      try {
        return await verifier.verify(sent, "call-1");
      } catch (error) {
        assert.match((error as Error).message, new RegExp(NOT_FETCHED));
        return undefined;
      }
    }, "the verification");
    assert.equal(identity.verified, true);
    assert.equal(identity.principal, "alice");
    assert.deepEqual([identity.sessionId, identity.runId, identity.callId], ["s-1", "r-1", "call-1"]);
    assert.deepEqual(identity.labels, { tenant: "acme" });
    assert.equal(identity.claims.aud, "orders");
    assert.equal(keys.requests, 1, "fetched more than once");
  } finally {
    verifier.close();
    keys.stop();
  }
});

test("until the sidecar answers, a call carrying an assertion is refused UNAUTHENTICATED; then it verifies", async () => {
  const key = await sidecarKey();
  let available = false;
  const keys = await new KeysServer(() => (available ? { jwks: jwksOf(key) } : { code: grpc.status.UNAVAILABLE, details: "starting" })).start();
  const server = new ToolServer("orders");
  server.tool({ name: "whoami", description: "Answer with the caller's identity." }, (_args, context) => context.identity);
  const { tools, close } = await serving(server, { identityKeysFrom: keys.address, identityAudience: "orders", identityRequired: true });
  try {
    await keys.answered(1);
    const token = await assertion(key);
    const refused = await statusOf(tools.call("whoami", {}, { metadata: metadataOf([], token) }));
    assert.equal(refused.code, grpc.status.UNAUTHENTICATED);
    assert.ok(refused.details.includes(`${NOT_FETCHED} from ${keys.address}`), refused.details);
    const none = await statusOf(tools.call("whoami", {}));
    assert.match(none.details, /carries no identity assertion/, "a call without an assertion is refused as before");

    available = true; // the retry, a second later, finds the keys
    const answer = await eventually(async () => {
      try {
        return JSON.parse((await tools.call("whoami", {}, { metadata: metadataOf([], token) })).output ?? "");
      } catch (error) {
        assert.match((error as grpc.ServiceError).details, new RegExp(NOT_FETCHED));
        return undefined;
      }
    }, "the verified call");
    assert.equal(answer.verified, true);
    assert.equal(answer.principal, "alice");
    assert.equal(keys.requests, 2);
  } finally {
    close();
    keys.stop();
  }
});

test("a failed fetch is retried, the wait doubling up to its cap", async () => {
  const keys = await new KeysServer(() => ({ code: grpc.status.UNAVAILABLE, details: "not yet" })).start();
  const { log, warnings } = keptLog();
  const verifier = new IdentityVerifier({ keysFrom: keys.address, audience: "orders", keysRetryAfter: 0.05, keysRetryMax: 0.2, log });
  try {
    const started = performance.now();
    await keys.answered(6);
    // Waits of 50, 100, 200, 200, 200 ms: at least 750 ms in all.
    assert.ok(performance.now() - started >= 700, `${performance.now() - started} ms`);
    assert.match(warnings[0] ?? "", /identity keys not fetched from 127\.0\.0\.1:\d+ yet, asked again in 0\.05 s: UNAVAILABLE: not yet/);
    assert.match(warnings[1] ?? "", /asked again in 0\.1 s/);
    assert.match(warnings[4] ?? "", /asked again in 0\.2 s/);
  } finally {
    verifier.close();
    keys.stop();
  }
});

test("a rotation: an assertion's unknown kid has the keys fetched again, and new keys forget the verified assertions", async () => {
  const first = await sidecarKey("first");
  const second = await sidecarKey("second");
  let jwks = jwksOf(first);
  const keys = await new KeysServer(() => ({ jwks })).start();
  const verifier = new IdentityVerifier({ keysFrom: keys.address, audience: "orders", keysUnknownKidEvery: 0.05 });
  try {
    const old = await assertion(first);
    await verifiedSoon(verifier, old, new RegExp(NOT_FETCHED));
    assert.equal(keys.requests, 1);

    jwks = jwksOf(first, second); // the sidecar publishes its next key
    const next = await assertion(second);
    assert.match(await outcome(verifier, next) as string, /does not know \(kid "second"\): it asks 127\.0\.0\.1:\d+ for the keys again/);
    const identity = await verifiedSoon(verifier, next, /does not know \(kid "second"\)/);
    assert.equal(identity.verified, true);
    assert.equal(typeof (await outcome(verifier, old)), "object", "the first key is still published");

    jwks = jwksOf(second); // and retires the first
    const before = keys.requests;
    assert.match(await outcome(verifier, await assertion(await sidecarKey("third"))) as string, /does not know \(kid "third"\)/);
    await keys.answered(before + 1);
    const forgotten = await eventually(async () => {
      const result = await outcome(verifier, old);
      return typeof result === "string" ? result : undefined;
    }, "the first key's retirement");
    assert.match(forgotten, /does not know \(kid "first"\)/, "the verified assertion was not forgotten");
  } finally {
    verifier.close();
    keys.stop();
  }
});

test("an unknown kid asks again at most once every keysUnknownKidEvery", async () => {
  const key = await sidecarKey();
  const keys = await new KeysServer(() => ({ jwks: jwksOf(key) })).start();
  const verifier = new IdentityVerifier({ keysFrom: keys.address, audience: "orders" }); // every 10 s
  try {
    await verifiedSoon(verifier, await assertion(key), new RegExp(NOT_FETCHED));
    const stranger = await assertion(await sidecarKey("stranger"));
    for (let i = 0; i < 5; i += 1) {
      assert.match(await outcome(verifier, stranger) as string, /does not know \(kid "stranger"\)/);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.equal(keys.requests, 1, "asked again within 10 s of the last fetch");
  } finally {
    verifier.close();
    keys.stop();
  }
});

test("a failed refresh keeps the keys it has, and says so in a warning", async () => {
  const key = await sidecarKey("kept");
  let answer: Answer = { jwks: jwksOf(key) };
  const keys = await new KeysServer(() => answer).start();
  const { log, warnings } = keptLog();
  const verifier = new IdentityVerifier({
    keysFrom: keys.address,
    audience: "orders",
    keysUnknownKidEvery: 0.05,
    keysRetryAfter: 0.05,
    log,
  });
  try {
    await verifiedSoon(verifier, await assertion(key), new RegExp(NOT_FETCHED));
    for (const [failure, logged] of [
      [{ code: grpc.status.UNAVAILABLE, details: "restarting" }, /UNAVAILABLE: restarting/],
      [{ jwks: "{not json" }, /the JWKS of 127\.0\.0\.1:\d+ is not a JWKS/],
      [{ jwks: JSON.stringify({ keys: [{ kty: "RSA", kid: "r", n: "AQAB", e: "AQAB" }] }) }, /holds no usable key/],
    ] as const) {
      answer = failure;
      warnings.length = 0;
      await outcome(verifier, await assertion(await sidecarKey("unknown"))); // asks for the keys again
      await eventually(async () => (warnings.some((w) => logged.test(w)) ? true : undefined), `the warning ${logged} (${JSON.stringify(warnings)}, ${keys.requests} requests)`);
      for (const warning of warnings) {
        assert.match(warning, /identity keys not refreshed from 127\.0\.0\.1:\d+ \(keeping the 1 keys it has\), asked again in/);
      }
      const fresh = await outcome(verifier, await assertion(key)); // a new assertion: not from the cache
      assert.equal(typeof fresh, "object", `refused after a failed refresh: ${String(fresh)}`);
      answer = { jwks: jwksOf(key) }; // and the retry finds the keys again
      await keys.answered(keys.requests + 1);
    }
  } finally {
    verifier.close();
    keys.stop();
  }
});

test("the keys are fetched again every max_age", async () => {
  const key = await sidecarKey();
  const keys = await new KeysServer(() => ({ jwks: jwksOf(key), max_age: { seconds: 0, nanos: 300_000_000 } })).start();
  const verifier = new IdentityVerifier({ keysFrom: keys.address, audience: "orders" });
  try {
    const started = performance.now();
    await keys.answered(1);
    await keys.answered(2, 5_000); // max_age under 1 s counts as 1 s
    assert.ok(performance.now() - started >= 900, `asked again after ${performance.now() - started} ms`);
  } finally {
    verifier.close();
    keys.stop();
  }
});

test("closing the verifier stops the fetching", async () => {
  const keys = await new KeysServer(() => ({ code: grpc.status.UNAVAILABLE, details: "down" })).start();
  const verifier = new IdentityVerifier({ keysFrom: keys.address, audience: "orders", keysRetryAfter: 0.02, keysRetryMax: 0.02 });
  await keys.answered(3);
  verifier.close();
  const closed = keys.requests;
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.ok(keys.requests <= closed + 1, `${keys.requests - closed} requests after the close`);
  keys.stop();
});

test("TLS: a CA file has the keys fetched over TLS, verified against it; an unreadable one fails the start", async () => {
  const certs = certificates();
  const key = await sidecarKey();
  const keys = await new KeysServer(() => ({ jwks: jwksOf(key) })).start(
    grpc.ServerCredentials.createSsl(null, [{ cert_chain: readFileSync(certs.server.cert), private_key: readFileSync(certs.server.key) }]),
  );
  const verifier = new IdentityVerifier({ keysFrom: `localhost:${keys.port}`, keysCa: certs.ca, audience: "orders" });
  try {
    assert.equal((await verifiedSoon(verifier, await assertion(key), new RegExp(NOT_FETCHED))).verified, true);
  } finally {
    verifier.close();
    keys.stop();
  }
  const absent = path.join(mkdtempSync(path.join(tmpdir(), "toolserver-keys-")), "absent-ca.pem");
  await assert.rejects(
    new ToolServer("orders").listen({ logLevel: "error", identityKeysFrom: keys.address, identityKeysCa: absent, identityAudience: "orders" }),
    { name: "ToolServerError", message: /cannot read the identity keys CA .*absent-ca\.pem: ENOENT/ },
  );
  const garbage = path.join(path.dirname(absent), "garbage.pem");
  writeFileSync(garbage, "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n");
  assert.throws(() => new IdentityVerifier({ keysFrom: keys.address, keysCa: garbage, audience: "orders" }), /does not parse/);
});

test("a target off this machine is dialled with TLS: a plaintext keys server there is never asked", async () => {
  const key = await sidecarKey();
  const keys = await new KeysServer(() => ({ jwks: jwksOf(key) })).start();
  const { log, warnings } = keptLog();
  // 0.0.0.0 is no loopback address (on Linux a connection to it reaches this machine's
  // listeners, so the TLS handshake meets the plaintext server and fails).
  const verifier = new IdentityVerifier({ keysFrom: `0.0.0.0:${keys.port}`, audience: "orders", keysRetryAfter: 0.05, log });
  try {
    await eventually(async () => (warnings.length >= 2 ? true : undefined), "two failed fetches");
    assert.equal(keys.requests, 0);
    assert.match(warnings[0] ?? "", /SSL/, "the failure is not the TLS handshake's");
    assert.match(await outcome(verifier, await assertion(key)) as string, new RegExp(NOT_FETCHED));
  } finally {
    verifier.close();
    keys.stop();
  }
});

test("the keys-from flags, and the options that go with them", () => {
  const options = parseServeArgs(["--identity-keys-from", "unix:/run/sidecar.sock", "--identity-audience", "orders", "--require-identity"]);
  assert.deepEqual([options.identityKeysFrom, options.identityKeysFile, options.identityRequired], ["unix:/run/sidecar.sock", undefined, true]);
  const ca = parseServeArgs(["--identity-keys-from", "sidecar:7000", "--identity-keys-ca", "ca.pem", "--identity-audience", "o"]);
  assert.deepEqual([ca.identityKeysFrom, ca.identityKeysCa], ["sidecar:7000", "ca.pem"]);
  assert.throws(
    () => parseServeArgs(["--identity-keys", "k.json", "--identity-keys-from", "localhost:7000", "--identity-audience", "o"]),
    /--identity-keys and --identity-keys-from are alternatives: give one/,
  );
  assert.throws(() => parseServeArgs(["--identity-keys-from", "localhost:7000"]), /--identity-keys-from needs --identity-audience/);
  assert.throws(() => parseServeArgs(["--identity-keys-ca", "ca.pem"]), /--identity-keys-ca needs --identity-keys-from/);
  assert.throws(() => parseServeArgs(["--identity-keys-from", " ", "--identity-audience", "o"]), /--identity-keys-from is empty/);
  assert.throws(() => parseServeArgs(["--require-identity"]), /--require-identity needs --identity-keys or --identity-keys-from/);
  assert.throws(() => new IdentityVerifier({ audience: "orders" }), /one of the two/);
  assert.throws(() => new IdentityVerifier({ keysFile: "k.json", keysFrom: "localhost:1", audience: "orders" }), /one of the two/);
});

test("a process fetching the keys exits on its own: the fetcher keeps nothing alive", async () => {
  const key = await sidecarKey();
  const keys = await new KeysServer(() => ({ jwks: jwksOf(key) })).start();
  try {
    const index = path.join(PACKAGE_ROOT, "dist", "index.js");
    for (const target of [keys.address, "127.0.0.1:1"]) {
      // Fetched (and waiting for max_age), or failing (waiting to try again): either way it exits.
      const script = [
        `import { IdentityVerifier } from ${JSON.stringify(index)};`,
        `const verifier = new IdentityVerifier({ keysFrom: ${JSON.stringify(target)}, audience: "orders" });`,
        "setTimeout(() => process.stdout.write('waited\\n'), 1500);",
      ].join("\n");
      const child = spawn(process.execPath, ["--input-type=module", "-e", script]);
      let output = "";
      child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
      const [code] = (await within(once(child, "exit"), 10_000, `the exit of a process fetching from ${target}`)) as [number];
      assert.equal(code, 0);
      assert.equal(output, "waited\n");
    }
    assert.ok(keys.requests >= 1);
  } finally {
    keys.stop();
  }
});

test("the fixture server process, given --identity-keys-from, verifies a valid call with the fetched keys", async () => {
  const key = await sidecarKey();
  const keys = await new KeysServer(() => ({ jwks: jwksOf(key) })).start();
  const { child, address, exited } = await startFixture(["--identity-keys-from", keys.address, "--identity-audience", "fixture", "--require-identity"]);
  const tools = new Tools(address);
  try {
    const token = await assertion(key, { audience: "fixture" });
    const sent = metadataOf(
      [["x-agent-principal", "alice"], ["x-agent-session-id", "s-1"], ["x-agent-run-id", "r-1"], ["x-agent-call-id", "call-1"], ["x-agent-labels-bin", '{"tenant":"acme"}']],
      token,
    );
    const answer = await eventually(async () => {
      try {
        return JSON.parse((await tools.call("whoami", {}, { call_id: "call-1", metadata: sent })).output ?? "");
      } catch (error) {
        assert.match((error as grpc.ServiceError).details, new RegExp(NOT_FETCHED));
        return undefined;
      }
    }, "the verified call");
    assert.equal(answer.runs, 1, "a refused call ran the tool");
    assert.equal(answer.identity.verified, true);
    assert.equal(answer.identity.principal, "alice");
    assert.deepEqual([answer.identity.sessionId, answer.identity.runId, answer.identity.callId], ["s-1", "r-1", "call-1"]);
    assert.deepEqual(answer.identity.labels, { tenant: "acme" });
    assert.equal(answer.identity.claims.aud, "fixture");
    const none = await statusOf(tools.call("whoami", {}));
    assert.equal(none.code, grpc.status.UNAUTHENTICATED);
    assert.equal(keys.requests, 1);
  } finally {
    tools.close();
    child.kill("SIGTERM");
    const [code] = (await within(exited, 20_000, "the exit")) as [number];
    assert.equal(code, 0);
    keys.stop();
  }
});
