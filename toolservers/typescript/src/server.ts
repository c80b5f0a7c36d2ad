/**
 * `ToolServer`: register tools, then serve them until SIGTERM.
 *
 * Shutdown on SIGTERM (or SIGINT, or the `signal` option):
 *
 * 1. new tool calls are refused with UNAVAILABLE, so a caller retries elsewhere (a bare
 *    shutdown would answer CANCELLED, which callers do not retry);
 * 2. health turns NOT_SERVING for every service, which reaches open `Health.Watch` streams
 *    at once: the sidecar stops routing calls here;
 * 3. running calls get the grace period to finish; a second signal ends the wait;
 * 4. the server stops, cancelling whatever still runs (a call's `signal` fires).
 */
import { readFileSync } from "node:fs";

import {
  experimental,
  Server,
  ServerCredentials,
} from "@grpc/grpc-js";
import { ReflectionService } from "@grpc/reflection";
import { HealthImplementation } from "grpc-health-check";

import { ArgumentsValidator } from "./arguments.js";
import { ToolDefinitionError, ToolServerError } from "./errors.js";
import { type Logger, stderrLogger } from "./logger.js";
import { optionsProblem, parseServeArgs, type ServeOptions, USAGE } from "./options.js";
import { packageDefinition, SERVICE_NAME, toolService } from "./protocol.js";
import { ToolService } from "./service.js";
import { defineTool, type Tool, type ToolDefinition, type ToolHandler } from "./tool.js";
import { IdentityVerifier } from "./verifier.js";

/** Server options: accept keepalive pings every 10 s, also with no call in flight. */
export const KEEPALIVE_OPTIONS = {
  // grpc-js servers never answer pings with GOAWAY too_many_pings; these say what the
  // sidecar may send (tool_servers[].keepalive_time down to 10 s) and keep idle
  // connections open between its pings.
  "grpc.keepalive_permit_without_calls": 1,
  "grpc.http2.min_ping_interval_without_data_ms": 10_000,
} as const;

// After the tool calls have drained, how long other RPCs (Health.Watch streams, which never
// end on their own) get before the server stops; time to deliver NOT_SERVING.
const FINAL_GRACE_MS = 250;
const CERT_REFRESH_MS = 5_000;

/** A server that is listening; see {@link ToolServer.listen}. */
export interface RunningServer {
  /** `HOST:PORT` it listens on. */
  readonly address: string;
  readonly port: number;
  /** How many tool calls are running now. */
  readonly inFlight: number;
  /**
   * Drains (see the module's doc): refuses new calls, turns health NOT_SERVING, waits up to
   * `graceSeconds` (default: the `grace` option) for running calls, then stops. Resolves once
   * stopped. `hurry` ends the wait early when it is aborted.
   */
  drain(graceSeconds?: number, hurry?: AbortSignal): Promise<void>;
  /** Stops at once, cancelling running calls. */
  stop(): void;
}

/**
 * A set of tools served over the tool-server protocol.
 *
 * ```ts
 * const server = new ToolServer("orders");
 * server.tool(
 *   { name: "get_order_status", description: "Look up an order's status by its id.",
 *     input: { type: "object", properties: { order_id: { type: "string" } }, required: ["order_id"] },
 *     readOnly: true, idempotent: true },
 *   async ({ order_id }: { order_id: string }) => ({ order_id, status: "shipped" }),
 * );
 * server.main();
 * ```
 */
export class ToolServer {
  readonly name: string;
  readonly version: string;
  readonly #tools: Tool[] = [];
  #frozen = false;

  /**
   * @param name The server's name, for its logs.
   * @param options.version The version of every tool that declares none. Default "".
   */
  constructor(name: string, options: { version?: string } = {}) {
    this.name = name;
    this.version = options.version ?? "";
  }

  /** The registered tools, in registration order. */
  get tools(): readonly Tool[] {
    return [...this.#tools];
  }

  /**
   * Registers a tool. The handler gets the arguments, already validated against `input`,
   * and a {@link ToolContext}; a string it returns is sent as is, anything else as JSON.
   *
   * @throws ToolDefinitionError when the declaration is wrong; the message says how to fix it.
   */
  tool<Args = Record<string, unknown>>(definition: ToolDefinition, handler: ToolHandler<Args>): this {
    if (this.#frozen) {
      throw new ToolDefinitionError(`tool ${JSON.stringify(definition?.name)}: the server is serving already; register every tool first`);
    }
    const tool = defineTool(definition, handler as ToolHandler<never>, this.version);
    new ArgumentsValidator(tool.name, tool.input); // a schema that does not compile fails here
    if (this.#tools.some((t) => t.name === tool.name)) {
      throw new ToolDefinitionError(
        `tool ${JSON.stringify(tool.name)} is already registered on server ${JSON.stringify(this.name)}; tool names must be unique`,
      );
    }
    this.#tools.push(tool);
    return this;
  }

  /**
   * Listens as `options` say and serves until drained or stopped; resolves once accepting
   * connections. Health is SERVING for `""` and `agentsidecar.v1.ToolService`.
   *
   * @throws ToolServerError when the address cannot be bound, or the TLS or identity keys files
   *   (or the CA file of `identityKeysFrom`) cannot be read.
   */
  async listen(options: ServeOptions = {}): Promise<RunningServer> {
    const problem = optionsProblem(options);
    if (problem) throw new ToolServerError(problem);
    const log = stderrLogger(this.name, options.logLevel);
    // With identityKeysFrom the keys are fetched from here on, in the background.
    const identity =
      options.identityKeysFile === undefined && options.identityKeysFrom === undefined
        ? undefined
        : new IdentityVerifier({
            keysFile: options.identityKeysFile,
            keysFrom: options.identityKeysFrom,
            keysCa: options.identityKeysCa,
            audience: options.identityAudience ?? "",
            issuer: options.identityIssuer,
            required: options.identityRequired,
            leeway: options.identityLeeway,
            log,
          });
    this.#frozen = true;
    const service = new ToolService(this.#tools, log, options.token, identity);
    const server = new Server(KEEPALIVE_OPTIONS);
    server.addService(toolService, service.implementation());
    const health = new HealthImplementation({ "": "SERVING", [SERVICE_NAME]: "SERVING" });
    health.addToServer(server);
    new ReflectionService(packageDefinition).addToServer(server);

    const host = options.host ?? "127.0.0.1";
    const hostLiteral = host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
    let port: number;
    try {
      const { credentials, ready } = serverCredentials(options);
      try {
        port = await new Promise<number>((resolve, reject) =>
          server.bindAsync(`${hostLiteral}:${options.port ?? 0}`, credentials, (error, bound) =>
            error ? reject(error) : resolve(bound),
          ),
        );
      } catch (error) {
        throw new ToolServerError(`cannot listen on ${hostLiteral}:${options.port ?? 0}: ${(error as Error).message}`);
      }
      try {
        await ready;
      } catch (error) {
        server.forceShutdown();
        throw error;
      }
    } catch (error) {
      identity?.close();
      throw error;
    }
    const address = `${hostLiteral}:${port}`;
    log.info(`serving ${this.#tools.length} tools on ${address}`);
    const graceDefault = options.grace ?? 10;
    let stopped: Promise<void> | undefined;
    const running: RunningServer = {
      address,
      port,
      get inFlight() {
        return service.inFlight;
      },
      drain: (graceSeconds = graceDefault, hurry?: AbortSignal) => {
        stopped ??= drain(server, service, health, log, graceSeconds, hurry).finally(() => identity?.close());
        return stopped;
      },
      stop: () => {
        service.cancelAll();
        server.forceShutdown();
        identity?.close();
      },
    };
    return running;
  }

  /**
   * Serves until SIGTERM or SIGINT (or `options.signal`), then drains and resolves. Once
   * listening it announces `listening on HOST:PORT` (on stdout unless `options.announce`
   * says otherwise). A second signal stops without waiting for running calls.
   *
   * @throws ToolServerError as {@link listen} does.
   */
  async serve(options: ServeOptions = {}): Promise<void> {
    const running = await this.listen(options);
    const first = new AbortController();
    const second = new AbortController();
    const onSignal = () => (first.signal.aborted ? second.abort() : first.abort());
    const handleSignals = options.handleSignals ?? true;
    if (handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    const onAbort = () => onSignal();
    options.signal?.addEventListener("abort", onAbort);
    try {
      (options.announce ?? ((line: string) => process.stdout.write(`${line}\n`)))(`listening on ${running.address}`);
      if (!first.signal.aborted && !options.signal?.aborted) {
        await new Promise<void>((resolve) => first.signal.addEventListener("abort", () => resolve(), { once: true }));
      }
      await running.drain(undefined, second.signal);
    } finally {
      options.signal?.removeEventListener("abort", onAbort);
      if (handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
  }

  /**
   * A tool server's whole main: reads the flags (`--host`, `--port`, `--grace`, `--tls-cert`,
   * `--tls-key`, `--tls-client-ca`, `--token-env` / `--token-file`, `--identity-keys` or
   * `--identity-keys-from` (with `--identity-keys-ca`), `--identity-audience`, `--identity-issuer`, `--require-identity`, `--identity-leeway`,
   * `--log-level`), serves
   * until SIGTERM, drains, and exits 0; exits 2 on a bad flag and 1 when it cannot serve.
   */
  main(argv: readonly string[] = process.argv.slice(2)): void {
    let options: ServeOptions;
    try {
      options = parseServeArgs(argv);
    } catch (error) {
      process.stderr.write(`${this.name}: ${(error as Error).message}\n${USAGE}\n`);
      process.exit(2);
    }
    this.serve(options).then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(`${this.name}: ${error instanceof Error ? error.message : String(error)}\n`);
        process.exit(1);
      },
    );
  }
}

async function drain(
  server: Server,
  service: ToolService,
  health: HealthImplementation,
  log: Logger,
  graceSeconds: number,
  hurry: AbortSignal | undefined,
): Promise<void> {
  // Refuse first, then announce: whoever sees NOT_SERVING is refused too.
  const idle = service.drain();
  health.setStatus("", "NOT_SERVING");
  health.setStatus(SERVICE_NAME, "NOT_SERVING");
  log.info(`draining: ${service.inFlight} calls running, up to ${graceSeconds} s to finish`);
  let timer: NodeJS.Timeout | undefined;
  let onHurry: (() => void) | undefined;
  await Promise.race([
    idle,
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, graceSeconds * 1000);
      onHurry = () => resolve();
      if (hurry?.aborted) resolve();
      hurry?.addEventListener("abort", onHurry, { once: true });
    }),
  ]);
  clearTimeout(timer);
  if (onHurry) hurry?.removeEventListener("abort", onHurry);
  if (service.inFlight) {
    log.warn(`cancelling ${service.inFlight} calls still running`);
    service.cancelAll();
    server.forceShutdown();
  } else {
    await new Promise<void>((resolve) => {
      const late = setTimeout(() => {
        server.forceShutdown();
        resolve();
      }, FINAL_GRACE_MS);
      server.tryShutdown(() => {
        clearTimeout(late);
        resolve();
      });
    });
  }
  log.info("stopped");
}

function serverCredentials(options: ServeOptions): { credentials: ServerCredentials; ready: Promise<void> } {
  if (options.tlsCertFile === undefined || options.tlsKeyFile === undefined) {
    return { credentials: ServerCredentials.createInsecure(), ready: Promise.resolve() };
  }
  for (const [flag, file] of [
    ["tlsCertFile", options.tlsCertFile],
    ["tlsKeyFile", options.tlsKeyFile],
    ["tlsClientCaFile", options.tlsClientCaFile],
  ] as const) {
    if (file === undefined) continue;
    try {
      readFileSync(file);
    } catch (error) {
      throw new ToolServerError(`${flag} ${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
    }
  }
  const identity = new experimental.FileWatcherCertificateProvider({
    certificateFile: options.tlsCertFile,
    privateKeyFile: options.tlsKeyFile,
    refreshIntervalMs: CERT_REFRESH_MS,
  });
  const ca =
    options.tlsClientCaFile === undefined
      ? null
      : new experimental.FileWatcherCertificateProvider({
          caCertificateFile: options.tlsClientCaFile,
          refreshIntervalMs: CERT_REFRESH_MS,
        });
  // The providers read the files asynchronously: serve once both have read them, or a
  // first caller would find no certificate.
  const loaded = (subscribe: (listener: (update: unknown) => void) => () => void) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new ToolServerError("the TLS files could not be read in 10 s")), 10_000);
      const unsubscribe = subscribe((update) => {
        clearTimeout(timer);
        queueMicrotask(unsubscribe);
        if (update) resolve();
        else reject(new ToolServerError("the TLS certificate, key or CA file could not be read"));
      });
    });
  const ready = Promise.all([
    loaded((listener) => {
      identity.addIdentityCertificateListener(listener);
      return () => identity.removeIdentityCertificateListener(listener);
    }),
    ca === null
      ? Promise.resolve()
      : loaded((listener) => {
          ca.addCaCertificateListener(listener);
          return () => ca.removeCaCertificateListener(listener);
        }),
  ]).then(() => undefined);
  // The first argument is the identity provider (grpc-js names it caCertificateProvider).
  const credentials = experimental.createCertificateProviderServerCredentials(identity, ca, ca !== null);
  return { credentials, ready };
}
