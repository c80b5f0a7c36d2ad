package dev.agentsidecar.client;

import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.util.concurrent.CompletableFuture;

/** A unary call as a future: cancelling the future cancels the call. */
final class CallFuture<Q, R> extends CompletableFuture<R> implements ClientResponseObserver<Q, R> {
  private volatile ClientCallStreamObserver<Q> call;

  @Override
  public void beforeStart(ClientCallStreamObserver<Q> requestStream) {
    call = requestStream;
  }

  @Override
  public void onNext(R value) {
    complete(value);
  }

  @Override
  public void onError(Throwable error) {
    completeExceptionally(AgentSidecarException.from(error));
  }

  @Override
  public void onCompleted() {}

  @Override
  public boolean cancel(boolean mayInterruptIfRunning) {
    boolean cancelled = super.cancel(mayInterruptIfRunning);
    ClientCallStreamObserver<Q> c = call;
    if (cancelled && c != null) {
      c.cancel("cancelled by the caller", null);
    }
    return cancelled;
  }
}
