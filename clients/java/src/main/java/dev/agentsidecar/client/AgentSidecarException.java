package dev.agentsidecar.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import com.google.rpc.ResourceInfo;
import com.google.rpc.RetryInfo;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * A call to the sidecar failed with a gRPC status.
 *
 * <p>Every error status from the sidecar carries {@code google.rpc.Status} details in the
 * {@code grpc-status-details-bin} trailer: a {@code google.rpc.ErrorInfo} whose {@link #reason()}
 * is stable and meant for code ({@link #SESSION_NOT_FOUND}, {@link #SESSION_BUSY}, ...), and,
 * where they apply, field violations ({@code google.rpc.BadRequest}), the missing resource
 * ({@code google.rpc.ResourceInfo}) and a retry delay ({@code google.rpc.RetryInfo}). Branch on
 * the reason, never on the message. A status without details (from a proxy, the transport, or
 * the client itself, such as a deadline that passed) has an empty reason; its {@link #code()} is
 * always set.
 *
 * <pre>{@code
 * try {
 *   client.getSession(id);
 * } catch (AgentSidecarException e) {
 *   if (e.hasReason(AgentSidecarException.SESSION_NOT_FOUND)) { ... }
 *   else if (e.retryDelay().isPresent()) { ... }
 *   else throw e;
 * }
 * }</pre>
 */
public final class AgentSidecarException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The {@code ErrorInfo.domain} of every reason the sidecar sets. */
  public static final String DOMAIN = "agentsidecar.v1";

  /** NOT_FOUND: no session with that id. */
  public static final String SESSION_NOT_FOUND = "SESSION_NOT_FOUND";
  /** NOT_FOUND: the sidecar has no agent profile of that name. */
  public static final String PROFILE_NOT_FOUND = "PROFILE_NOT_FOUND";
  /** NOT_FOUND: no tool call with that id waits for approval. */
  public static final String CALL_NOT_PENDING = "CALL_NOT_PENDING";
  /** ALREADY_EXISTS: a session with the requested id exists. */
  public static final String SESSION_EXISTS = "SESSION_EXISTS";
  /** ALREADY_EXISTS: a StartRun request_id started a run with another request. */
  public static final String REQUEST_ID_REUSED = "REQUEST_ID_REUSED";
  /** FAILED_PRECONDITION: the session is running another turn; a retry delay is given. */
  public static final String SESSION_BUSY = "SESSION_BUSY";
  /** FAILED_PRECONDITION: the session's profile is no longer configured. */
  public static final String PROFILE_REMOVED = "PROFILE_REMOVED";
  /** INVALID_ARGUMENT: a malformed request; {@link #fieldViolations()} says which fields. */
  public static final String INVALID_REQUEST = "INVALID_REQUEST";
  /** INVALID_ARGUMENT: the input is larger than the sidecar accepts. */
  public static final String INPUT_TOO_LARGE = "INPUT_TOO_LARGE";
  /** UNAVAILABLE: the sidecar is draining; retry elsewhere or after the retry delay. */
  public static final String DRAINING = "DRAINING";
  /** RESOURCE_EXHAUSTED: the sidecar is at capacity; a retry delay is given. */
  public static final String OVERLOADED = "OVERLOADED";
  /** RESOURCE_EXHAUSTED: the caller's quota is used up; a retry delay is given. */
  public static final String QUOTA_EXCEEDED = "QUOTA_EXCEEDED";
  /** UNAUTHENTICATED: the call carried no valid credentials. */
  public static final String UNAUTHENTICATED = "UNAUTHENTICATED";
  /** PERMISSION_DENIED: the caller may not do this. */
  public static final String PERMISSION_DENIED = "PERMISSION_DENIED";
  /** INTERNAL: a bug or an unexpected failure; {@code metadata().get("error_id")} names the log line. */
  public static final String INTERNAL = "INTERNAL";
  /** NOT_FOUND: no such background run (never started, expired, or another caller's). */
  public static final String RUN_NOT_FOUND = "RUN_NOT_FOUND";
  /** RESOURCE_EXHAUSTED: as many background runs wait or run as allowed; a retry delay is given. */
  public static final String RUN_QUEUE_FULL = "RUN_QUEUE_FULL";
  /** PERMISSION_DENIED: the configuration does not let a run's callback go to that URL. */
  public static final String CALLBACK_NOT_ALLOWED = "CALLBACK_NOT_ALLOWED";
  /** FAILED_PRECONDITION: the sidecar serves no background runs. */
  public static final String BACKGROUND_RUNS_DISABLED = "BACKGROUND_RUNS_DISABLED";

  private static final Metadata.Key<byte[]> DETAILS_KEY =
      Metadata.Key.of("grpc-status-details-bin", Metadata.BINARY_BYTE_MARSHALLER);

  private final Status.Code code;
  private final String description;
  private final transient com.google.rpc.Status details;
  private final transient ErrorInfo errorInfo;
  private final transient Duration retryDelay;
  private final transient List<BadRequest.FieldViolation> fieldViolations;
  private final transient ResourceInfo resourceInfo;
  private final transient Metadata trailers;

  private AgentSidecarException(
      Status status, com.google.rpc.Status details, Metadata trailers, Throwable cause) {
    super(message(status, details), cause);
    this.code = status.getCode();
    this.description = status.getDescription() == null ? "" : status.getDescription();
    this.details = details;
    this.trailers = trailers == null ? new Metadata() : trailers;
    ErrorInfo info = null;
    Duration delay = null;
    List<BadRequest.FieldViolation> violations = List.of();
    ResourceInfo resource = null;
    if (details != null) {
      for (Any any : details.getDetailsList()) {
        try {
          if (any.is(ErrorInfo.class) && info == null) {
            info = any.unpack(ErrorInfo.class);
          } else if (any.is(RetryInfo.class) && delay == null) {
            com.google.protobuf.Duration d = any.unpack(RetryInfo.class).getRetryDelay();
            delay = Duration.ofSeconds(d.getSeconds(), d.getNanos());
          } else if (any.is(BadRequest.class) && violations.isEmpty()) {
            violations = List.copyOf(any.unpack(BadRequest.class).getFieldViolationsList());
          } else if (any.is(ResourceInfo.class) && resource == null) {
            resource = any.unpack(ResourceInfo.class);
          }
        } catch (InvalidProtocolBufferException e) {
          // A detail that does not parse is skipped; the others still count.
        }
      }
    }
    this.errorInfo = info == null ? ErrorInfo.getDefaultInstance() : info;
    this.retryDelay = delay;
    this.fieldViolations = violations;
    this.resourceInfo = resource;
  }

  /**
   * The exception for a failed gRPC call: reads the status, its details and trailers from {@code
   * t} (a {@code StatusRuntimeException} or {@code StatusException}, possibly wrapped). An {@code
   * AgentSidecarException} anywhere in the cause chain is returned as it is.
   */
  public static AgentSidecarException from(Throwable t) {
    for (Throwable c = t; c != null; c = c.getCause()) {
      if (c instanceof AgentSidecarException e) {
        return e;
      }
    }
    Status status = Status.fromThrowable(t);
    Metadata trailers = Status.trailersFromThrowable(t);
    com.google.rpc.Status details =
        trailers != null && trailers.containsKey(DETAILS_KEY) ? StatusProto.fromThrowable(t) : null;
    return new AgentSidecarException(status, details, trailers, t);
  }

  private static String message(Status status, com.google.rpc.Status details) {
    StringBuilder text = new StringBuilder(status.getCode().name());
    if (details != null) {
      for (Any any : details.getDetailsList()) {
        if (any.is(ErrorInfo.class)) {
          try {
            text.append(' ').append(any.unpack(ErrorInfo.class).getReason());
          } catch (InvalidProtocolBufferException e) {
            // The reason is left out of the message; the code is still there.
          }
          break;
        }
      }
    }
    if (status.getDescription() != null && !status.getDescription().isEmpty()) {
      text.append(": ").append(status.getDescription());
    }
    return text.toString();
  }

  /** The gRPC status code; always set. */
  public Status.Code code() {
    return code;
  }

  /** The status message, for people; empty when there was none. Never branch on it. */
  public String description() {
    return description;
  }

  /** The stable reason from {@code ErrorInfo}, such as {@link #SESSION_NOT_FOUND}; empty without details. */
  public String reason() {
    return errorInfo.getReason();
  }

  /** Whether {@link #reason()} is {@code reason}. */
  public boolean hasReason(String reason) {
    return !errorInfo.getReason().isEmpty() && errorInfo.getReason().equals(reason);
  }

  /** The reason's domain, {@link #DOMAIN} for the sidecar's own errors; empty without details. */
  public String domain() {
    return errorInfo.getDomain();
  }

  /** The {@code ErrorInfo} metadata: facts about the error, such as {@code error_id}. */
  public Map<String, String> metadata() {
    return errorInfo.getMetadataMap();
  }

  /** How long to wait before retrying, when the sidecar said ({@code RetryInfo}). */
  public Optional<Duration> retryDelay() {
    return Optional.ofNullable(retryDelay);
  }

  /** The request's invalid fields ({@code BadRequest}); empty when none were named. */
  public List<BadRequest.FieldViolation> fieldViolations() {
    return fieldViolations;
  }

  /** The resource the error is about ({@code ResourceInfo}), such as the missing session. */
  public Optional<ResourceInfo> resourceInfo() {
    return Optional.ofNullable(resourceInfo);
  }

  /** The whole {@code google.rpc.Status}, when the call carried one in its trailers. */
  public Optional<com.google.rpc.Status> details() {
    return Optional.ofNullable(details);
  }

  /** The call's trailers, as received (empty when the call failed before any arrived). */
  public Metadata trailers() {
    return trailers;
  }
}
