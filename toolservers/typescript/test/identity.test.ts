// Who a call serves: the plain identity metadata, the assertion's verification rule through
// the shared vectors (tests/security/identity-vectors.json), the verifier's keys, cache and
// reloads, the flags, and a server process that requires a verified identity.
import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";

import * as grpc from "@grpc/grpc-js";
import {
  type CallerIdentity,
  IdentityRefused,
  IdentityVerifier,
  MalformedIdentity,
  parseServeArgs,
  plainIdentity,
  ToolServer,
} from "@agent-sidecar/toolserver";

import { assertion, metadataOf, REPO_ROOT, serving, sidecarKey, startFixture, statusOf, Tools, within } from "./support.js";

interface Vectors {
  now: number;
  audience: string;
  issuer: string;
  leeway: number;
  call_id: string;
  jwks: { keys: object[] };
  reasons: Record<string, string>;
  cases: {
    name: string;
    token: string | null;
    metadata: [string, string][];
    verified?: { principal: string; session_id: string; run_id: string; call_id: string; labels: Record<string, string>; labels_omitted: boolean };
    refused?: string;
  }[];
}

const VECTORS: Vectors = JSON.parse(readFileSync(path.join(REPO_ROOT, "tests", "security", "identity-vectors.json"), "utf8"));
const DIR = mkdtempSync(path.join(tmpdir(), "toolserver-identity-"));

function file(name: string, content: string): string {
  const where = path.join(DIR, name);
  writeFileSync(where, content);
  return where;
}

function plain(identity: CallerIdentity) {
  return {
    principal: identity.principal,
    session_id: identity.sessionId,
    run_id: identity.runId,
    call_id: identity.callId,
    labels: { ...identity.labels },
    labels_omitted: identity.labelsOmitted,
  };
}

async function outcome(verifier: IdentityVerifier, vector: Vectors["cases"][number]): Promise<CallerIdentity | IdentityRefused> {
  try {
    return await verifier.verify(metadataOf(vector.metadata, vector.token), VECTORS.call_id);
  } catch (error) {
    if (error instanceof IdentityRefused) return error;
    throw error;
  }
}

function vectorVerifier(): IdentityVerifier {
  return new IdentityVerifier({
    keysFile: file("vectors-jwks.json", JSON.stringify(VECTORS.jwks)),
    audience: VECTORS.audience,
    issuer: VECTORS.issuer,
    leeway: VECTORS.leeway,
    required: true,
    clock: () => VECTORS.now,
  });
}

test("the vectors hold every case of the rule", () => {
  assert.ok(VECTORS.cases.length >= 60, `${VECTORS.cases.length} cases: read the whole file?`);
});

// Each case on a fresh verifier, then all of them on one (whose cache then answers the
// later cases that carry an assertion verified before).
for (const shared of [false, true]) {
  const one = shared ? vectorVerifier() : undefined;
  for (const vector of VECTORS.cases) {
    test(`identity vector${shared ? " (one verifier)" : ""}: ${vector.name}`, async () => {
      const result = await outcome(one ?? vectorVerifier(), vector);
      if (vector.verified) {
        assert.ok(!(result instanceof IdentityRefused), `refused: ${result instanceof IdentityRefused ? result.message : ""}`);
        assert.deepEqual(plain(result), vector.verified);
        assert.equal(result.verified, true);
        assert.equal(result.claims.iss, VECTORS.issuer);
      } else {
        const phrase = VECTORS.reasons[vector.refused ?? ""];
        assert.ok(phrase, `case names an unknown reason ${vector.refused}`);
        assert.ok(result instanceof IdentityRefused, `verified; expected a refusal holding ${JSON.stringify(phrase)}`);
        assert.ok(result.message.includes(phrase), `${JSON.stringify(result.message)} lacks ${JSON.stringify(phrase)}`);
        if (vector.token) assert.ok(!result.message.includes(vector.token.slice(0, 40)), "the message holds the token");
      }
    });
  }
}

test("the plain identity decodes percent-encoded text and the labels entry", () => {
  const identity = plainIdentity(
    metadataOf([
      ["x-agent-principal", "j%C3%BCrgen%20m%2Fx"],
      ["x-agent-session-id", "s-1"],
      ["x-agent-run-id", "r-%zz"],
      ["x-agent-labels-bin", '{"tenant":"äcme"}'],
    ]),
    "call-9",
  );
  assert.deepEqual(plain(identity), {
    principal: "jürgen m/x",
    session_id: "s-1",
    run_id: "r-%zz",
    call_id: "call-9",
    labels: { tenant: "äcme" },
    labels_omitted: false,
  });
  assert.equal(identity.verified, false);
  assert.deepEqual(identity.claims, {});
  assert.ok(Object.isFrozen(identity) && Object.isFrozen(identity.labels));
});

test("labels: absent is none, null is too large to send; the metadata's call id is the plain one", () => {
  const none = plainIdentity(metadataOf([]), "c1");
  assert.deepEqual([none.labels, none.labelsOmitted, none.principal, none.callId], [{}, false, "", "c1"]);
  const omitted = plainIdentity(metadataOf([["x-agent-labels-bin", "null"], ["x-agent-call-id", "c2"]]), "c1");
  assert.deepEqual([omitted.labels, omitted.labelsOmitted, omitted.callId], [{}, true, "c2"]);
});

test("malformed identity metadata: a repeated key, labels that are no object of strings", () => {
  const repeated = metadataOf([["x-agent-principal", "alice"], ["x-agent-principal", "mallory"]]);
  assert.throws(() => plainIdentity(repeated, "c1"), { name: "MalformedIdentity", message: /holds x-agent-principal more than once/ });
  for (const labels of ['["a"]', '{"a":1}', "{nope", '"x"']) {
    assert.throws(() => plainIdentity(metadataOf([["x-agent-labels-bin", labels]]), "c1"), MalformedIdentity, labels);
  }
});

async function refusal(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof IdentityRefused, String(error));
    return error.message;
  }
  throw new Error("verified; expected a refusal");
}

test("a verified assertion is remembered, but its expiry is still checked", async () => {
  const key = await sidecarKey();
  let now = 1_800_000_000;
  const verifier = new IdentityVerifier({
    keysFile: file("cache-jwks.json", JSON.stringify({ keys: [key.jwk] })),
    audience: "orders",
    clock: () => now,
  });
  const token = await assertion(key, { now });
  const first = await verifier.verify(metadataOf([], token), "c1");
  assert.equal(first.principal, "alice");
  now += 200;
  assert.equal((await verifier.verify(metadataOf([], token), "c2")).callId, "c2");
  now += 111; // exp + leeway (10 s) passed
  assert.match(await refusal(verifier.verify(metadataOf([], token), "c3")), /expired at 2027-01-15T08:05:00Z/);
  assert.ok(Object.isFrozen(first.claims) && Object.isFrozen(first.claims.labels));
});

test("without required, a call without an assertion runs with the plain identity", async () => {
  const key = await sidecarKey();
  const verifier = new IdentityVerifier({ keysFile: file("plain-jwks.json", JSON.stringify({ keys: [key.jwk] })), audience: "orders" });
  const identity = await verifier.verify(metadataOf([["x-agent-principal", "bob"]]), "c1");
  assert.deepEqual([identity.principal, identity.verified], ["bob", false]);
  const malformed = metadataOf([["x-agent-run-id", "r-1"], ["x-agent-run-id", "r-2"]]);
  assert.match(await refusal(verifier.verify(malformed, "c1")), /identity metadata is malformed: the metadata holds x-agent-run-id more than once/);
});

test("a PEM public key takes any kid, or none", async () => {
  const key = await sidecarKey();
  const pem = key.publicKey.export({ type: "spki", format: "pem" }).toString();
  const verifier = new IdentityVerifier({ keysFile: file("key.pem", pem), audience: "orders" });
  for (const kid of ["any", undefined]) {
    const identity = await verifier.verify(metadataOf([], await assertion({ privateKey: key.privateKey, kid })), "c1");
    assert.equal(identity.verified, true);
  }
  const other = await sidecarKey();
  assert.match(await refusal(verifier.verify(metadataOf([], await assertion(other)), "c1")), /signature does not verify/);
});

test("a keys file without a usable key is refused when the verifier starts", () => {
  const { privateKey } = generateKeyPairSync("ed25519");
  const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 }).publicKey.export({ type: "spki", format: "pem" }).toString();
  for (const [name, content, message] of [
    ["private.pem", privateKey.export({ type: "pkcs8", format: "pem" }).toString(), /holds no usable key/],
    ["rsa.pem", rsa, /holds no usable key/],
    ["nokid.json", JSON.stringify({ keys: [{ kty: "OKP", crv: "Ed25519", x: "fHVNgBiUssyus8UB4e50hY-U-fJX4ueFhxnXUlC6W8g" }] }), /holds no usable key/],
    ["notjson.json", "{keys", /neither a JWKS/],
  ] as const) {
    assert.throws(() => new IdentityVerifier({ keysFile: file(name, content), audience: "orders" }), message, name);
  }
  assert.throws(() => new IdentityVerifier({ keysFile: path.join(DIR, "absent.json"), audience: "orders" }), /cannot read the identity keys .*ENOENT/);
});

test("the keys file is reread within a second of a change; an unusable one keeps the keys", async () => {
  const before = await sidecarKey("before");
  const after = await sidecarKey("after");
  const keys = file("rotated-jwks.json", JSON.stringify({ keys: [before.jwk] }));
  const verifier = new IdentityVerifier({ keysFile: keys, audience: "orders" });
  const old = await assertion(before);
  assert.equal((await verifier.verify(metadataOf([], old), "c1")).verified, true);
  assert.match(await refusal(verifier.verify(metadataOf([], await assertion(after)), "c1")), /does not know \(kid "after"\)/);

  writeFileSync(keys, JSON.stringify({ keys: [after.jwk] }, null, 1));
  await new Promise((resolve) => setTimeout(resolve, 1100));
  assert.equal((await verifier.verify(metadataOf([], await assertion(after)), "c1")).verified, true);
  assert.match(await refusal(verifier.verify(metadataOf([], old), "c1")), /does not know \(kid "before"\)/, "the cache was not forgotten");

  writeFileSync(keys, '{"keys": [');
  await new Promise((resolve) => setTimeout(resolve, 1100));
  assert.equal((await verifier.verify(metadataOf([], await assertion(after)), "c1")).verified, true);
});

test("the identity flags", () => {
  const options = parseServeArgs(["--identity-keys", "k.json", "--identity-audience", "orders", "--require-identity", "--identity-leeway", "2.5"]);
  assert.deepEqual(
    [options.identityKeysFile, options.identityAudience, options.identityIssuer, options.identityRequired, options.identityLeeway],
    ["k.json", "orders", undefined, true, 2.5],
  );
  assert.equal(parseServeArgs(["--identity-keys", "k.json", "--identity-audience", "o", "--identity-issuer", "me"]).identityIssuer, "me");
  assert.throws(() => parseServeArgs(["--identity-keys", "k.json"]), /--identity-keys needs --identity-audience/);
  assert.throws(() => parseServeArgs(["--require-identity"]), /--require-identity needs --identity-keys/);
  assert.throws(() => parseServeArgs(["--identity-keys", "k", "--identity-audience", "o", "--identity-leeway=-1"]), /--identity-leeway must be seconds >= 0/);
});

test("a server without keys gives handlers the plain identity, percent-decoded, over gRPC", async () => {
  const server = new ToolServer("plain");
  server.tool({ name: "whoami", description: "Answer with the caller's identity." }, (_args, context) => context.identity);
  const { tools, close } = await serving(server);
  try {
    const sent = metadataOf([
      ["x-agent-principal", "j%C3%BCrgen"],
      ["x-agent-session-id", "s-1"],
      ["x-agent-labels-bin", '{"tenant":"acme","note":"a, b"}'],
    ]);
    const result = await tools.call("whoami", {}, { call_id: "c-5", metadata: sent });
    assert.deepEqual(JSON.parse(result.output ?? ""), {
      principal: "jürgen",
      sessionId: "s-1",
      runId: "",
      callId: "c-5",
      labels: { tenant: "acme", note: "a, b" },
      labelsOmitted: false,
      verified: false,
      claims: {},
    });
    const repeated = metadataOf([["x-agent-session-id", "s-1"], ["x-agent-session-id", "s-2"]]);
    const failed = await tools.call("whoami", {}, { metadata: repeated });
    assert.equal(failed.error?.kind, "TOOL_ERROR_KIND_EXECUTION_FAILED");
    assert.match(failed.error?.message ?? "", /MalformedIdentity: the metadata holds x-agent-session-id more than once/);
  } finally {
    close();
  }
});

test("a server process that requires identity refuses calls without a valid assertion, and its tool never runs", async () => {
  const key = await sidecarKey();
  const keys = file("server-jwks.json", JSON.stringify({ keys: [key.jwk] }));
  const { child, address, exited } = await startFixture(["--identity-keys", keys, "--identity-audience", "fixture", "--require-identity"]);
  const tools = new Tools(address);
  try {
    const none = await statusOf(tools.call("whoami", {}));
    assert.equal(none.code, grpc.status.UNAUTHENTICATED);
    assert.match(none.details, /carries no identity assertion/);

    const token = await assertion(key, { audience: "fixture" });
    const [head, body, signature = ""] = token.split(".");
    const tampered = `${head}.${body}.${signature.slice(0, 10)}${signature[10] === "A" ? "B" : "A"}${signature.slice(11)}`;
    const bad = await statusOf(tools.call("whoami", {}, { metadata: metadataOf([], tampered) }));
    assert.equal(bad.code, grpc.status.UNAUTHENTICATED);
    assert.match(bad.details, /signature does not verify/);
    const elsewhere = await statusOf(tools.call("whoami", {}, { metadata: metadataOf([], await assertion(key, { audience: "billing" })) }));
    assert.match(elsewhere.details, /for another tool server; this one is "fixture"/);

    const sent = metadataOf(
      [["x-agent-principal", "alice"], ["x-agent-session-id", "s-1"], ["x-agent-run-id", "r-1"], ["x-agent-call-id", "call-1"], ["x-agent-labels-bin", '{"tenant":"acme"}']],
      token,
    );
    const result = await tools.call("whoami", {}, { call_id: "call-1", metadata: sent });
    const answer = JSON.parse(result.output ?? "");
    assert.equal(answer.runs, 1, "a refused call ran the tool");
    assert.equal(answer.identity.verified, true);
    assert.equal(answer.identity.principal, "alice");
    assert.deepEqual([answer.identity.sessionId, answer.identity.runId, answer.identity.callId], ["s-1", "r-1", "call-1"]);
    assert.deepEqual(answer.identity.labels, { tenant: "acme" });
    assert.equal(answer.identity.claims.aud, "fixture");

    const lying = metadataOf([["x-agent-principal", "mallory"]], token);
    const contradicted = await statusOf(tools.call("whoami", {}, { call_id: "call-2", metadata: lying }));
    assert.equal(contradicted.code, grpc.status.UNAUTHENTICATED);
    assert.match(contradicted.details, /x-agent-principal contradicts the identity assertion/);
    const again = await tools.call("whoami", {}, { call_id: "call-3", metadata: metadataOf([], token) });
    assert.equal(JSON.parse(again.output ?? "").runs, 2);
  } finally {
    tools.close();
    child.kill("SIGTERM");
    await within(exited, 20_000, "the exit");
  }
});
