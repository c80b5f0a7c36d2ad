package dev.agentsidecar.client;

import dev.agentsidecar.v1.AgentServiceGrpc;
import dev.agentsidecar.v1.ApproveToolCallRequest;
import dev.agentsidecar.v1.ApproveToolCallResponse;
import dev.agentsidecar.v1.CancelRunRequest;
import dev.agentsidecar.v1.CreateSessionRequest;
import dev.agentsidecar.v1.DeleteSessionRequest;
import dev.agentsidecar.v1.GetRunRequest;
import dev.agentsidecar.v1.GetSessionRequest;
import dev.agentsidecar.v1.ListRunsRequest;
import dev.agentsidecar.v1.ListRunsResponse;
import dev.agentsidecar.v1.ListSessionToolsRequest;
import dev.agentsidecar.v1.Run;
import dev.agentsidecar.v1.RunCallback;
import dev.agentsidecar.v1.RunRequest;
import dev.agentsidecar.v1.RunResponse;
import dev.agentsidecar.v1.RunResult;
import dev.agentsidecar.v1.Session;
import dev.agentsidecar.v1.SessionTool;
import dev.agentsidecar.v1.StartRunRequest;
import dev.agentsidecar.v1.StreamRunRequest;
import dev.agentsidecar.v1.StreamRunResponse;
import io.grpc.Channel;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * A client of one agent sidecar ({@code agentsidecar.v1.AgentService}).
 *
 * <pre>{@code
 * try (AgentClient client = AgentClient.connect("127.0.0.1:50051")) {
 *   Session session = client.createSession("default");
 *   try (RunStream events = client.stream(session.getSessionId(), "Where is order 42?")) {
 *     for (StreamRunResponse event : events) {
 *       if (event.hasTextDelta()) System.out.print(event.getTextDelta().getText());
 *     }
 *   }
 *   RunResponse reply = client.withTimeout(Duration.ofSeconds(5)).run(session.getSessionId(), "And 43?");
 * }
 * }</pre>
 *
 * <p><b>Deadlines.</b> Every call gets a deadline: {@link #DEFAULT_TIMEOUT} from the moment it
 * starts, or what {@link #withTimeout} set. For a run the deadline covers the whole run; the
 * sidecar fits the run into it and, when the time runs out first, ends it with {@code
 * STOP_REASON_BUDGET_EXHAUSTED} just before the deadline, so that the result still arrives.
 *
 * <p><b>Errors.</b> Every failed call throws (or completes its future with) an {@link
 * AgentSidecarException}, which carries the status code and the sidecar's error reason.
 *
 * <p><b>Approvals.</b> Tool calls that need approval stop a streamed run with an {@code
 * approval_required} event until {@link #approve}, {@link #deny} or an {@link ApprovalHandler}
 * given to {@link #stream(String, String, ApprovalHandler)} decides.
 *
 * <p><b>Cancellation.</b> {@link RunStream#cancel()}, closing a {@link RunStream}, or cancelling
 * a future returned here cancels the call; the sidecar stops the run and its tool calls and
 * records the turn as cancelled.
 *
 * <p><b>Background runs.</b> {@link #startRun} returns a run at once and the run goes on without
 * the caller; {@link #watchRun} reads its events from any point (reconnecting on its own),
 * {@link #getRun} and {@link #listRuns} read it, {@link #cancelRun} cancels it.
 *
 * <p>Instances are immutable and thread-safe; {@code with...} methods return views that share the
 * channel. Close the client that {@link #connect} or {@link #create} returned.
 */
public final class AgentClient implements AutoCloseable {
  /** The deadline of every call unless {@link #withTimeout} says otherwise. */
  public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(60);

  private final Channel channel;
  private final ManagedChannel ownedChannel;
  private final ExecutorService ownedExecutor;
  private final Executor approvalExecutor;
  private final Duration timeout;

  private AgentClient(
      Channel channel,
      ManagedChannel ownedChannel,
      ExecutorService ownedExecutor,
      Executor approvalExecutor,
      Duration timeout) {
    this.channel = channel;
    this.ownedChannel = ownedChannel;
    this.ownedExecutor = ownedExecutor;
    this.approvalExecutor = approvalExecutor;
    this.timeout = timeout;
  }

  /**
   * Connects to the sidecar at {@code target} ({@code host:port}, or any gRPC target such as
   * {@code dns:///sidecar:50051}) without TLS, as a sidecar on the same host or pod is reached.
   * {@link #close()} shuts the channel down.
   */
  public static AgentClient connect(String target) {
    ManagedChannel channel =
        Grpc.newChannelBuilder(target, InsecureChannelCredentials.create()).build();
    ExecutorService executor = approvalPool();
    return new AgentClient(channel, channel, executor, executor, DEFAULT_TIMEOUT);
  }

  /**
   * A client on a channel you own (for TLS, interceptors that add credentials, or a shared
   * channel); {@link #close()} leaves the channel open.
   */
  public static AgentClient create(Channel channel) {
    ExecutorService executor = approvalPool();
    return new AgentClient(
        Objects.requireNonNull(channel, "channel"), null, executor, executor, DEFAULT_TIMEOUT);
  }

  /** A view of this client whose calls each get {@code timeout} from the moment they start. */
  public AgentClient withTimeout(Duration timeout) {
    Objects.requireNonNull(timeout, "timeout");
    if (timeout.isZero() || timeout.isNegative()) {
      throw new IllegalArgumentException("timeout must be positive, not " + timeout);
    }
    return new AgentClient(channel, null, null, approvalExecutor, timeout);
  }

  /**
   * A view of this client that runs {@link ApprovalHandler}s on {@code executor} (by default, a
   * pool of daemon threads that the client owns).
   */
  public AgentClient withApprovalExecutor(Executor executor) {
    return new AgentClient(
        channel, null, null, Objects.requireNonNull(executor, "executor"), timeout);
  }

  /** The deadline each call gets. */
  public Duration timeout() {
    return timeout;
  }

  /** The channel, for the generated stubs of {@code dev.agentsidecar.v1}. */
  public Channel channel() {
    return channel;
  }

  // -- sessions -------------------------------------------------------------------------------

  /** Starts a session under {@code profile}, with an id the sidecar generates. */
  public Session createSession(String profile) {
    return createSession(CreateSessionRequest.newBuilder().setProfile(profile).build());
  }

  /** Starts a session as {@code request} says (profile, session id, labels). */
  public Session createSession(CreateSessionRequest request) {
    return call(() -> blocking().createSession(request).getSession());
  }

  /**
   * The session and its turns.
   *
   * @throws AgentSidecarException with reason {@link AgentSidecarException#SESSION_NOT_FOUND}
   *     when there is no such session
   */
  public Session getSession(String sessionId) {
    return call(
        () ->
            blocking()
                .getSession(GetSessionRequest.newBuilder().setSessionId(sessionId).build())
                .getSession());
  }

  /** Deletes a session; true when one was found. Safe to retry. */
  public boolean deleteSession(String sessionId) {
    return call(
        () ->
            blocking()
                .deleteSession(DeleteSessionRequest.newBuilder().setSessionId(sessionId).build())
                .getDeleted());
  }

  /** The tools the session's profile allows, with whether each can be called now. */
  public List<SessionTool> listSessionTools(String sessionId) {
    return call(
        () ->
            blocking()
                .listSessionTools(
                    ListSessionToolsRequest.newBuilder().setSessionId(sessionId).build())
                .getToolsList());
  }

  // -- unary runs -----------------------------------------------------------------------------

  /**
   * Runs one turn and returns its result only. Tool calls that need approval are denied in a
   * unary run; use {@link #stream(String, String, ApprovalHandler)} to approve them.
   */
  public RunResponse run(String sessionId, String input) {
    return run(RunRequest.newBuilder().setSessionId(sessionId).setInput(input).build());
  }

  /** Runs one turn as {@code request} says and returns its result. */
  public RunResponse run(RunRequest request) {
    return call(() -> blocking().run(request));
  }

  /** {@link #run(String, String)} without blocking; cancelling the future cancels the run. */
  public CompletableFuture<RunResponse> runAsync(String sessionId, String input) {
    return runAsync(RunRequest.newBuilder().setSessionId(sessionId).setInput(input).build());
  }

  /** {@link #run(RunRequest)} without blocking; cancelling the future cancels the run. */
  public CompletableFuture<RunResponse> runAsync(RunRequest request) {
    CallFuture<RunRequest, RunResponse> future = new CallFuture<>();
    async().run(request, future);
    return future;
  }

  // -- streamed runs --------------------------------------------------------------------------

  /** Runs one turn and streams its events; approvals are left to the reader. */
  public RunStream stream(String sessionId, String input) {
    return stream(sessionId, input, null);
  }

  /**
   * Runs one turn and streams its events; {@code approvals} (may be null) decides on each tool
   * call that waits for approval.
   */
  public RunStream stream(String sessionId, String input, ApprovalHandler approvals) {
    return stream(
        StreamRunRequest.newBuilder().setSessionId(sessionId).setInput(input).build(), approvals);
  }

  /** Runs one turn as {@code request} says and streams its events. */
  public RunStream stream(StreamRunRequest request, ApprovalHandler approvals) {
    RunStream stream = new RunStream();
    RunCall call =
        new RunCall(this, request.getSessionId(), approvals, stream.sink(), RunStream.window());
    stream.attach(call);
    async().streamRun(request, call);
    return stream;
  }

  /**
   * Runs one turn without blocking: each event goes to {@code onEvent} as it arrives (on a gRPC
   * thread, in order; keep it quick), and the future completes with the run's result. Cancelling
   * the future cancels the run. {@code approvals} may be null.
   */
  public CompletableFuture<RunResult> streamAsync(
      String sessionId,
      String input,
      ApprovalHandler approvals,
      Consumer<StreamRunResponse> onEvent) {
    return streamAsync(
        StreamRunRequest.newBuilder().setSessionId(sessionId).setInput(input).build(),
        approvals,
        onEvent);
  }

  /** {@link #streamAsync(String, String, ApprovalHandler, Consumer)} for a full request. */
  public CompletableFuture<RunResult> streamAsync(
      StreamRunRequest request, ApprovalHandler approvals, Consumer<StreamRunResponse> onEvent) {
    RunFuture future = new RunFuture(Objects.requireNonNull(onEvent, "onEvent"));
    RunCall call = new RunCall(this, request.getSessionId(), approvals, future, 0);
    future.attach(call);
    async().streamRun(request, call);
    return future;
  }

  // -- approvals ------------------------------------------------------------------------------

  /**
   * Lets a waiting tool call run.
   *
   * @throws AgentSidecarException with reason {@link AgentSidecarException#CALL_NOT_PENDING}
   *     when no such call waits
   */
  public void approve(String sessionId, String callId) {
    approveToolCall(sessionId, callId, Approval.approve());
  }

  /** Denies a waiting tool call; the model sees it as denied, with {@code reason}. */
  public void deny(String sessionId, String callId, String reason) {
    approveToolCall(sessionId, callId, Approval.deny(reason));
  }

  /** Delivers {@code approval} for a waiting tool call. */
  public void approveToolCall(String sessionId, String callId, Approval approval) {
    call(() -> blocking().approveToolCall(approvalRequest(sessionId, callId, approval)));
  }

  /** {@link #approveToolCall} without blocking. */
  public CompletableFuture<Void> approveToolCallAsync(
      String sessionId, String callId, Approval approval) {
    CallFuture<ApproveToolCallRequest, ApproveToolCallResponse> future = new CallFuture<>();
    async().approveToolCall(approvalRequest(sessionId, callId, approval), future);
    return future.thenApply(reply -> null);
  }

  // -- background runs ------------------------------------------------------------------------

  /**
   * Starts a background run of one user turn and returns it at once (submitted, or later); the
   * run goes on without the caller. Not retry-safe: a retry after a lost answer starts a second
   * run.
   *
   * @throws AgentSidecarException {@link AgentSidecarException#SESSION_BUSY} when the session's
   *     background run has not finished; {@link AgentSidecarException#RUN_QUEUE_FULL} or {@link
   *     AgentSidecarException#QUOTA_EXCEEDED} (with a retry delay) when too many wait or run
   */
  public Run startRun(String sessionId, String input) {
    return startRun(StartRunRequest.newBuilder().setSessionId(sessionId).setInput(input).build());
  }

  /** {@link #startRun(String, String)}, with a completion callback told the run's final state. */
  public Run startRun(String sessionId, String input, String callbackUrl) {
    return startRun(
        StartRunRequest.newBuilder()
            .setSessionId(sessionId)
            .setInput(input)
            .setCallback(RunCallback.newBuilder().setUrl(callbackUrl))
            .build());
  }

  /** Starts a background run as {@code request} says. */
  public Run startRun(StartRunRequest request) {
    return call(() -> blocking().startRun(request).getRun());
  }

  /**
   * The events of a background run after {@code afterSequence} (0: all of them), until its last;
   * see {@link RunWatch}.
   */
  public RunWatch watchRun(String runId, long afterSequence) {
    return new RunWatch(runId, afterSequence, request -> blocking().watchRun(request));
  }

  /**
   * A background run, with its result once it finished.
   *
   * @throws AgentSidecarException with reason {@link AgentSidecarException#RUN_NOT_FOUND} when
   *     there is no such run of the caller's
   */
  public Run getRun(String runId) {
    return call(() -> blocking().getRun(GetRunRequest.newBuilder().setRunId(runId).build()).getRun());
  }

  /**
   * A page of a session's background runs, newest first, without their results; {@code
   * pageSize} 0 means 50, and {@code pageToken} "" the first page.
   */
  public ListRunsResponse listRuns(String sessionId, int pageSize, String pageToken) {
    return call(
        () ->
            blocking()
                .listRuns(
                    ListRunsRequest.newBuilder()
                        .setSessionId(sessionId)
                        .setPageSize(pageSize)
                        .setPageToken(pageToken)
                        .build()));
  }

  /**
   * Cancels a background run and its tool calls in flight; returns it once cancelled, or as it
   * finished when it had (so it is safe to retry).
   */
  public Run cancelRun(String runId) {
    return call(
        () -> blocking().cancelRun(CancelRunRequest.newBuilder().setRunId(runId).build()).getRun());
  }

  // -- lifecycle ------------------------------------------------------------------------------

  /**
   * Shuts down what this client owns: the channel {@link #connect} made (waiting up to 5 s for
   * calls in flight) and the approval threads. Views ({@code with...}) own nothing.
   */
  @Override
  public void close() {
    if (ownedExecutor != null) {
      ownedExecutor.shutdownNow();
    }
    if (ownedChannel != null) {
      ownedChannel.shutdown();
      try {
        if (!ownedChannel.awaitTermination(5, TimeUnit.SECONDS)) {
          ownedChannel.shutdownNow();
        }
      } catch (InterruptedException e) {
        ownedChannel.shutdownNow();
        Thread.currentThread().interrupt();
      }
    }
  }

  Executor approvalExecutor() {
    return approvalExecutor;
  }

  private AgentServiceGrpc.AgentServiceBlockingStub blocking() {
    return AgentServiceGrpc.newBlockingStub(channel)
        .withDeadlineAfter(timeout.toNanos(), TimeUnit.NANOSECONDS);
  }

  private AgentServiceGrpc.AgentServiceStub async() {
    return AgentServiceGrpc.newStub(channel)
        .withDeadlineAfter(timeout.toNanos(), TimeUnit.NANOSECONDS);
  }

  private static ApproveToolCallRequest approvalRequest(
      String sessionId, String callId, Approval approval) {
    return ApproveToolCallRequest.newBuilder()
        .setSessionId(sessionId)
        .setCallId(callId)
        .setDecision(approval.decision())
        .setReason(approval.reason())
        .build();
  }

  private static <T> T call(Supplier<T> rpc) {
    try {
      return rpc.get();
    } catch (StatusRuntimeException e) {
      throw AgentSidecarException.from(e);
    }
  }

  private static ExecutorService approvalPool() {
    AtomicInteger count = new AtomicInteger();
    ThreadFactory threads =
        runnable -> {
          Thread thread = new Thread(runnable, "agent-sidecar-approval-" + count.incrementAndGet());
          thread.setDaemon(true);
          return thread;
        };
    return Executors.newCachedThreadPool(threads);
  }
}
