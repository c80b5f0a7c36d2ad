package dev.agentsidecar.client;

import dev.agentsidecar.v1.RunResult;
import dev.agentsidecar.v1.StreamRunResponse;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.Spliterator;
import java.util.Spliterators;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CancellationException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;

/**
 * The events of one streamed run, read as they happen: {@code run_started} first, {@code
 * run_finished} last. Iterate it once (like {@link java.nio.file.DirectoryStream}), or use {@link
 * #stream()}; close it when done, which cancels the run if it is still going.
 *
 * <pre>{@code
 * try (RunStream events = client.stream(sessionId, "Where is my parcel?")) {
 *   for (StreamRunResponse event : events) {
 *     if (event.hasTextDelta()) System.out.print(event.getTextDelta().getText());
 *   }
 * }
 * }</pre>
 *
 * <p>A failed call surfaces from {@code hasNext()} as an {@link AgentSidecarException}; after
 * {@link #cancel()} it surfaces as a {@link CancellationException}. Reading is single-threaded;
 * {@link #cancel()} and {@link #close()} may be called from any thread.
 */
public final class RunStream implements Iterable<StreamRunResponse>, AutoCloseable {
  private static final int WINDOW = 16;
  private static final Object END = new Object();

  private final BlockingQueue<Object> queue = new LinkedBlockingQueue<>();
  private final Events events = new Events();
  private RunCall call;
  private volatile boolean cancelled;
  private volatile boolean ended;
  private boolean iterated;

  RunStream() {}

  /** The sink that the call feeds; {@link #attach} must follow before reading. */
  RunCall.Sink sink() {
    return new RunCall.Sink() {
      @Override
      public void event(StreamRunResponse event) {
        queue.add(event);
      }

      @Override
      public void failed(Throwable error) {
        queue.add(error);
      }

      @Override
      public void completed() {
        queue.add(END);
      }
    };
  }

  void attach(RunCall call) {
    this.call = call;
  }

  static int window() {
    return WINDOW;
  }

  /** The events; may be called once. */
  @Override
  public synchronized Iterator<StreamRunResponse> iterator() {
    if (iterated) {
      throw new IllegalStateException("a RunStream can be iterated only once");
    }
    iterated = true;
    return events;
  }

  /** The events as a sequential {@link Stream}; closing it closes this. */
  public Stream<StreamRunResponse> stream() {
    return StreamSupport.stream(
            Spliterators.spliteratorUnknownSize(
                iterator(), Spliterator.ORDERED | Spliterator.NONNULL),
            false)
        .onClose(this::close);
  }

  /**
   * Reads the remaining events and returns the run's result (its {@code run_finished} event).
   *
   * @throws AgentSidecarException the call failed
   * @throws CancellationException the run was cancelled with {@link #cancel()}
   */
  public RunResult result() {
    Iterator<StreamRunResponse> it;
    synchronized (this) {
      iterated = true;
      it = events;
    }
    while (it.hasNext()) {
      it.next();
    }
    if (events.result == null) {
      throw new IllegalStateException("the run's stream ended without run_finished");
    }
    return events.result;
  }

  /** Cancels the run: the sidecar stops it and every tool call in flight. */
  public void cancel() {
    if (!ended) {
      cancelled = true;
      call.cancel("cancelled by the caller", null);
    }
  }

  /** Whether {@link #cancel()} was called before the stream ended. */
  public boolean isCancelled() {
    return cancelled;
  }

  /** Cancels the run if its stream has not ended yet. */
  @Override
  public void close() {
    cancel();
  }

  private final class Events implements Iterator<StreamRunResponse> {
    private StreamRunResponse head;
    private RuntimeException failure;
    private boolean done;
    private RunResult result;

    @Override
    public boolean hasNext() {
      if (head != null) {
        return true;
      }
      if (done) {
        if (failure != null) {
          throw failure;
        }
        return false;
      }
      Object item;
      try {
        item = queue.take();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        cancel();
        throw new CancellationException("interrupted while waiting for the run's next event");
      }
      if (item instanceof StreamRunResponse event) {
        head = event;
        if (event.hasRunFinished()) {
          result = event.getRunFinished();
        }
        call.request(1);
        return true;
      }
      done = true;
      ended = true;
      if (item instanceof Throwable error) {
        failure = cancelled ? cancellation(error) : AgentSidecarException.from(error);
        throw failure;
      }
      return false;
    }

    @Override
    public StreamRunResponse next() {
      if (!hasNext()) {
        throw new NoSuchElementException("the run's stream has ended");
      }
      StreamRunResponse event = head;
      head = null;
      return event;
    }
  }

  private static CancellationException cancellation(Throwable error) {
    CancellationException e = new CancellationException("the run was cancelled");
    e.initCause(error);
    return e;
  }
}
