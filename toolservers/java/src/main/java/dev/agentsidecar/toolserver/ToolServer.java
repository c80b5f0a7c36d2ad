package dev.agentsidecar.toolserver;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import io.grpc.Server;
import io.grpc.ServerCredentials;
import io.grpc.ServerInterceptors;
import io.grpc.TlsServerCredentials;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.protobuf.services.HealthStatusManager;
import io.grpc.protobuf.services.ProtoReflectionService;
import io.grpc.protobuf.services.ProtoReflectionServiceV1;
import io.grpc.util.AdvancedTlsX509KeyManager;
import io.grpc.util.AdvancedTlsX509TrustManager;
import java.io.File;
import java.io.IOException;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;

/**
 * A set of tools served over the tool-server protocol: the methods annotated {@link Tool} of
 * the objects (or classes, for static methods) registered with {@link #register}.
 *
 * <pre>{@code
 * public static void main(String[] args) {
 *   new ToolServer("customers").register(new Customers()).main(args);
 * }
 * }</pre>
 *
 * <p>Serving: health ({@code grpc.health.v1}, SERVING for "" and {@code
 * agentsidecar.v1.ToolService}), reflection (v1 and v1alpha), keepalive pings accepted every 10
 * s also without calls, optional TLS or mutual TLS (certificates reread when their files change),
 * a bearer token, and the verification of who each call serves (the sidecar's signed identity
 * assertion, {@link ServeOptions#withIdentity}). On SIGTERM or SIGINT the server drains: new
 * calls are refused with UNAVAILABLE, health turns NOT_SERVING, running calls get the grace
 * period, then it stops.
 */
public final class ToolServer {
  private static final Logger LOG = Logger.getLogger("dev.agentsidecar.toolserver");
  private static final String SERVICE_NAME = "agentsidecar.v1.ToolService";
  // After the calls drained, how long other RPCs (Health.Watch streams never end on their
  // own) get before the server stops: time to deliver NOT_SERVING.
  private static final long FINAL_GRACE_MS = 250;
  private static final long CERT_REFRESH_SECONDS = 5;

  private final String name;
  private final String version;
  private final ObjectMapper json =
      JsonMapper.builder()
          .addModule(new com.fasterxml.jackson.datatype.jdk8.Jdk8Module())
          .enable(DeserializationFeature.USE_BIG_INTEGER_FOR_INTS)
          .enable(DeserializationFeature.FAIL_ON_NULL_FOR_PRIMITIVES)
          .build();
  private final List<RegisteredTool> tools = new ArrayList<>();
  private boolean serving;
  private IdentityKeysFetcher.Timing keysTiming = IdentityKeysFetcher.Timing.DEFAULT;

  /** A server called {@code name} (for its logs); tools declare their own versions or none. */
  public ToolServer(String name) {
    this(name, "");
  }

  /** A server whose tools have {@code version} unless they declare their own. */
  public ToolServer(String name, String version) {
    this.name = name;
    this.version = version;
  }

  /**
   * Registers every {@link Tool} method of {@code tools}: an object for its instance methods, or
   * a {@code Class} for its static ones.
   *
   * @throws ToolDefinitionException when a tool is declared wrongly, or a name is taken
   */
  public synchronized ToolServer register(Object tools) {
    if (serving) {
      throw new ToolDefinitionException("the server is serving already; register every tool first");
    }
    Class<?> type = tools instanceof Class<?> cls ? cls : tools.getClass();
    Object target = tools instanceof Class<?> ? null : tools;
    int found = 0;
    // Class files keep no declaration order: tools are listed by method name, a stable order.
    Method[] methods = type.getMethods();
    java.util.Arrays.sort(methods, java.util.Comparator.comparing(Method::getName));
    for (Method method : methods) {
      if (!method.isAnnotationPresent(Tool.class) || (target == null) != Modifier.isStatic(method.getModifiers())) {
        continue;
      }
      RegisteredTool tool = new RegisteredTool(target, method, version, json);
      for (RegisteredTool other : this.tools) {
        if (other.name.equals(tool.name)) {
          throw new ToolDefinitionException("tool \"" + tool.name + "\" is already registered on server \""
              + name + "\"; tool names must be unique, set @Tool(name = \"...\") to rename one");
        }
      }
      this.tools.add(tool);
      found++;
    }
    if (found == 0) {
      throw new ToolDefinitionException(type.getName() + " has no public " + (target == null ? "static " : "")
          + "method annotated @Tool" + (target == null ? "; pass an object for instance methods" : ""));
    }
    return this;
  }

  /** The intervals of fetching the identity keys from a sidecar: shorter ones for a test. */
  synchronized ToolServer keysTiming(IdentityKeysFetcher.Timing timing) {
    this.keysTiming = timing;
    return this;
  }

  /** The registered tools' names, in registration order. */
  public synchronized List<String> toolNames() {
    return tools.stream().map(t -> t.name).toList();
  }

  /**
   * Listens as {@code options} say and serves until {@link Running#drain} or {@link
   * Running#stop}; returns once accepting connections.
   *
   * @throws ToolServerException when the address cannot be bound, or the TLS files, the identity
   *     keys or the CA file to fetch them with cannot be read
   */
  public Running start(ServeOptions options) {
    List<RegisteredTool> frozen;
    IdentityKeysFetcher.Timing timing;
    synchronized (this) {
      serving = true;
      frozen = List.copyOf(tools);
      timing = keysTiming;
    }
    ScheduledExecutorService refresher = Executors.newSingleThreadScheduledExecutor(daemon(name + "-tls"));
    ServerCredentials credentials;
    try {
      credentials = credentials(options, refresher);
    } catch (RuntimeException e) {
      refresher.shutdownNow();
      throw e;
    }
    // The keys file read before anything starts; keys from a sidecar fetched from now on, in the background.
    IdentityVerifier identity;
    try {
      identity = IdentityVerifier.of(options, json, timing);
    } catch (RuntimeException e) {
      refresher.shutdownNow();
      throw e;
    }
    ExecutorService executor = Executors.newCachedThreadPool(daemon(name + "-tool"));
    ToolService service = new ToolService(frozen, executor, json, identity);
    HealthStatusManager health = new HealthStatusManager();
    NettyServerBuilder builder =
        NettyServerBuilder.forAddress(new InetSocketAddress(options.host(), options.port()), credentials)
            .permitKeepAliveTime(10, TimeUnit.SECONDS)
            .permitKeepAliveWithoutCalls(true)
            .addService(ServerInterceptors.intercept(service, new TokenCheck(options.token())))
            .addService(health.getHealthService())
            .addService(ProtoReflectionServiceV1.newInstance())
            .addService(legacyReflection());
    Server server = builder.build();
    try {
      server.start();
    } catch (IOException e) {
      executor.shutdownNow();
      refresher.shutdownNow();
      if (identity != null) {
        identity.close();
      }
      throw new ToolServerException("cannot listen on " + options.host() + ":" + options.port() + ": " + e.getMessage(), e);
    }
    health.setStatus("", io.grpc.health.v1.HealthCheckResponse.ServingStatus.SERVING);
    health.setStatus(SERVICE_NAME, io.grpc.health.v1.HealthCheckResponse.ServingStatus.SERVING);
    String host = options.host().contains(":") ? "[" + options.host() + "]" : options.host();
    String address = host + ":" + server.getPort();
    LOG.info(name + ": serving " + frozen.size() + " tools on " + address);
    return new Running(address, server, service, health, executor, refresher, identity, options.grace());
  }

  /**
   * Serves until SIGTERM or SIGINT, then drains and returns; prints {@code listening on
   * HOST:PORT} to stdout once accepting connections. A second signal stops without waiting.
   */
  @SuppressWarnings("removal")
  public void serve(ServeOptions options) throws InterruptedException {
    Running running = start(options);
    CountDownLatch first = new CountDownLatch(1);
    CountDownLatch second = new CountDownLatch(1);
    sun.misc.SignalHandler handler = signal -> {
      if (first.getCount() > 0) {
        first.countDown();
      } else {
        second.countDown();
      }
    };
    sun.misc.Signal.handle(new sun.misc.Signal("TERM"), handler);
    sun.misc.Signal.handle(new sun.misc.Signal("INT"), handler);
    PrintStream out = System.out;
    out.println("listening on " + running.address());
    out.flush();
    first.await();
    Thread hurry = new Thread(() -> {
      try {
        second.await();
        running.stop();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }, name + "-second-signal");
    hurry.setDaemon(true);
    hurry.start();
    running.drain(options.grace());
  }

  /**
   * A tool server's whole main: reads {@code --host}, {@code --port}, {@code --grace}, {@code
   * --tls-cert}, {@code --tls-key}, {@code --tls-client-ca}, {@code --token-env} or {@code
   * --token-file}, {@code --identity-keys} or {@code --identity-keys-from} (with {@code
   * --identity-keys-ca}), {@code --identity-audience}, {@code
   * --identity-issuer}, {@code --require-identity} and {@code --identity-leeway}, serves until
   * SIGTERM, drains and exits 0; exits 2 on a bad flag, 1 when it cannot serve.
   */
  public void main(String[] args) {
    ServeOptions options;
    try {
      options = ServeOptions.parse(args, System.getenv());
    } catch (IllegalArgumentException e) {
      System.err.println(name + ": " + e.getMessage() + "\n" + ServeOptions.USAGE);
      System.exit(2);
      return;
    }
    try {
      serve(options);
    } catch (ToolServerException e) {
      System.err.println(name + ": " + e.getMessage());
      System.exit(1);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    System.exit(0);
  }

  @SuppressWarnings("deprecation")
  private static io.grpc.BindableService legacyReflection() {
    return ProtoReflectionService.newInstance(); // v1alpha, for older grpcurl and tools
  }

  private static ServerCredentials credentials(ServeOptions options, ScheduledExecutorService refresher) {
    if (options.tlsCertFile() == null) {
      return io.grpc.InsecureServerCredentials.create();
    }
    try {
      AdvancedTlsX509KeyManager keys = new AdvancedTlsX509KeyManager();
      keys.updateIdentityCredentials(new File(options.tlsCertFile()), new File(options.tlsKeyFile()),
          CERT_REFRESH_SECONDS, TimeUnit.SECONDS, refresher);
      TlsServerCredentials.Builder tls = TlsServerCredentials.newBuilder().keyManager(keys);
      if (options.tlsClientCaFile() != null) {
        AdvancedTlsX509TrustManager trust = AdvancedTlsX509TrustManager.newBuilder()
            .setVerification(AdvancedTlsX509TrustManager.Verification.CERTIFICATE_ONLY_VERIFICATION)
            .build();
        trust.updateTrustCredentials(new File(options.tlsClientCaFile()), CERT_REFRESH_SECONDS, TimeUnit.SECONDS, refresher);
        tls.trustManager(trust).clientAuth(TlsServerCredentials.ClientAuth.REQUIRE);
      }
      return tls.build();
    } catch (IOException | GeneralSecurityException e) {
      throw new ToolServerException("cannot read the TLS files: " + e.getMessage(), e);
    }
  }

  private static java.util.concurrent.ThreadFactory daemon(String prefix) {
    java.util.concurrent.atomic.AtomicInteger count = new java.util.concurrent.atomic.AtomicInteger();
    return runnable -> {
      Thread thread = new Thread(runnable, prefix + "-" + count.incrementAndGet());
      thread.setDaemon(true);
      return thread;
    };
  }

  /** A listening server. */
  public static final class Running {
    private final String address;
    private final Server server;
    private final ToolService service;
    private final HealthStatusManager health;
    private final ExecutorService executor;
    private final ScheduledExecutorService refresher;
    private final IdentityVerifier identity; // null: none
    private final Duration grace;

    Running(String address, Server server, ToolService service, HealthStatusManager health,
        ExecutorService executor, ScheduledExecutorService refresher, IdentityVerifier identity, Duration grace) {
      this.address = address;
      this.server = server;
      this.service = service;
      this.health = health;
      this.executor = executor;
      this.refresher = refresher;
      this.identity = identity;
      this.grace = grace;
    }

    /** {@code HOST:PORT} it listens on. */
    public String address() {
      return address;
    }

    public int port() {
      return server.getPort();
    }

    /** How many tool calls run now. */
    public int inFlight() {
      return service.inFlight();
    }

    /** Drains with the configured grace period; see {@link #drain(Duration)}. */
    public void drain() throws InterruptedException {
      drain(grace);
    }

    /**
     * Refuses new calls with UNAVAILABLE, turns health NOT_SERVING, waits up to {@code grace}
     * for running calls, then stops (interrupting what still runs).
     */
    public void drain(Duration grace) throws InterruptedException {
      // Refuse first, then announce: whoever sees NOT_SERVING is refused too.
      service.drain();
      health.enterTerminalState();
      LOG.info("draining: " + service.inFlight() + " calls running, up to " + grace.toMillis() + " ms to finish");
      long end = System.nanoTime() + grace.toNanos();
      synchronized (service) {
        while (service.inFlight() > 0 && System.nanoTime() < end && !server.isShutdown()) {
          service.wait(Math.max(1, (end - System.nanoTime()) / 1_000_000));
        }
      }
      if (service.inFlight() > 0) {
        LOG.warning("cancelling " + service.inFlight() + " calls still running");
        stop();
        return;
      }
      server.shutdown();
      if (!server.awaitTermination(FINAL_GRACE_MS, TimeUnit.MILLISECONDS)) {
        server.shutdownNow();
      }
      server.awaitTermination(5, TimeUnit.SECONDS);
      executor.shutdownNow();
      refresher.shutdownNow();
      closeIdentity();
      LOG.info("stopped");
    }

    private void closeIdentity() {
      if (identity != null) {
        identity.close(); // stops fetching the keys
      }
    }

    /** Stops at once: running calls are cancelled and their threads interrupted. */
    public void stop() {
      server.shutdownNow();
      executor.shutdownNow();
      refresher.shutdownNow();
      closeIdentity();
      try {
        server.awaitTermination(5, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  static String readToken(String file) {
    try {
      return Files.readString(Path.of(file), StandardCharsets.UTF_8).strip();
    } catch (IOException e) {
      throw new IllegalArgumentException("--token-file " + file + ": " + e.getMessage(), e);
    }
  }
}
