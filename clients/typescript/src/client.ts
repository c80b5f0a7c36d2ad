/**
 * `AgentClient`: a thin promise and async-iterator layer over the generated grpc-js client.
 *
 * Each method sends one RPC. Every method takes {@link CallOptions}: a `deadline` (grpc-js
 * semantics: a `Date`, or milliseconds since the epoch such as `Date.now() + 5000`) and an
 * `AbortSignal` that cancels the call. Every failure is an {@link AgentSidecarError}.
 */
import {
  type CallOptions as GrpcCallOptions,
  type ChannelCredentials,
  type ChannelOptions,
  type ClientReadableStream,
  type ClientUnaryCall,
  credentials as grpcCredentials,
  Metadata,
  type ServiceError,
  status as GrpcStatus,
} from "@grpc/grpc-js";

import { AgentSidecarError, isServiceError } from "./errors.js";
import {
  AgentServiceClient,
  ApprovalDecision,
  type ApprovalRequired,
  ApproveToolCallRequest,
  CancelRunRequest,
  CreateSessionRequest,
  DeleteSessionRequest,
  GetRunRequest,
  GetSessionRequest,
  ListRunsRequest,
  type ListRunsResponse,
  ListSessionToolsRequest,
  OutputMode,
  type Run,
  RunRequest,
  type RunResponse,
  type Session,
  type SessionTool,
  StartRunRequest,
  StreamRunRequest,
  type StreamRunResponse,
  WatchRunRequest,
  type WatchRunResponse,
} from "./gen/agentsidecar/v1/agent.js";

/** Options every call takes. */
export interface CallOptions {
  /**
   * When the call must be done: a `Date`, or milliseconds since the epoch
   * (`Date.now() + 5000`). Past it the call fails with DEADLINE_EXCEEDED, and the sidecar
   * stops the work it was doing for the call.
   */
  deadline?: Date | number;
  /** Aborting it cancels the call; the call then fails with CANCELLED. */
  signal?: AbortSignal;
  /** Metadata sent with the call, e.g. a W3C `traceparent`. */
  metadata?: Metadata | Readonly<Record<string, string>>;
}

/** Options of {@link AgentClient.createSession}. */
export interface CreateSessionOptions extends CallOptions {
  /** The session id to use; unset, the sidecar generates one. */
  sessionId?: string;
  /** Free-form labels stored with the session. */
  labels?: Readonly<Record<string, string>>;
}

/** Options of {@link AgentClient.run}. */
export interface RunOptions extends CallOptions {
  /**
   * How the answer is produced. Unset means `OUTPUT_MODE_STRUCTURED` for a unary run: when the
   * profile declares an answer schema, the answer is JSON validated against it.
   */
  outputMode?: OutputMode;
}

/** What an approval handler decides: a decision, or a decision with a reason for the model. */
export type ApprovalAnswer =
  | "approve"
  | "deny"
  | { readonly decision: "approve" | "deny"; readonly reason?: string };

/** What an approval handler is told besides the request. */
export interface ApprovalContext {
  /** The session of the run. */
  readonly sessionId: string;
  /** The run that waits. */
  readonly runId: string;
  /**
   * Aborted when the call ends before the handler has answered (the caller aborted, the
   * deadline passed, the run went on without the decision); the answer is then not sent.
   */
  readonly signal: AbortSignal;
}

/** Decides a tool call that waits for approval; may take its time (ask a person). */
export type ApprovalHandler = (
  request: ApprovalRequired,
  context: ApprovalContext,
) => ApprovalAnswer | Promise<ApprovalAnswer>;

/** Options of {@link AgentClient.stream}. */
export interface StreamOptions extends CallOptions {
  /** How the answer is delivered; unset means `OUTPUT_MODE_STREAMED` (text deltas). */
  outputMode?: OutputMode;
  /**
   * Called for each `approvalRequired` event before the event is yielded; its answer is
   * sent with ApproveToolCall. Without it, answer with {@link AgentClient.approve} or
   * {@link AgentClient.deny} yourself while you iterate.
   */
  onApproval?: ApprovalHandler;
}

/** Options of {@link AgentClient.startRun}. */
export interface StartRunOptions extends CallOptions {
  /** How the answer is delivered; unset means `OUTPUT_MODE_STREAMED` (text deltas are stored). */
  outputMode?: OutputMode;
  /** An http(s) URL told the run's final state when it finishes (a signed POST). */
  callbackUrl?: string;
  /**
   * A key made for this run (a UUID): a retry with the same key after a lost answer returns
   * the run the first call started instead of starting another.
   */
  requestId?: string;
}

/** Options of {@link AgentClient.watchRun}. */
export interface WatchRunOptions {
  /** The sequence of the last event the caller has; events after it are yielded. Default 0. */
  afterSequence?: number;
  /**
   * When the whole watch must end, reconnections included (a `Date`, or milliseconds since
   * the epoch); unset: it waits as long as the run goes on.
   */
  deadline?: Date | number;
  /** Aborting it ends the watch (never the run: {@link AgentClient.cancelRun} does that). */
  signal?: AbortSignal;
  /**
   * Watch again from the last event yielded when the stream breaks off before the last event
   * (the sidecar restarting, a replica stopping, the network). Default true.
   */
  reconnect?: boolean;
}

/** Options of {@link AgentClient.listRuns}. */
export interface ListRunsOptions extends CallOptions {
  /** The most runs to return; 0 (the default) means 50, at most 1000. */
  pageSize?: number;
  /** The `nextPageToken` of an earlier page. */
  pageToken?: string;
}

/** Options of {@link AgentClient.deny}. */
export interface DenyOptions extends CallOptions {
  /** Why, shown to the model. */
  reason?: string;
}

/** Options of the {@link AgentClient} constructor. */
export interface AgentClientOptions {
  /** The channel's credentials; unset means plaintext (a sidecar on the same host or pod). */
  credentials?: ChannelCredentials;
  /** grpc-js channel options, e.g. `{"grpc.keepalive_time_ms": 30000}`. */
  channelOptions?: ChannelOptions;
  /**
   * The deadline, in milliseconds from the call's start, of calls that manage sessions and
   * approvals when they set none themselves; runs have none unless given. Default 10000.
   */
  defaultTimeoutMs?: number;
}

const STREAM_ENDED: unique symbol = Symbol("stream ended");

type UnaryMethod<Req, Res> = (
  request: Req,
  metadata: Metadata,
  options: Partial<GrpcCallOptions>,
  callback: (error: ServiceError | null, response: Res) => void,
) => ClientUnaryCall;

/**
 * A connection to one sidecar.
 *
 * ```ts
 * const client = new AgentClient("127.0.0.1:50051");
 * const session = await client.createSession("default");
 * for await (const event of client.stream(session.sessionId, "Where is order 20250101?")) {
 *   if (event.event?.$case === "textDelta") process.stdout.write(event.event.value.text);
 * }
 * client.close();
 * ```
 */
export class AgentClient {
  /** The generated grpc-js client, for calls this layer does not wrap. */
  readonly stub: AgentServiceClient;
  readonly #defaultTimeoutMs: number;

  /**
   * @param address The sidecar's `host:port`.
   * @param options Credentials, channel options and the default deadline.
   */
  constructor(address: string, options: AgentClientOptions = {}) {
    this.stub = new AgentServiceClient(
      address,
      options.credentials ?? grpcCredentials.createInsecure(),
      options.channelOptions,
    );
    this.#defaultTimeoutMs = options.defaultTimeoutMs ?? 10_000;
  }

  /** Closes the channel; calls in flight fail with CANCELLED or UNAVAILABLE. */
  close(): void {
    this.stub.close();
  }

  /**
   * Waits until the channel is connected.
   *
   * @throws {AgentSidecarError} DEADLINE_EXCEEDED when it is not connected by the deadline.
   */
  waitForReady(deadline: Date | number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.stub.waitForReady(deadline, (error) => {
        if (error) {
          reject(
            new AgentSidecarError({
              code: GrpcStatus.DEADLINE_EXCEEDED,
              details: error.message,
              cause: error,
            }),
          );
        } else {
          resolve();
        }
      });
    });
  }

  /**
   * Starts a conversation under an agent profile.
   *
   * @throws {AgentSidecarError} PROFILE_NOT_FOUND, SESSION_EXISTS, INVALID_REQUEST.
   */
  async createSession(profile = "default", options: CreateSessionOptions = {}): Promise<Session> {
    const request = CreateSessionRequest.fromPartial({
      profile,
      sessionId: options.sessionId ?? "",
      labels: { ...options.labels },
    });
    const response = await this.#unary(this.stub.createSession, request, options, true);
    return required(response.session, "CreateSessionResponse.session");
  }

  /**
   * Returns a session with its finished turns.
   *
   * @throws {AgentSidecarError} SESSION_NOT_FOUND.
   */
  async getSession(sessionId: string, options: CallOptions = {}): Promise<Session> {
    const request = GetSessionRequest.fromPartial({ sessionId });
    const response = await this.#unary(this.stub.getSession, request, options, true);
    return required(response.session, "GetSessionResponse.session");
  }

  /** Removes a session; true when one was removed, false when none existed (safe to retry). */
  async deleteSession(sessionId: string, options: CallOptions = {}): Promise<boolean> {
    const request = DeleteSessionRequest.fromPartial({ sessionId });
    const response = await this.#unary(this.stub.deleteSession, request, options, true);
    return response.deleted;
  }

  /** Lists the tools the session's profile allows, with whether each can be called now. */
  async listSessionTools(sessionId: string, options: CallOptions = {}): Promise<SessionTool[]> {
    const request = ListSessionToolsRequest.fromPartial({ sessionId });
    const response = await this.#unary(this.stub.listSessionTools, request, options, true);
    return response.tools;
  }

  /**
   * Runs one user turn and returns only its result. Tool calls that need approval are denied
   * (nobody can approve during a unary run); use {@link stream} to approve them.
   *
   * @throws {AgentSidecarError} SESSION_NOT_FOUND, SESSION_BUSY (with a retry delay),
   *   INVALID_REQUEST, DEADLINE_EXCEEDED, CANCELLED.
   */
  run(sessionId: string, input: string, options: RunOptions = {}): Promise<RunResponse> {
    const request = RunRequest.fromPartial({
      sessionId,
      input,
      outputMode: options.outputMode ?? OutputMode.OUTPUT_MODE_UNSPECIFIED,
    });
    return this.#unary(this.stub.run, request, options, false);
  }

  /**
   * Runs one user turn and yields its events as they happen; the last is `runFinished`.
   *
   * The call starts when iteration starts. Leaving the loop early (`break`, `return`, a
   * throw) cancels the call, and with it the run and its tool calls; so does the signal.
   * The iterator throws an {@link AgentSidecarError}: CANCELLED after an abort,
   * DEADLINE_EXCEEDED past the deadline, or the sidecar's status.
   */
  async *stream(
    sessionId: string,
    input: string,
    options: StreamOptions = {},
  ): AsyncGenerator<StreamRunResponse, void, undefined> {
    const { signal, onApproval } = options;
    throwIfAborted(signal);
    const request = StreamRunRequest.fromPartial({
      sessionId,
      input,
      outputMode: options.outputMode ?? OutputMode.OUTPUT_MODE_UNSPECIFIED,
    });
    const call: ClientReadableStream<StreamRunResponse> = this.stub.streamRun(
      request,
      toMetadata(options.metadata),
      callOptions(options.deadline),
    );
    // Tells approval handlers that the call is over, and stops waiting for them.
    const ended = new AbortController();
    call.once("status", () => ended.abort());
    const cancel = (): void => call.cancel();
    signal?.addEventListener("abort", cancel, { once: true });
    try {
      for await (const event of call as AsyncIterable<StreamRunResponse>) {
        if (onApproval && event.event?.$case === "approvalRequired") {
          const context = { sessionId, runId: event.runId, signal: ended.signal };
          await this.#answer(onApproval, event.event.value, context, options);
        }
        yield event;
      }
    } catch (error) {
      // A status becomes an AgentSidecarError; an approval handler's own error stays as it is.
      throw isServiceError(error) ? AgentSidecarError.from(error) : error;
    } finally {
      signal?.removeEventListener("abort", cancel);
      ended.abort();
      call.cancel(); // a no-op once the call has ended; stops the run when the caller left early
    }
  }

  /**
   * Approves a tool call announced by an `approvalRequired` event.
   *
   * @throws {AgentSidecarError} CALL_NOT_PENDING when no such call waits.
   */
  async approve(sessionId: string, callId: string, options: CallOptions = {}): Promise<void> {
    await this.#decide(sessionId, callId, ApprovalDecision.APPROVAL_DECISION_APPROVE, "", options);
  }

  /**
   * Denies a tool call announced by an `approvalRequired` event; the model sees it denied.
   *
   * @throws {AgentSidecarError} CALL_NOT_PENDING when no such call waits.
   */
  async deny(sessionId: string, callId: string, options: DenyOptions = {}): Promise<void> {
    await this.#decide(
      sessionId,
      callId,
      ApprovalDecision.APPROVAL_DECISION_DENY,
      options.reason ?? "",
      options,
    );
  }

  /**
   * Starts a background run of one user turn and returns it at once (`RUN_STATE_SUBMITTED` or
   * later); the run goes on without the caller. Not retry-safe: a retry after a lost answer
   * starts a second run.
   *
   * @throws {AgentSidecarError} SESSION_BUSY (the session's background run has not finished),
   *   RUN_QUEUE_FULL or QUOTA_EXCEEDED (with a retry delay), CALLBACK_NOT_ALLOWED,
   *   SESSION_NOT_FOUND, INVALID_REQUEST.
   */
  async startRun(sessionId: string, input: string, options: StartRunOptions = {}): Promise<Run> {
    const request = StartRunRequest.fromPartial({
      sessionId,
      input,
      outputMode: options.outputMode ?? OutputMode.OUTPUT_MODE_UNSPECIFIED,
      callback: options.callbackUrl ? { url: options.callbackUrl } : undefined,
      requestId: options.requestId ?? "",
    });
    const response = await this.#unary(this.stub.startRun, request, options, true);
    return required(response.run, "StartRunResponse.run");
  }

  /**
   * Yields a background run's events after `afterSequence`, the stored ones first, then each
   * as it is stored, until the last (`runFinished`). A stream that breaks off before it is
   * watched again from the last event yielded (unless `reconnect` is false), so no event is
   * missed and none is yielded twice; a watch that ends cleanly has yielded the last event.
   *
   * @throws {AgentSidecarError} RUN_NOT_FOUND; CANCELLED after an abort; DEADLINE_EXCEEDED
   *   past the deadline; or the status that broke the stream off when reconnect is false.
   */
  async *watchRun(
    runId: string,
    options: WatchRunOptions = {},
  ): AsyncGenerator<StreamRunResponse, void, undefined> {
    const { signal, deadline } = options;
    let last = options.afterSequence ?? 0;
    let backoff = 50;
    for (;;) {
      throwIfAborted(signal);
      const call: ClientReadableStream<WatchRunResponse> = this.stub.watchRun(
        WatchRunRequest.fromPartial({ runId, afterSequence: last }),
        new Metadata(),
        callOptions(deadline),
      );
      const cancel = (): void => call.cancel();
      signal?.addEventListener("abort", cancel, { once: true });
      try {
        for await (const response of call as AsyncIterable<WatchRunResponse>) {
          const event = required(response.event, "WatchRunResponse.event");
          last = event.sequence;
          backoff = 50;
          yield event;
          if (event.event?.$case === "runFinished") return;
        }
        return; // ended cleanly: every event after the last one was sent
      } catch (error) {
        if (!isServiceError(error)) throw error;
        const failure = AgentSidecarError.from(error);
        if (options.reconnect === false || signal?.aborted || !RECONNECT.has(failure.code) ||
          failure.reason !== undefined || pastDeadline(deadline)) {
          throw failure;
        }
      } finally {
        signal?.removeEventListener("abort", cancel);
        call.cancel();
      }
      await new Promise((resolve) => setTimeout(resolve, backoff));
      backoff = Math.min(2_000, backoff * 2);
    }
  }

  /**
   * Returns a background run, with its result once it finished.
   *
   * @throws {AgentSidecarError} RUN_NOT_FOUND.
   */
  async getRun(runId: string, options: CallOptions = {}): Promise<Run> {
    const response = await this.#unary(this.stub.getRun, GetRunRequest.fromPartial({ runId }), options, true);
    return required(response.run, "GetRunResponse.run");
  }

  /** Lists a session's background runs, newest first, without their results. */
  listRuns(sessionId: string, options: ListRunsOptions = {}): Promise<ListRunsResponse> {
    const request = ListRunsRequest.fromPartial({
      sessionId,
      pageSize: options.pageSize ?? 0,
      pageToken: options.pageToken ?? "",
    });
    return this.#unary(this.stub.listRuns, request, options, true);
  }

  /**
   * Cancels a background run and its tool calls in flight; returns it once cancelled, or as it
   * finished when it had (so it is safe to retry).
   *
   * @throws {AgentSidecarError} RUN_NOT_FOUND.
   */
  async cancelRun(runId: string, options: CallOptions = {}): Promise<Run> {
    const response = await this.#unary(this.stub.cancelRun, CancelRunRequest.fromPartial({ runId }), options, true);
    return required(response.run, "CancelRunResponse.run");
  }

  async #answer(
    handler: ApprovalHandler,
    request: ApprovalRequired,
    context: ApprovalContext,
    options: StreamOptions,
  ): Promise<void> {
    const decided = Promise.resolve().then(() => handler(request, context));
    const ended = new Promise<typeof STREAM_ENDED>((resolve) => {
      if (context.signal.aborted) resolve(STREAM_ENDED);
      context.signal.addEventListener("abort", () => resolve(STREAM_ENDED), { once: true });
    });
    const answer = await Promise.race([decided, ended]);
    if (answer === STREAM_ENDED) {
      // The call ended (cancelled, deadline, or the run went on without the decision) while
      // the handler was deciding: nothing is left to answer; the stream tells what happened.
      decided.catch(() => undefined);
      return;
    }
    const { decision, reason } =
      typeof answer === "string" ? { decision: answer, reason: undefined } : answer;
    const callOpts: CallOptions = {};
    if (options.signal) callOpts.signal = options.signal;
    if (options.metadata) callOpts.metadata = options.metadata;
    if (decision === "approve") {
      await this.approve(context.sessionId, request.callId, callOpts);
    } else if (decision === "deny") {
      await this.deny(context.sessionId, request.callId, { ...callOpts, reason: reason ?? "" });
    } else {
      throw new TypeError(
        `an approval handler answered ${String(decision)}: answer "approve" or "deny"`,
      );
    }
  }

  async #decide(
    sessionId: string,
    callId: string,
    decision: ApprovalDecision,
    reason: string,
    options: CallOptions,
  ): Promise<void> {
    const request = ApproveToolCallRequest.fromPartial({ sessionId, callId, decision, reason });
    await this.#unary(this.stub.approveToolCall, request, options, true);
  }

  #unary<Req, Res>(
    method: UnaryMethod<Req, Res>,
    request: Req,
    options: CallOptions,
    defaultDeadline: boolean,
  ): Promise<Res> {
    const { signal } = options;
    return new Promise<Res>((resolve, reject) => {
      if (signal?.aborted) {
        reject(abortedError(signal));
        return;
      }
      const deadline =
        options.deadline ?? (defaultDeadline ? Date.now() + this.#defaultTimeoutMs : undefined);
      const cancel = (): void => call.cancel();
      const call = method.call(
        this.stub,
        request,
        toMetadata(options.metadata),
        callOptions(deadline),
        (error, response) => {
          signal?.removeEventListener("abort", cancel);
          if (error) {
            reject(AgentSidecarError.from(error));
          } else {
            resolve(response);
          }
        },
      );
      signal?.addEventListener("abort", cancel, { once: true });
    });
  }
}

/** Codes of a watch that broke off (with no reason from the sidecar), which watching again can mend. */
const RECONNECT: ReadonlySet<number> = new Set([
  GrpcStatus.UNAVAILABLE,
  GrpcStatus.CANCELLED,
  GrpcStatus.DEADLINE_EXCEEDED,
]);

function pastDeadline(deadline: Date | number | undefined): boolean {
  return deadline !== undefined && Date.now() >= (deadline instanceof Date ? deadline.getTime() : deadline);
}

function callOptions(deadline: Date | number | undefined): Partial<GrpcCallOptions> {
  return deadline === undefined ? {} : { deadline };
}

function toMetadata(metadata: CallOptions["metadata"]): Metadata {
  if (metadata instanceof Metadata) {
    return metadata;
  }
  const result = new Metadata();
  for (const [key, value] of Object.entries(metadata ?? {})) {
    result.set(key, value);
  }
  return result;
}

function abortedError(signal: AbortSignal): AgentSidecarError {
  return new AgentSidecarError({
    code: GrpcStatus.CANCELLED,
    details: "the call was aborted before it started",
    cause: signal.reason,
  });
}

function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) {
    throw abortedError(signal);
  }
}

function required<T>(value: T | undefined, field: string): T {
  if (value === undefined) {
    throw new AgentSidecarError({
      code: GrpcStatus.INTERNAL,
      details: `the sidecar's response has no ${field}`,
    });
  }
  return value;
}
