package dev.agentsidecar.client;

import dev.agentsidecar.v1.StreamRunResponse;
import dev.agentsidecar.v1.WatchRunRequest;
import dev.agentsidecar.v1.WatchRunResponse;
import io.grpc.Context;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.function.Function;

/**
 * The events of a background run after a given sequence, the stored ones first, then each as it
 * is stored, until the last ({@code run_finished}). Iterate it once; close it to stop watching
 * (the run goes on: {@link AgentClient#cancelRun} cancels it).
 *
 * <pre>{@code
 * try (RunWatch events = client.watchRun(runId, lastSeen)) {
 *   for (StreamRunResponse event : events) {
 *     lastSeen = event.getSequence();
 *   }
 * }
 * }</pre>
 *
 * <p>A stream that breaks off before the last event (the sidecar restarting, a replica stopping,
 * the network, or the deadline of one stream: each gets the client's timeout) is watched again
 * from the last event returned, after a short backoff: no event is missed and none is returned
 * twice. A failure that watching again cannot mend ({@code RUN_NOT_FOUND} ...) surfaces from
 * {@code hasNext()} as an {@link AgentSidecarException}. Reading is single-threaded; {@link
 * #close()} may be called from any thread.
 */
public final class RunWatch implements Iterable<StreamRunResponse>, AutoCloseable {
  private static final Set<Status.Code> RECONNECT =
      Set.of(Status.Code.UNAVAILABLE, Status.Code.CANCELLED, Status.Code.DEADLINE_EXCEEDED);

  private final String runId;
  private final Function<WatchRunRequest, Iterator<WatchRunResponse>> open;
  private final Events events = new Events();
  private long last;
  private volatile boolean closed;
  private volatile Context.CancellableContext context;
  private boolean iterated;

  RunWatch(
      String runId,
      long afterSequence,
      Function<WatchRunRequest, Iterator<WatchRunResponse>> open) {
    this.runId = runId;
    this.last = afterSequence;
    this.open = open;
  }

  /** The events; may be called once. */
  @Override
  public synchronized Iterator<StreamRunResponse> iterator() {
    if (iterated) {
      throw new IllegalStateException("a RunWatch can be iterated only once");
    }
    iterated = true;
    return events;
  }

  /** Stops watching; the iterator then ends with a {@link CancellationException}. */
  @Override
  public void close() {
    closed = true;
    Context.CancellableContext current = context;
    if (current != null) {
      current.cancel(null);
    }
  }

  private final class Events implements Iterator<StreamRunResponse> {
    private Iterator<WatchRunResponse> stream;
    private StreamRunResponse head;
    private boolean done;
    private long backoffMillis = 50;

    @Override
    public boolean hasNext() {
      while (head == null && !done) {
        if (closed) {
          throw new CancellationException("the watch was closed");
        }
        try {
          if (stream == null) {
            Context.CancellableContext opened = Context.current().withCancellation();
            context = opened;
            WatchRunRequest request =
                WatchRunRequest.newBuilder().setRunId(runId).setAfterSequence((int) last).build();
            stream = opened.call(() -> open.apply(request));
          }
          if (stream.hasNext()) {
            head = stream.next().getEvent();
            last = head.getSequence();
            backoffMillis = 50;
            done = head.hasRunFinished();
            if (done) {
              context.cancel(null);
            }
          } else {
            done = true; // ended cleanly: every event after the last one was sent
          }
        } catch (StatusRuntimeException e) {
          AgentSidecarException failure = AgentSidecarException.from(e);
          if (closed) {
            throw new CancellationException("the watch was closed");
          }
          if (!RECONNECT.contains(failure.code()) || !failure.reason().isEmpty()) {
            done = true;
            throw failure;
          }
          stream = null;
          pause();
        } catch (Exception e) {
          done = true;
          throw new IllegalStateException("opening the watch failed", e);
        }
      }
      return head != null;
    }

    @Override
    public StreamRunResponse next() {
      if (!hasNext()) {
        throw new NoSuchElementException();
      }
      StreamRunResponse event = head;
      head = null;
      return event;
    }

    private void pause() {
      try {
        Thread.sleep(backoffMillis);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        close();
        throw new CancellationException("interrupted while watching again");
      }
      backoffMillis = Math.min(2_000, backoffMillis * 2);
    }
  }
}
