package dev.agentsidecar.toolserver;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.protobuf.Duration;
import dev.agentsidecar.v1.CallToolRequest;
import dev.agentsidecar.v1.CallToolResponse;
import dev.agentsidecar.v1.ListToolsRequest;
import dev.agentsidecar.v1.ListToolsResponse;
import dev.agentsidecar.v1.StreamToolRequest;
import dev.agentsidecar.v1.StreamToolResponse;
import dev.agentsidecar.v1.ToolError;
import dev.agentsidecar.v1.ToolErrorKind;
import dev.agentsidecar.v1.ToolProgress;
import dev.agentsidecar.v1.ToolResult;
import dev.agentsidecar.v1.ToolServiceGrpc;
import io.grpc.Context;
import io.grpc.Deadline;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The {@code agentsidecar.v1.ToolService} handlers. A tool failing is data (a result whose
 * ToolError the model reads); the protocol failing is a status (NOT_FOUND, INVALID_ARGUMENT,
 * DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE while draining, UNAUTHENTICATED when who the call
 * serves does not verify).
 */
final class ToolService extends ToolServiceGrpc.ToolServiceImplBase {
  private static final Logger LOG = Logger.getLogger("dev.agentsidecar.toolserver");

  private final Map<String, RegisteredTool> tools = new LinkedHashMap<>();
  private final ListToolsResponse list;
  private final ExecutorService executor;
  private final ObjectMapper json;
  private final IdentityVerifier identity;
  private final AtomicInteger inFlight = new AtomicInteger();
  private volatile boolean draining;

  /** {@code identity} verifies who each call serves before its tool runs; null: nothing is verified. */
  ToolService(List<RegisteredTool> registered, ExecutorService executor, ObjectMapper json, IdentityVerifier identity) {
    ListToolsResponse.Builder response = ListToolsResponse.newBuilder();
    for (RegisteredTool tool : registered) {
      tools.put(tool.name, tool);
      response.addTools(tool.descriptor);
    }
    try {
      byte[] digest = MessageDigest.getInstance("SHA-256").digest(response.build().toByteArray());
      response.setToolSetVersion(HexFormat.of().formatHex(digest).substring(0, 16));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
    this.list = response.build();
    this.executor = executor;
    this.json = json;
    this.identity = identity;
  }

  int inFlight() {
    return inFlight.get();
  }

  void drain() {
    draining = true;
  }

  @Override
  public void listTools(ListToolsRequest request, StreamObserver<ListToolsResponse> response) {
    response.onNext(list);
    response.onCompleted();
  }

  @Override
  public void callTool(CallToolRequest request, StreamObserver<CallToolResponse> response) {
    try {
      ToolResult result = call(request, null);
      response.onNext(CallToolResponse.newBuilder().setResult(result).build());
      response.onCompleted();
    } catch (StatusFailure failure) {
      response.onError(failure.status.asRuntimeException());
    }
  }

  @Override
  public void streamTool(StreamToolRequest request, StreamObserver<StreamToolResponse> response) {
    ServerCallStreamObserver<StreamToolResponse> stream = (ServerCallStreamObserver<StreamToolResponse>) response;
    Object lock = new Object();
    boolean[] over = {false};
    ProgressSink progress =
        (done, total, message) -> {
          synchronized (lock) {
            if (!over[0] && !stream.isCancelled()) {
              stream.onNext(StreamToolResponse.newBuilder()
                  .setProgress(ToolProgress.newBuilder().setProgress(done).setTotal(total).setMessage(message))
                  .build());
            }
          }
        };
    try {
      ToolResult result = call(request.getCall(), progress);
      synchronized (lock) {
        over[0] = true;
        stream.onNext(StreamToolResponse.newBuilder().setResult(result).build());
        stream.onCompleted();
      }
    } catch (StatusFailure failure) {
      synchronized (lock) {
        over[0] = true;
        stream.onError(failure.status.asRuntimeException());
      }
    }
  }

  interface ProgressSink {
    void send(double progress, double total, String message);
  }

  private static final class StatusFailure extends Exception {
    private static final long serialVersionUID = 1L;
    final transient Status status;

    StatusFailure(Status status) {
      super(status.getDescription(), null, false, false);
      this.status = status;
    }
  }

  private ToolResult call(CallToolRequest request, ProgressSink progress) throws StatusFailure {
    if (draining) {
      throw new StatusFailure(Status.UNAVAILABLE.withDescription("the tool server is shutting down; retry on another instance"));
    }
    String name = request.getToolName();
    if (name.isEmpty()) {
      throw new StatusFailure(Status.INVALID_ARGUMENT.withDescription("tool_name is empty"));
    }
    RegisteredTool tool = tools.get(name);
    if (tool == null) {
      throw new StatusFailure(Status.NOT_FOUND.withDescription(
          "unknown tool \"" + name + "\"; this server offers: " + (tools.isEmpty() ? "(none)" : String.join(", ", tools.keySet()))));
    }
    Metadata metadata = TokenCheck.METADATA.get();
    if (metadata == null) {
      metadata = new Metadata();
    }
    CallerIdentity caller = identity == null ? null : verified(tool, request, metadata);
    inFlight.incrementAndGet();
    try {
      return run(tool, request, metadata, caller, progress);
    } finally {
      if (inFlight.decrementAndGet() == 0) {
        synchronized (this) {
          notifyAll(); // a drain waits for this
        }
      }
    }
  }

  /** The call's verified identity; the call fails UNAUTHENTICATED, before its tool runs, without one. */
  private CallerIdentity verified(RegisteredTool tool, CallToolRequest request, Metadata metadata) throws StatusFailure {
    try {
      return identity.verify(metadata, request.getCallId());
    } catch (IdentityRefused refused) {
      String callId = request.getCallId();
      LOG.warning(tool.name + ": call " + (callId.length() > 64 ? callId.substring(0, 64) : callId) + " refused: " + refused.getMessage());
      throw new StatusFailure(Status.UNAUTHENTICATED.withDescription(refused.getMessage()));
    }
  }

  private ToolResult run(RegisteredTool tool, CallToolRequest request, Metadata metadata, CallerIdentity identity,
      ProgressSink progress) throws StatusFailure {
    long started = System.nanoTime();
    ToolResult.Builder result = ToolResult.newBuilder().setCallId(request.getCallId());
    String text = request.getArguments().isBlank() ? "{}" : request.getArguments();
    JsonNode arguments;
    try {
      arguments = json.readTree(text);
    } catch (JsonProcessingException e) {
      throw new StatusFailure(Status.INVALID_ARGUMENT.withDescription(
          tool.name + ": arguments must be a JSON object: " + e.getOriginalMessage()));
    }
    if (arguments == null || !arguments.isObject()) {
      String kind = arguments == null || arguments.isNull() ? "null" : arguments.getNodeType().name().toLowerCase(java.util.Locale.ROOT);
      throw new StatusFailure(Status.INVALID_ARGUMENT.withDescription(tool.name + ": arguments must be a JSON object, got " + kind));
    }
    Optional<String> invalid = tool.violations(arguments);
    if (invalid.isPresent()) {
      return finish(result.setError(error(ToolErrorKind.TOOL_ERROR_KIND_INVALID_ARGUMENTS, invalid.get())), started);
    }
    Context grpcContext = Context.current();
    Deadline deadline = grpcContext.getDeadline();
    CallContext context = new CallContext(request.getCallId(), tool.name, metadata, identity, deadline, progress);
    Future<Object> future = executor.submit(() -> tool.invoke(arguments, context));
    Context.CancellationListener onCancel = ctx -> future.cancel(true);
    grpcContext.addListener(onCancel, Runnable::run);
    try {
      Object value = deadline == null ? future.get() : future.get(Math.max(0, deadline.timeRemaining(TimeUnit.NANOSECONDS)), TimeUnit.NANOSECONDS);
      result.setOutput(tool.encode(value));
    } catch (TimeoutException e) {
      future.cancel(true);
      throw new StatusFailure(Status.DEADLINE_EXCEEDED.withDescription(tool.name + " did not finish before the call's deadline; it was interrupted"));
    } catch (CancellationException e) {
      throw new StatusFailure(Status.CANCELLED.withDescription(tool.name + ": the call was cancelled"));
    } catch (InterruptedException e) {
      future.cancel(true);
      Thread.currentThread().interrupt();
      throw new StatusFailure(Status.CANCELLED.withDescription(tool.name + ": the server stopped"));
    } catch (java.util.concurrent.ExecutionException e) {
      if (grpcContext.isCancelled()) {
        throw new StatusFailure(Status.fromThrowable(grpcContext.cancellationCause()).getCode() == Status.Code.DEADLINE_EXCEEDED
            ? Status.DEADLINE_EXCEEDED.withDescription(tool.name + " did not finish before the call's deadline")
            : Status.CANCELLED.withDescription(tool.name + ": the call was cancelled"));
      }
      Throwable cause = e.getCause();
      if (cause instanceof InterruptedException) {
        // Interrupted from outside: the server stops, or the call ended meanwhile.
        throw new StatusFailure(Status.CANCELLED.withDescription(tool.name + " was interrupted: the call ended or the server stopped"));
      }
      if (cause instanceof ToolFailure failure) {
        result.setError(error(ToolErrorKind.TOOL_ERROR_KIND_EXECUTION_FAILED, failure.getMessage()));
      } else {
        LOG.log(Level.WARNING, "tool " + tool.name + " threw", cause);
        String message = cause.getMessage();
        result.setError(error(ToolErrorKind.TOOL_ERROR_KIND_EXECUTION_FAILED,
            cause.getClass().getSimpleName() + (message == null || message.isEmpty() ? "" : ": " + message)));
      }
    } catch (JsonProcessingException e) {
      result.setError(error(ToolErrorKind.TOOL_ERROR_KIND_EXECUTION_FAILED,
          tool.name + " returned a value that cannot be encoded as JSON: " + e.getOriginalMessage()));
    } finally {
      grpcContext.removeListener(onCancel);
      context.end();
    }
    return finish(result, started);
  }

  private static ToolError error(ToolErrorKind kind, String message) {
    return ToolError.newBuilder().setKind(kind).setMessage(message).build();
  }

  private static ToolResult finish(ToolResult.Builder result, long started) {
    long nanos = System.nanoTime() - started;
    return result.setHandlerDuration(Duration.newBuilder().setSeconds(nanos / 1_000_000_000L).setNanos((int) (nanos % 1_000_000_000L))).build();
  }

  /** The context a tool is handed. */
  private static final class CallContext implements ToolContext {
    private final String callId;
    private final String toolName;
    private final Metadata metadata;
    private final Deadline deadline;
    private final ProgressSink progress;
    private final Context grpc = Context.current();
    private volatile CallerIdentity identity; // verified, or read from the metadata when first asked
    private volatile boolean ended;

    CallContext(String callId, String toolName, Metadata metadata, CallerIdentity identity, Deadline deadline, ProgressSink progress) {
      this.callId = callId;
      this.toolName = toolName;
      this.metadata = metadata;
      this.identity = identity;
      this.deadline = deadline;
      this.progress = progress;
    }

    void end() {
      ended = true;
    }

    @Override
    public String callId() {
      return callId;
    }

    @Override
    public String toolName() {
      return toolName;
    }

    @Override
    public Metadata metadata() {
      return metadata;
    }

    @Override
    public CallerIdentity identity() {
      CallerIdentity known = identity;
      if (known == null) {
        known = ToolContext.super.identity();
        identity = known;
      }
      return known;
    }

    @Override
    public Optional<java.time.Duration> timeRemaining() {
      return deadline == null
          ? Optional.empty()
          : Optional.of(java.time.Duration.ofNanos(Math.max(0, deadline.timeRemaining(TimeUnit.NANOSECONDS))));
    }

    @Override
    public boolean isCancelled() {
      return ended || grpc.isCancelled() || Thread.currentThread().isInterrupted();
    }

    @Override
    public void reportProgress(double done, double total, String message) {
      if (progress != null && !isCancelled()) {
        progress.send(done, total, message == null ? "" : message);
      }
    }
  }
}
