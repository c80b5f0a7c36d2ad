package dev.agentsidecar.client;

import dev.agentsidecar.v1.ApprovalRequired;
import dev.agentsidecar.v1.StreamRunRequest;
import dev.agentsidecar.v1.StreamRunResponse;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

/**
 * One StreamRun call: hands its events to a {@link Sink} in order and answers approvals through
 * the run's {@link ApprovalHandler}, off the gRPC thread.
 */
final class RunCall implements ClientResponseObserver<StreamRunRequest, StreamRunResponse> {
  /** Where the call's events and its end go; called on gRPC's threads, one call at a time. */
  interface Sink {
    void event(StreamRunResponse event);

    void failed(Throwable error);

    void completed();
  }

  private final AgentClient client;
  private final String sessionId;
  private final ApprovalHandler approvals;
  private final Sink sink;
  private final int window;
  private ClientCallStreamObserver<StreamRunRequest> call;

  /**
   * @param window how many events may wait unread: the consumer asks for more with {@link
   *     #request}; 0 leaves flow control to gRPC
   */
  RunCall(AgentClient client, String sessionId, ApprovalHandler approvals, Sink sink, int window) {
    this.client = client;
    this.sessionId = sessionId;
    this.approvals = approvals;
    this.sink = sink;
    this.window = window;
  }

  @Override
  public synchronized void beforeStart(ClientCallStreamObserver<StreamRunRequest> requestStream) {
    call = requestStream;
    if (window > 0) {
      requestStream.disableAutoRequestWithInitial(window);
    }
  }

  @Override
  public void onNext(StreamRunResponse event) {
    if (approvals != null && event.hasApprovalRequired()) {
      decide(event.getApprovalRequired());
    }
    sink.event(event);
  }

  @Override
  public void onError(Throwable error) {
    sink.failed(error);
  }

  @Override
  public void onCompleted() {
    sink.completed();
  }

  /** Asks for {@code count} more events (with a window). */
  synchronized void request(int count) {
    call.request(count);
  }

  /** Cancels the call, and so the run; a no-op once it has ended. */
  synchronized void cancel(String message, Throwable cause) {
    call.cancel(message, cause);
  }

  private void decide(ApprovalRequired request) {
    CompletableFuture.supplyAsync(
            () -> {
              try {
                return approvals.decide(request);
              } catch (Exception e) {
                throw new CompletionException(e);
              }
            },
            client.approvalExecutor())
        .thenCompose(
            approval -> client.approveToolCallAsync(sessionId, request.getCallId(), approval))
        .whenComplete(
            (ok, error) -> {
              if (error != null) {
                Throwable cause = unwrap(error);
                cancel("the approval of call " + request.getCallId() + " failed: " + cause, cause);
              }
            });
  }

  private static Throwable unwrap(Throwable error) {
    Throwable t = error;
    while ((t instanceof CompletionException || t instanceof ExecutionException)
        && t.getCause() != null) {
      t = t.getCause();
    }
    return t;
  }
}
