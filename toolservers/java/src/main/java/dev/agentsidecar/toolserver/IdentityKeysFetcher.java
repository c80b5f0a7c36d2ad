package dev.agentsidecar.toolserver;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.agentsidecar.v1.GetIdentityKeysRequest;
import dev.agentsidecar.v1.GetIdentityKeysResponse;
import dev.agentsidecar.v1.IdentityKeysServiceGrpc;
import io.grpc.ChannelCredentials;
import io.grpc.ConnectivityState;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import java.util.Locale;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.logging.Logger;

/**
 * Fetches the sidecar's identity keys from its {@code agentsidecar.v1.IdentityKeysService}
 * ({@link ServeOptions#identityKeysFrom()}), by the rule of docs/tool-servers.md ("The signed
 * assertion"):
 *
 * <ul>
 *   <li>Who it trusts: plaintext only to this machine (a loopback address, {@code localhost}, a
 *       {@code unix:} socket); any other target, and any target given a CA file, is dialled with
 *       TLS, verified against the CA file or the system's roots.
 *   <li>When: at start, in the background; a failed fetch is tried again after 1 s, doubling to
 *       30 s; then again every {@code max_age} (300 s when the answer has none), and soon (at most
 *       once every 10 s) after an assertion names a kid the keys lack.
 *   <li>A failed refresh keeps the keys it has (a warning is logged).
 * </ul>
 *
 * <p>The JWKS is parsed as a keys file's is ({@link IdentityKeys#fromJwks}). One daemon thread
 * fetches; {@link #close} stops it and shuts the channel down.
 */
final class IdentityKeysFetcher implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger("dev.agentsidecar.toolserver");
  // HOST:PORT, with an IPv6 literal in brackets.
  private static final Pattern HOST_PORT = Pattern.compile("(\\[[0-9A-Fa-f:.%a-zA-Z]+\\]|[^\\[\\]:/\\s]+):([0-9]{1,5})");
  private static final Pattern IPV4 = Pattern.compile("[0-9]{1,3}(\\.[0-9]{1,3}){3}");

  /** The fetch's intervals: the rule's, or shorter ones for a test. */
  record Timing(Duration firstRetry, Duration maxRetry, Duration unknownKidInterval, Duration defaultMaxAge, Duration callTimeout) {
    static final Timing DEFAULT = new Timing(Duration.ofSeconds(1), Duration.ofSeconds(30), Duration.ofSeconds(10),
        Duration.ofSeconds(300), Duration.ofSeconds(10));
  }

  private final String target;
  private final ObjectMapper json;
  private final Timing timing;
  private final ManagedChannel channel;
  private final IdentityKeysServiceGrpc.IdentityKeysServiceBlockingStub stub;
  private final ScheduledExecutorService scheduler;
  private final AtomicBoolean kidQueued = new AtomicBoolean();
  private volatile boolean closed;
  private volatile IdentityKeys keys; // null until the first answer
  private volatile String lastError; // null: no try failed yet

  // The scheduler's thread only.
  private String lastJwks;
  private ScheduledFuture<?> next;
  private long nextAt;
  private long lastStart;
  private boolean fetchedOnce;
  private Duration backoff;

  /**
   * A fetcher of the keys at {@code target} ({@code HOST:PORT} or {@code unix:/PATH}); {@code
   * caFile} (or null) holds the roots to verify a TLS target with. Nothing is fetched before
   * {@link #start}.
   *
   * @throws IllegalArgumentException the target is no such address, or the CA file cannot be read
   */
  IdentityKeysFetcher(String target, String caFile, ObjectMapper json, Timing timing) {
    this.target = target;
    this.json = json;
    this.timing = timing;
    boolean tls = caFile != null || !isLocal(target);
    ChannelCredentials credentials;
    if (!tls) {
      credentials = InsecureChannelCredentials.create();
    } else if (caFile == null) {
      credentials = TlsChannelCredentials.create(); // the system's roots
    } else {
      try {
        credentials = TlsChannelCredentials.newBuilder().trustManager(new ByteArrayInputStream(caCertificates(caFile))).build();
      } catch (IOException e) {
        throw new IllegalArgumentException("cannot read the CA file of the identity keys' TLS " + caFile + ": " + e.getMessage(), e);
      }
    }
    this.channel = Grpc.newChannelBuilder(target, credentials).build();
    this.stub = IdentityKeysServiceGrpc.newBlockingStub(channel);
    ScheduledThreadPoolExecutor executor = new ScheduledThreadPoolExecutor(1, runnable -> {
      Thread thread = new Thread(runnable, "identity-keys-" + target);
      thread.setDaemon(true);
      return thread;
    });
    executor.setRemoveOnCancelPolicy(true);
    this.scheduler = executor;
    LOG.info("identity keys: fetching from " + target + (tls ? " over TLS" + (caFile == null ? " (the system's roots)" : " (roots from " + caFile + ")") : " in plaintext (a local target)"));
  }

  /** Fetches now, in the background, and from then on by the rule. */
  void start() {
    submit(this::fetch);
  }

  /** Where the keys come from. */
  String target() {
    return target;
  }

  /** The keys of the last answer; null before the first. */
  IdentityKeys keys() {
    return keys;
  }

  /** Why the last fetch failed, for a call refused before the first answer; null before a failure. */
  String lastError() {
    return lastError;
  }

  /** An assertion named {@code kid}, which the keys lack: fetch again soon, at most once every 10 s. */
  void unknownKid(String kid) {
    if (keys == null || closed || !kidQueued.compareAndSet(false, true)) {
      return;
    }
    submit(() -> {
      kidQueued.set(false);
      kidSeen(kid);
    });
  }

  /** Stops fetching and shuts the channel down. */
  @Override
  public void close() {
    closed = true;
    scheduler.shutdownNow();
    channel.shutdownNow();
  }

  private void submit(Runnable task) {
    try {
      scheduler.execute(task);
    } catch (RejectedExecutionException e) {
      // closed
    }
  }

  private void kidSeen(String kid) {
    IdentityKeys current = keys;
    if (closed || current == null || current.find(kid) != null) { // fetched meanwhile
      return;
    }
    long at = Math.max(System.nanoTime(), lastStart + timing.unknownKidInterval().toNanos());
    if (next != null && nextAt - at <= 0) {
      return; // a fetch is due by then already
    }
    LOG.info("identity keys: an assertion names kid " + clip(kid) + ", which the keys from " + target
        + " lack; fetching them again");
    schedule(at);
  }

  /** Fetches at {@code at} (System.nanoTime()), instead of when the next fetch was due. */
  private void schedule(long at) {
    if (next != null) {
      next.cancel(false);
    }
    nextAt = at;
    try {
      next = scheduler.schedule(this::fetch, Math.max(0, at - System.nanoTime()), TimeUnit.NANOSECONDS);
    } catch (RejectedExecutionException e) {
      next = null; // closed
    }
  }

  private void fetch() {
    if (closed) {
      return;
    }
    next = null;
    lastStart = System.nanoTime();
    if (channel.getState(false) == ConnectivityState.TRANSIENT_FAILURE) {
      // The channel's own reconnect backoff grows to minutes: a try by this schedule dials again.
      channel.resetConnectBackoff();
    }
    Duration again;
    try {
      GetIdentityKeysResponse answer = stub.withDeadlineAfter(timing.callTimeout().toNanos(), TimeUnit.NANOSECONDS)
          .getIdentityKeys(GetIdentityKeysRequest.getDefaultInstance());
      IdentityKeys current = keys;
      IdentityKeys fresh = current != null && answer.getJwks().equals(lastJwks)
          ? current // the same keys: what was verified with them stands
          : IdentityKeys.fromJwks(answer.getJwks(), target, json);
      Duration maxAge = answer.hasMaxAge()
          ? Duration.ofSeconds(answer.getMaxAge().getSeconds(), answer.getMaxAge().getNanos())
          : Duration.ZERO;
      again = maxAge.isNegative() || maxAge.isZero() ? timing.defaultMaxAge() : maxAge;
      lastJwks = answer.getJwks();
      backoff = null;
      keys = fresh;
      if (!fetchedOnce) {
        LOG.info("identity keys fetched from " + target + ": " + fresh.size() + " keys; again in " + seconds(again));
      } else if (fresh != current) {
        LOG.info("identity keys refreshed from " + target + ": " + fresh.size() + " keys; again in " + seconds(again));
      } else {
        LOG.fine("identity keys from " + target + " unchanged; again in " + seconds(again));
      }
      fetchedOnce = true;
    } catch (StatusRuntimeException | IllegalArgumentException e) {
      if (closed) {
        return;
      }
      backoff = backoff == null ? timing.firstRetry() : min(backoff.multipliedBy(2), timing.maxRetry());
      again = backoff;
      String why = e instanceof StatusRuntimeException failed
          ? failed.getStatus().getCode() + (failed.getStatus().getDescription() == null ? "" : ": " + failed.getStatus().getDescription())
          : e.getMessage();
      lastError = clip(why);
      IdentityKeys current = keys;
      if (current == null) {
        LOG.warning("identity keys not fetched from " + target + ": " + lastError + "; trying again in " + seconds(again));
      } else {
        LOG.warning("identity keys not refreshed from " + target + ": " + lastError + "; keeping the " + current.size()
            + " keys fetched before; trying again in " + seconds(again));
      }
    }
    schedule(System.nanoTime() + again.toNanos());
  }

  /**
   * Whether {@code target} is on this machine: a {@code unix:} socket, {@code localhost}, or a
   * loopback IP literal (no name is resolved: a name's address is not this machine's to vouch for).
   *
   * @throws IllegalArgumentException it is neither {@code HOST:PORT} nor {@code unix:/PATH}
   */
  static boolean isLocal(String target) {
    if (target.startsWith("unix:")) {
      if (!target.startsWith("unix:/") || target.length() < "unix:/x".length()) {
        throw new IllegalArgumentException("identityKeysFrom \"" + target + "\": a unix socket is unix:/ABSOLUTE/PATH");
      }
      return true;
    }
    Matcher matcher = HOST_PORT.matcher(target);
    if (!matcher.matches() || Integer.parseInt(matcher.group(2)) > 65535 || Integer.parseInt(matcher.group(2)) == 0) {
      throw new IllegalArgumentException("identityKeysFrom \"" + target + "\" is neither HOST:PORT nor unix:/PATH: "
          + "the sidecar's gRPC address");
    }
    String host = matcher.group(1);
    if (host.startsWith("[")) {
      host = host.substring(1, host.length() - 1);
      int zone = host.indexOf('%');
      return literalLoopback(zone < 0 ? host : host.substring(0, zone));
    }
    String lower = host.toLowerCase(Locale.ROOT);
    if (lower.equals("localhost") || lower.equals("localhost.")) {
      return true;
    }
    return IPV4.matcher(host).matches() && literalLoopback(host);
  }

  private static boolean literalLoopback(String literal) {
    try {
      return InetAddress.getByName(literal).isLoopbackAddress(); // a literal: nothing is looked up
    } catch (UnknownHostException e) {
      return false;
    }
  }

  /** The certificates of a PEM CA file, read and parsed now: a file that cannot be read fails start. */
  private static byte[] caCertificates(String caFile) {
    byte[] data;
    try {
      data = Files.readAllBytes(Path.of(caFile));
    } catch (IOException e) {
      String why = e instanceof java.nio.file.NoSuchFileException ? "no such file" : String.valueOf(e.getMessage());
      throw new IllegalArgumentException("cannot read the CA file of the identity keys' TLS " + caFile + ": " + why, e);
    }
    try {
      if (CertificateFactory.getInstance("X.509").generateCertificates(new ByteArrayInputStream(data)).isEmpty()) {
        throw new CertificateException("no certificate");
      }
    } catch (CertificateException e) {
      throw new IllegalArgumentException("the CA file of the identity keys' TLS " + caFile + " holds no PEM certificate: "
          + e.getMessage(), e);
    }
    return data;
  }

  private static Duration min(Duration a, Duration b) {
    return a.compareTo(b) <= 0 ? a : b;
  }

  private static String seconds(Duration duration) {
    return duration.toMillis() % 1000 == 0 ? duration.toSeconds() + " s" : duration.toMillis() / 1000.0 + " s";
  }

  private static String clip(String text) {
    return text == null ? "null" : text.length() > 200 ? text.substring(0, 200) + "…" : text;
  }
}
