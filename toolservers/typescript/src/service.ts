/**
 * The `agentsidecar.v1.ToolService` handlers: route a call to its tool, run it under the
 * call's deadline, and keep the two error channels apart. A tool failing is data (a result
 * whose `ToolError` the model reads); the protocol failing is a status (NOT_FOUND,
 * INVALID_ARGUMENT, DEADLINE_EXCEEDED, CANCELLED, UNAUTHENTICATED, UNAVAILABLE while draining).
 * With an {@link IdentityVerifier}, a call's identity assertion is verified before its
 * handler runs; one that fails ends UNAUTHENTICATED and its tool never runs.
 */
import { createHash, timingSafeEqual } from "node:crypto";

import {
  Metadata,
  type sendUnaryData,
  type ServerUnaryCall,
  type ServerWritableStream,
  status,
  type UntypedServiceImplementation,
} from "@grpc/grpc-js";
import { stringify as stringifyLossless } from "lossless-json";

import { ArgumentsValidator, MalformedArguments } from "./arguments.js";
import { ToolFailure } from "./errors.js";
import { type CallerIdentity, plainIdentity } from "./identity.js";
import type { Logger } from "./logger.js";
import {
  type CallToolRequest,
  duration,
  durationFromNanos,
  type ToolErrorKind,
  type ToolResult,
  toolService,
} from "./protocol.js";
import type { Tool, ToolContext } from "./tool.js";
import { IdentityRefused, type IdentityVerifier } from "./verifier.js";

interface Runner {
  readonly tool: Tool;
  readonly validator: ArgumentsValidator;
}

/** A status the call ends with instead of a result. */
class CallStatus extends Error {
  constructor(
    readonly code: status,
    message: string,
  ) {
    super(message);
  }
}

const DRAINING = "the tool server is shutting down; retry on another instance";

/** Serves one frozen set of tools. */
export class ToolService {
  readonly #runners: Map<string, Runner>;
  readonly #list: object;
  readonly #available: string;
  readonly #tokenDigest: Buffer | undefined;
  readonly #log: Logger;
  readonly #identity: IdentityVerifier | undefined;
  #draining = false;
  #inFlight = 0;
  #idle: (() => void) | undefined;
  readonly #running = new Set<(reason: CallStatus) => void>();

  constructor(tools: readonly Tool[], log: Logger, token: string | undefined, identity?: IdentityVerifier) {
    this.#runners = new Map(tools.map((tool) => [tool.name, { tool, validator: new ArgumentsValidator(tool.name, tool.input) }]));
    this.#available = tools.map((t) => t.name).join(", ") || "(none)";
    this.#list = listToolsResponse(tools);
    this.#tokenDigest = token === undefined ? undefined : digest(token);
    this.#log = log;
    this.#identity = identity;
  }

  /** How many CallTool and StreamTool calls are running now. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Refuses new tool calls with UNAVAILABLE from now on; resolves once none runs. */
  drain(): Promise<void> {
    this.#draining = true;
    if (!this.#inFlight) return Promise.resolve();
    return new Promise((resolve) => {
      this.#idle = resolve;
    });
  }

  /** Stops every running call: its caller gets CANCELLED and its handler's signal fires. */
  cancelAll(): void {
    for (const end of this.#running) end(new CallStatus(status.CANCELLED, "the tool server stopped before the call finished"));
  }

  /** The handlers, for `server.addService(toolService, ...)`. */
  implementation(): UntypedServiceImplementation {
    return {
      ListTools: (call: ServerUnaryCall<object, object>, callback: sendUnaryData<object>) => {
        const refused = this.#authenticate(call.metadata);
        if (refused) callback(refused);
        else callback(null, this.#list);
      },
      CallTool: (call: ServerUnaryCall<CallToolRequest, object>, callback: sendUnaryData<object>) => {
        void this.#call(call, call.request, undefined).then(
          (result) => callback(null, { result }),
          (error: unknown) => callback(asStatus(error)),
        );
      },
      StreamTool: (call: ServerWritableStream<{ call?: CallToolRequest }, object>) => {
        let over = false;
        const write = (message: object) =>
          new Promise<void>((resolve, reject) => {
            if (over || call.cancelled) {
              reject(new Error("the call is over"));
              return;
            }
            call.write(message, () => resolve());
          });
        const progress = (progress: number, total: number, message: string) =>
          write({ progress: { progress, total, message } });
        void this.#call(call, call.request.call ?? {}, progress).then(
          (result) => {
            over = true;
            if (!call.cancelled) {
              call.write({ result });
              call.end();
            }
          },
          (error: unknown) => {
            over = true;
            if (!call.cancelled) call.emit("error", asStatus(error));
          },
        );
      },
    };
  }

  async #call(
    call: ServerUnaryCall<unknown, unknown> | ServerWritableStream<unknown, unknown>,
    request: CallToolRequest,
    progress: ((progress: number, total: number, message: string) => Promise<void>) | undefined,
  ): Promise<ToolResult> {
    const refused = this.#authenticate(call.metadata);
    if (refused) throw refused;
    if (this.#draining) throw new CallStatus(status.UNAVAILABLE, DRAINING);
    const name = request.tool_name ?? "";
    if (!name) throw new CallStatus(status.INVALID_ARGUMENT, "tool_name is empty");
    const runner = this.#runners.get(name);
    if (!runner) {
      throw new CallStatus(status.NOT_FOUND, `unknown tool ${JSON.stringify(name)}; this server offers: ${this.#available}`);
    }
    const callId = request.call_id ?? "";
    this.#inFlight += 1;
    try {
      const identity = await this.#verify(name, call.metadata, callId);
      return await this.#run(call, runner, callId, request.arguments ?? "", progress, identity);
    } finally {
      this.#inFlight -= 1;
      if (!this.#inFlight && this.#idle) this.#idle();
    }
  }

  async #run(
    call: ServerUnaryCall<unknown, unknown> | ServerWritableStream<unknown, unknown>,
    { tool, validator }: Runner,
    callId: string,
    text: string,
    progress: ((progress: number, total: number, message: string) => Promise<void>) | undefined,
    verified: CallerIdentity | undefined,
  ): Promise<ToolResult> {
    const started = process.hrtime.bigint();
    const finish = (outcome: Pick<ToolResult, "output" | "error">): ToolResult => ({
      call_id: callId,
      ...outcome,
      handler_duration: durationFromNanos(process.hrtime.bigint() - started),
    });
    let checked;
    try {
      checked = validator.check(text);
    } catch (error) {
      if (error instanceof MalformedArguments) {
        throw new CallStatus(status.INVALID_ARGUMENT, `${tool.name}: ${error.message}`);
      }
      throw error;
    }
    if ("invalid" in checked) return finish(failure("TOOL_ERROR_KIND_INVALID_ARGUMENTS", checked.invalid));

    const deadline = toMillis(call.getDeadline());
    const controller = new AbortController();
    let stop: (reason: CallStatus) => void = () => undefined;
    const stopped = new Promise<never>((_, reject) => {
      stop = reject;
    });
    const end = (reason: CallStatus) => {
      if (!controller.signal.aborted) {
        controller.abort(reason);
        stop(reason);
      }
    };
    this.#running.add(end);
    const onCancelled = () => end(new CallStatus(status.CANCELLED, `${tool.name}: the caller cancelled the call`));
    call.on("cancelled", onCancelled);
    const timer =
      deadline === undefined
        ? undefined
        : setTimeout(
            () => end(new CallStatus(status.DEADLINE_EXCEEDED, `${tool.name} did not finish before the call's deadline; it was stopped`)),
            Math.max(0, deadline - Date.now()),
          );
    let identity = verified;
    const context: ToolContext = {
      callId,
      toolName: tool.name,
      signal: controller.signal,
      deadline,
      metadata: call.metadata,
      // Read when asked: a handler that never looks is not failed by malformed metadata.
      get identity() {
        return (identity ??= plainIdentity(call.metadata, callId));
      },
      timeRemaining: () => (deadline === undefined ? undefined : Math.max(0, deadline - Date.now())),
      reportProgress: async (done, total = 0, message = "") => {
        if (progress && !controller.signal.aborted) await progress(done, total, message);
      },
    };
    try {
      const value = await Promise.race([
        stopped,
        Promise.resolve().then(() => (tool.handler as (args: unknown, context: ToolContext) => unknown)(checked.args, context)),
      ]);
      return finish(encodeOutput(tool.name, value));
    } catch (error) {
      if (error instanceof CallStatus) throw error;
      if (error instanceof ToolFailure) return finish(failure("TOOL_ERROR_KIND_EXECUTION_FAILED", error.message));
      this.#log.warn(`tool ${tool.name} threw: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
      return finish(failure("TOOL_ERROR_KIND_EXECUTION_FAILED", describe(error)));
    } finally {
      clearTimeout(timer);
      this.#running.delete(end);
      call.removeListener("cancelled", onCancelled);
      stopped.catch(() => undefined);
      // The call is over: a handler still running learns it from its signal.
      if (!controller.signal.aborted) controller.abort(new CallStatus(status.CANCELLED, "the call is over"));
    }
  }

  /** The call's verified identity (undefined without a verifier), or an UNAUTHENTICATED status. */
  async #verify(toolName: string, metadata: Metadata, callId: string): Promise<CallerIdentity | undefined> {
    if (this.#identity === undefined) return undefined;
    try {
      return await this.#identity.verify(metadata, callId);
    } catch (error) {
      if (!(error instanceof IdentityRefused)) throw error;
      this.#log.warn(`${toolName}: call ${JSON.stringify(callId.slice(0, 64))} refused: ${error.message}`);
      throw new CallStatus(status.UNAUTHENTICATED, error.message);
    }
  }

  #authenticate(metadata: Metadata): CallStatus | undefined {
    if (this.#tokenDigest === undefined) return undefined;
    const [value] = metadata.get("authorization");
    const text = typeof value === "string" ? value : (value?.toString("utf8") ?? "");
    const sent = text.slice(0, 7).toLowerCase() === "bearer " ? text.slice(7).trim() : "";
    if (sent && timingSafeEqual(digest(sent), this.#tokenDigest)) return undefined;
    return new CallStatus(
      status.UNAUTHENTICATED,
      "this server requires 'authorization: Bearer <token>' metadata with its token",
    );
  }
}

function digest(token: string): Buffer {
  return createHash("sha256").update(token, "utf8").digest();
}

function failure(kind: ToolErrorKind, message: string): Pick<ToolResult, "error"> {
  return { error: { kind, message } };
}

function encodeOutput(toolName: string, value: unknown): Pick<ToolResult, "output" | "error"> {
  if (typeof value === "string") return { output: value };
  try {
    return { output: JSON.stringify(value) ?? "null" };
  } catch (error) {
    if (error instanceof TypeError && /BigInt/i.test(error.message)) {
      try {
        return { output: stringifyLossless(value) ?? "null" };
      } catch {
        // falls through to the failure below
      }
    }
    return failure("TOOL_ERROR_KIND_EXECUTION_FAILED", `${toolName} returned a value that cannot be encoded as JSON: ${(error as Error).message}`);
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) return error.message ? `${error.name}: ${error.message}` : error.name;
  return `the tool threw ${typeof error === "string" ? error : JSON.stringify(error) ?? String(error)}`;
}

function asStatus(error: unknown): { code: status; details: string; metadata: Metadata } {
  if (error instanceof CallStatus) return { code: error.code, details: error.message, metadata: new Metadata() };
  return { code: status.INTERNAL, details: "the tool server failed; see its log", metadata: new Metadata() };
}

function toMillis(deadline: Date | number): number | undefined {
  const value = deadline instanceof Date ? deadline.getTime() : deadline;
  return Number.isFinite(value) ? value : undefined;
}

/** The `ListToolsResponse`, built once; `tool_set_version` hashes the descriptors' encoding. */
function listToolsResponse(tools: readonly Tool[]): object {
  const descriptors = tools.map((tool) => ({
    name: tool.name,
    description: tool.description,
    input_schema: JSON.stringify(tool.input),
    output_schema: tool.output === undefined ? "" : JSON.stringify(tool.output),
    read_only: tool.readOnly,
    idempotent: tool.idempotent,
    destructive: tool.destructive,
    requires_approval: tool.requiresApproval,
    read_keys: [...tool.readKeys],
    write_keys: [...tool.writeKeys],
    ...(tool.timeout === undefined ? {} : { default_timeout: duration(tool.timeout) }),
    ...(tool.cacheTtl === undefined ? {} : { cache_ttl: duration(tool.cacheTtl) }),
    version: tool.version,
    result_fields: [...tool.resultFields],
  }));
  const serialize = toolService.ListTools?.responseSerialize;
  const encoded = serialize ? serialize({ tools: descriptors }) : Buffer.from(JSON.stringify(descriptors));
  return { tools: descriptors, tool_set_version: createHash("sha256").update(encoded).digest("hex").slice(0, 16) };
}
