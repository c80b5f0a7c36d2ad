package dev.agentsidecar.client;

import dev.agentsidecar.v1.RunResult;
import dev.agentsidecar.v1.StreamRunResponse;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;

/**
 * A streamed run as a future of its result: each event goes to a consumer as it arrives;
 * cancelling the future cancels the run.
 */
final class RunFuture extends CompletableFuture<RunResult> implements RunCall.Sink {
  private final Consumer<StreamRunResponse> onEvent;
  private volatile RunCall call;
  private RunResult result;

  RunFuture(Consumer<StreamRunResponse> onEvent) {
    this.onEvent = onEvent;
  }

  void attach(RunCall call) {
    this.call = call;
  }

  @Override
  public void event(StreamRunResponse event) {
    if (isDone()) {
      return;
    }
    try {
      onEvent.accept(event);
    } catch (RuntimeException e) {
      completeExceptionally(e);
      call.cancel("the event consumer failed: " + e, e);
      return;
    }
    if (event.hasRunFinished()) {
      result = event.getRunFinished();
    }
  }

  @Override
  public void failed(Throwable error) {
    completeExceptionally(AgentSidecarException.from(error));
  }

  @Override
  public void completed() {
    if (result != null) {
      complete(result);
    } else {
      completeExceptionally(new IllegalStateException("the run's stream ended without run_finished"));
    }
  }

  @Override
  public boolean cancel(boolean mayInterruptIfRunning) {
    boolean cancelled = super.cancel(mayInterruptIfRunning);
    if (cancelled) {
      call.cancel("cancelled by the caller", null);
    }
    return cancelled;
  }
}
