// Around the calls: health, reflection, the bearer token, TLS and mutual TLS, keepalive
// pings, the drain (in process and on SIGTERM), and the command line.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";

import * as grpc from "@grpc/grpc-js";

import { ToolServer } from "@agent-sidecar/toolserver";

import { certificates, deferred, PACKAGE_ROOT, serving, startFixture, statusOf, Tools, within } from "./support.js";

function heldServer() {
  const started = deferred<AbortSignal>();
  const release = deferred<void>();
  const server = new ToolServer("held");
  server.tool({ name: "hold", description: "Run until released." }, async (_args, { signal }) => {
    started.resolve(signal);
    await Promise.race([release.promise, new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason as Error)))]);
    return "released";
  });
  server.tool({ name: "ping", description: "Answer pong." }, () => "pong");
  return { server, started, release };
}

test("health reports SERVING for the server and the tool service", async () => {
  const { server } = heldServer();
  const { tools, close } = await serving(server);
  try {
    assert.equal((await tools.check("")).status, "SERVING");
    assert.equal((await tools.check("agentsidecar.v1.ToolService")).status, "SERVING");
  } finally {
    close();
  }
});

test("reflection lists the tool service and health", async () => {
  const { server } = heldServer();
  const { running, close } = await serving(server);
  const grpcurl = path.join(PACKAGE_ROOT, "..", "..", ".tools", "bin", "grpcurl");
  try {
    const listed = await new Promise<string>((resolve, reject) => {
      const child = spawn(grpcurl, ["-plaintext", running.address, "list"]);
      let out = "";
      child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
      child.on("error", reject);
      child.on("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`grpcurl exited ${code}`))));
    });
    const services = listed.trim().split("\n").sort();
    assert.ok(services.includes("agentsidecar.v1.ToolService"), listed);
    assert.ok(services.includes("grpc.health.v1.Health"), listed);
  } finally {
    close();
  }
});

test("a configured token is required on every tool call; health stays open", async () => {
  const { server } = heldServer();
  const { running, tools, close } = await serving(server, { token: "s3cret" });
  try {
    const none = await statusOf(tools.call("ping", {}));
    assert.equal(none.code, grpc.status.UNAUTHENTICATED);
    const wrong = new grpc.Metadata();
    wrong.set("authorization", "Bearer guess");
    assert.equal((await statusOf(tools.call("ping", {}, { metadata: wrong }))).code, grpc.status.UNAUTHENTICATED);
    assert.equal((await statusOf(tools.listTools())).code, grpc.status.UNAUTHENTICATED);
    const right = new grpc.Metadata();
    right.set("authorization", "bearer s3cret");
    assert.equal((await tools.call("ping", {}, { metadata: right })).output, "pong");
    assert.equal((await tools.check("")).status, "SERVING");
    assert.ok(running.address);
  } finally {
    close();
  }
});

test("TLS serves the certificate, and mutual TLS refuses a caller without one", async () => {
  const certs = certificates();
  const { server } = heldServer();
  const running = await server.listen({
    logLevel: "error",
    tlsCertFile: certs.server.cert,
    tlsKeyFile: certs.server.key,
    tlsClientCaFile: certs.ca,
  });
  const ca = readFileSync(certs.ca);
  const withCert = new Tools(running.address, grpc.credentials.createSsl(ca, readFileSync(certs.client.key), readFileSync(certs.client.cert)));
  const withoutCert = new Tools(running.address, grpc.credentials.createSsl(ca));
  const plaintext = new Tools(running.address);
  try {
    assert.equal((await withCert.call("ping", {})).output, "pong");
    assert.equal((await statusOf(withoutCert.call("ping", {}, { deadline: Date.now() + 5000 }))).code, grpc.status.UNAVAILABLE);
    assert.equal((await statusOf(plaintext.call("ping", {}, { deadline: Date.now() + 5000 }))).code, grpc.status.UNAVAILABLE);
  } finally {
    withCert.close();
    withoutCert.close();
    plaintext.close();
    running.stop();
  }
});

test("keepalive pings on an idle connection keep it open", async () => {
  const { server } = heldServer();
  const running = await server.listen({ logLevel: "error" });
  const tools = new Tools(running.address, grpc.credentials.createInsecure(), {
    "grpc.keepalive_time_ms": 200,
    "grpc.keepalive_timeout_ms": 1000,
    "grpc.keepalive_permit_without_calls": 1,
  });
  let watching = true;
  try {
    assert.equal((await tools.call("ping", {})).output, "pong");
    const channel = tools.raw.getChannel();
    const states: grpc.connectivityState[] = [];
    const watch = () =>
      channel.watchConnectivityState(channel.getConnectivityState(false), Date.now() + 60_000, () => {
        if (!watching) return;
        states.push(channel.getConnectivityState(false));
        watch();
      });
    watch();
    // Ten pings' time with no call in flight: a server that refused them would drop the
    // connection (GOAWAY too_many_pings) and the channel would leave READY.
    await new Promise((resolve) => setTimeout(resolve, 2000));
    assert.deepEqual(states, []);
    assert.equal(channel.getConnectivityState(false), grpc.connectivityState.READY);
    assert.equal((await tools.call("ping", {})).output, "pong");
    watching = false;
  } finally {
    watching = false;
    tools.close();
    running.stop();
  }
});

test("a drain refuses new calls, turns health NOT_SERVING first, and lets a running call finish", async () => {
  const { server, started, release } = heldServer();
  const { running, tools, close } = await serving(server, { grace: 60 });
  try {
    const watch = tools.health.makeServerStreamRequest(
      "/grpc.health.v1.Health/Watch",
      (value: { service: string }) => Buffer.from([0x0a, value.service.length, ...Buffer.from(value.service)]),
      (bytes: Buffer) => bytes,
      { service: "" },
    );
    const statuses: number[] = [];
    const notServing = deferred<void>();
    watch.on("data", (bytes: Buffer) => {
      statuses.push(bytes[1] ?? 0); // HealthCheckResponse.status: field 1, varint
      if (bytes[1] === 2) notServing.resolve();
    });
    watch.on("error", () => undefined);
    const held = tools.call("hold", {});
    await within(started.promise, 10_000, "the held call's start");
    const drained = running.drain();
    await within(notServing.promise, 10_000, "NOT_SERVING on the watch");
    const refused = await statusOf(tools.call("ping", {}));
    assert.equal(refused.code, grpc.status.UNAVAILABLE);
    assert.match(refused.details, /shutting down; retry on another instance/);
    assert.equal(running.inFlight, 1);
    release.resolve();
    assert.equal((await held).output, "released");
    await within(drained, 10_000, "the drain (its grace is a minute)");
    assert.deepEqual(statuses, [1, 2]);
  } finally {
    close();
  }
});

test("calls still running when the grace period ends are cancelled", async () => {
  const { server, started } = heldServer();
  const { running, tools, close } = await serving(server);
  try {
    const held = statusOf(tools.call("hold", {}));
    const signal = await within(started.promise, 10_000, "the held call's start");
    await within(running.drain(0.2), 10_000, "the drain");
    assert.ok(signal.aborted);
    const code = (await held).code;
    assert.ok([grpc.status.CANCELLED, grpc.status.UNAVAILABLE].includes(code), `status ${code}`);
  } finally {
    close();
  }
});

test("SIGTERM lets a running call finish, refuses new calls and exits 0", async () => {
  const { child, address, exited } = await startFixture(["--grace", "60"]);
  const tools = new Tools(address);
  try {
    const stream = tools.stream("hold", {});
    const messages = stream[Symbol.asyncIterator]();
    assert.equal((await within(messages.next(), 10_000, "the progress report")).value.event, "progress");
    child.kill("SIGTERM");
    const refused = deferred<grpc.ServiceError>();
    const poll = async (): Promise<void> => {
      const error = await statusOf(tools.call("ping", {})).catch(() => undefined);
      if (error?.code === grpc.status.UNAVAILABLE) refused.resolve(error);
      else setImmediate(() => void poll());
    };
    void poll();
    await within(refused.promise, 10_000, "a refusal while draining");
    child.stdin.write("release\n");
    const last = await within(messages.next(), 10_000, "the result");
    assert.equal(last.value.result.output, "released");
    const [code] = await within(exited, 20_000, "the exit (its grace is a minute)");
    assert.equal(code, 0);
  } finally {
    tools.close();
    child.kill("SIGKILL");
  }
});

test("a second signal stops without waiting for running calls", async () => {
  const { child, address, exited } = await startFixture(["--grace", "60"]);
  const tools = new Tools(address);
  try {
    const stream = tools.stream("hold", {});
    stream.on("error", () => undefined);
    const messages = stream[Symbol.asyncIterator]();
    await within(messages.next(), 10_000, "the progress report");
    child.kill("SIGTERM");
    await within(
      (async () => {
        while ((await tools.check("").catch(() => ({ status: "gone" }))).status === "SERVING") await new Promise((r) => setImmediate(r));
      })(),
      10_000,
      "NOT_SERVING",
    );
    child.kill("SIGTERM");
    const [code] = await within(exited, 10_000, "the exit after a second signal");
    assert.equal(code, 0);
  } finally {
    tools.close();
    child.kill("SIGKILL");
  }
});

test("a bad flag exits 2 with the usage", async () => {
  const script = path.join(PACKAGE_ROOT, "build", "test", "fixture-server.js");
  const child = spawn(process.execPath, [script, "--port", "many"]);
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const [code] = await within(once(child, "exit"), 20_000, "the exit");
  assert.equal(code, 2);
  assert.match(stderr, /--port "many" is not a number/);
  assert.match(stderr, /--token-env NAME/);
});
